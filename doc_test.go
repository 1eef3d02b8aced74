package seckill_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
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
			fset := token.NewFileSet()
			var files []*ast.File
			var tests []*ast.File
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				name := e.Name()
				if e.IsDir() || !strings.HasSuffix(name, ".go") {
					continue
				}
				f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasSuffix(name, "_test.go") {
					tests = append(tests, f)
				} else {
					files = append(files, f)
				}
			}
			pkg, err := doc.NewFromFiles(fset, files, "github.com/seckillkit/seckill/"+dir)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(pkg.Doc) == "" {
				t.Errorf("package %s has no package overview", dir)
			}
			var missing []string
			need := func(name, text string) {
				if strings.TrimSpace(text) == "" {
					missing = append(missing, name)
				}
			}
			values := func(vs []*doc.Value) {
				for _, v := range vs {
					if strings.TrimSpace(v.Doc) != "" {
						continue // a documented group documents its names
					}
					for _, spec := range v.Decl.Specs {
						vs := spec.(*ast.ValueSpec)
						for _, n := range vs.Names {
							if n.IsExported() && vs.Doc.Text() == "" && vs.Comment.Text() == "" {
								missing = append(missing, n.Name)
							}
						}
					}
				}
			}
			values(pkg.Consts)
			values(pkg.Vars)
			for _, f := range pkg.Funcs {
				need(f.Name, f.Doc)
			}
			for _, typ := range pkg.Types {
				need(typ.Name, typ.Doc)
				values(typ.Consts)
				values(typ.Vars)
				for _, f := range typ.Funcs {
					need(f.Name, f.Doc)
				}
				for _, m := range typ.Methods {
					need(typ.Name+"."+m.Name, m.Doc)
				}
				for _, spec := range typ.Decl.Specs {
					ts := spec.(*ast.TypeSpec)
					var fields *ast.FieldList
					switch u := ts.Type.(type) {
					case *ast.StructType:
						fields = u.Fields
					case *ast.InterfaceType:
						fields = u.Methods
					}
					if fields == nil {
						continue
					}
					for _, fld := range fields.List {
						for _, n := range fld.Names {
							if n.IsExported() && fld.Doc.Text() == "" && fld.Comment.Text() == "" {
								missing = append(missing, typ.Name+"."+n.Name)
							}
						}
					}
				}
			}
			if len(missing) > 0 {
				t.Errorf("package %s: exported names without a doc comment: %s", dir, strings.Join(missing, ", "))
			}
			if dir == "." {
				return // the overview package has no code to run
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
