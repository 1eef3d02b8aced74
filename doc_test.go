package seckill_test

import (
	"go/ast"
	"go/doc"
	"strings"
	"testing"
)

// publicPackages are the packages a service imports; go doc of each must
// read as a complete manual.
var publicPackages = []string{"pgtx", "migrate", "inbox", "outbox", "inventory", "order", "seckilltest"}

// TestEveryExportedNameIsDocumented fails for an exported function, type,
// method, constant, variable or struct field without a doc comment, for a
// package without a package overview, and for a package without a
// runnable Example (one with an // Output: comment).
func TestEveryExportedNameIsDocumented(t *testing.T) {
	for _, dir := range append([]string{"."}, publicPackages...) {
		t.Run(dir, func(t *testing.T) {
			pkg, tests := docPackage(t, dir, 0)
			if strings.TrimSpace(pkg.Doc) == "" {
				t.Errorf("package %s has no package overview", dir)
			}
			var missing []string
			eachDecl(pkg, func(d docDecl) {
				if d.Embedded {
					return
				}
				// A method or field is named Type.Name: its own name decides.
				if name := d.Name[strings.LastIndex(d.Name, ".")+1:]; ast.IsExported(name) && strings.TrimSpace(d.Text) == "" {
					missing = append(missing, d.Name)
				}
			})
			if len(missing) > 0 {
				t.Errorf("package %s: exported names without a doc comment: %s", dir, strings.Join(missing, ", "))
			}
			runnable := 0
			for _, ex := range doc.Examples(tests...) {
				if ex.Output != "" || ex.EmptyOutput {
					runnable++
				}
			}
			if runnable == 0 {
				t.Errorf("package %s has no runnable Example (an Example function with an // Output: comment)", dir)
			}
		})
	}
}
