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

// docDecl is one declaration as go doc lists it.
type docDecl struct {
	// Name is the name a doc link writes: Name for a package-level name,
	// Type.Name for a method or a field, and for an embedded field
	// Type.Embedded (empty when the embedded type is not a plain
	// identifier, such as *T or pkg.T).
	Name string
	// Text is what documents it: the doc comment; for a constant or a
	// variable also its group's doc comment and its line comment; for a
	// field also its line comment.
	Text string
	// Embedded marks an embedded field.
	Embedded bool
}

// docPackage parses the Go files of dir and returns the package as go doc
// presents it in mode, read from the non-test files, and the test files.
func docPackage(t *testing.T, dir string, mode doc.Mode) (*doc.Package, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	var files, tests []*ast.File
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
	pkg, err := doc.NewFromFiles(fset, files, "github.com/seckillkit/seckill/"+dir, mode)
	if err != nil {
		t.Fatal(err)
	}
	return pkg, tests
}

// eachDecl calls visit for every declaration pkg lists: constants and
// variables (one call per name), functions, types, their constants,
// variables, constructors and methods, and the fields of struct types and
// methods of interface types (one call per name, one per embedded field).
// The package overview, pkg.Doc, is not visited.
func eachDecl(pkg *doc.Package, visit func(docDecl)) {
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			for _, spec := range v.Decl.Specs {
				s := spec.(*ast.ValueSpec)
				text := joinDocs(v.Doc, s.Doc.Text(), s.Comment.Text())
				for _, n := range s.Names {
					visit(docDecl{Name: n.Name, Text: text})
				}
			}
		}
	}
	values(pkg.Consts)
	values(pkg.Vars)
	for _, f := range pkg.Funcs {
		visit(docDecl{Name: f.Name, Text: f.Doc})
	}
	for _, typ := range pkg.Types {
		visit(docDecl{Name: typ.Name, Text: typ.Doc})
		values(typ.Consts)
		values(typ.Vars)
		for _, f := range typ.Funcs {
			visit(docDecl{Name: f.Name, Text: f.Doc})
		}
		for _, m := range typ.Methods {
			visit(docDecl{Name: typ.Name + "." + m.Name, Text: m.Doc})
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
				text := joinDocs(fld.Doc.Text(), fld.Comment.Text())
				for _, n := range fld.Names {
					visit(docDecl{Name: typ.Name + "." + n.Name, Text: text})
				}
				if len(fld.Names) == 0 {
					d := docDecl{Text: text, Embedded: true}
					if id, ok := fld.Type.(*ast.Ident); ok {
						d.Name = typ.Name + "." + id.Name
					}
					visit(d)
				}
			}
		}
	}
}

// joinDocs joins the non-blank texts of docs, one paragraph each.
func joinDocs(docs ...string) string {
	var out []string
	for _, d := range docs {
		if strings.TrimSpace(d) != "" {
			out = append(out, strings.TrimRight(d, "\n"))
		}
	}
	return strings.Join(out, "\n\n")
}

// repoTextFiles returns the path of every file of the repository (both
// modules) that a user reads as text: Go source, SQL, markdown, HTML and
// the CI script. Hidden directories are skipped.
func repoTextFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && strings.HasPrefix(d.Name(), ".") && d.Name() != ".ci" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".sql", ".md", ".html":
			out = append(out, path)
		}
		if filepath.Dir(path) == ".ci" {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
