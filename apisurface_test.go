package seckill_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// surfaceBudget is the most exported identifiers (functions, methods of
// exported types, types, constants, variables; fields apart) each public
// package may declare: the v1 API keeps one name per operation, and a new
// name has to replace one or raise a budget on purpose.
var surfaceBudget = map[string]int{
	"pgtx": 40, "migrate": 28, "inbox": 35, "outbox": 51, "inventory": 87, "order": 61,
}

// TestAPISurface holds the six packages to their budgets (300 names in
// all) and every exported name to 30 characters.
func TestAPISurface(t *testing.T) {
	total := 0
	for _, dir := range []string{"pgtx", "migrate", "inbox", "outbox", "inventory", "order"} {
		names := exportedNames(t, dir)
		total += len(names)
		if len(names) > surfaceBudget[dir] {
			t.Errorf("package %s exports %d names, over its budget of %d", dir, len(names), surfaceBudget[dir])
		}
		for _, n := range names {
			if len(n[strings.LastIndex(n, ".")+1:]) > 30 {
				t.Errorf("package %s: %s is longer than 30 characters", dir, n)
			}
		}
	}
	if total > 300 {
		t.Errorf("the six packages export %d names, over 300", total)
	}
	t.Logf("%d exported names in the six packages", total)
}

// exportedNames lists the exported declarations of dir's non-test files.
func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			names = append(names, declNames(d)...)
		}
	}
	return names
}

// declNames are the exported names one declaration adds to the surface.
func declNames(d ast.Decl) []string {
	var names []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return nil
		}
		if d.Recv == nil {
			return []string{d.Name.Name}
		}
		recv := d.Recv.List[0].Type
		if s, ok := recv.(*ast.StarExpr); ok {
			recv = s.X
		}
		if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
			names = append(names, id.Name+"."+d.Name.Name)
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					names = append(names, s.Name.Name)
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	return names
}
