package seckill_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docLink matches a doc link as go doc renders one: [Name], [Name.Method],
// [pkg.Name], [pkg.Name.Method], optionally with a leading *.
var docLink = regexp.MustCompile(`\[\*?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){0,2})\]([^(:]|$)`)

// symbols returns every name a doc link in dir may point at: package-level
// names, and Type.Method and Type.Field for every type.
func symbols(t *testing.T, dir string) (map[string]bool, []string) {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	pkg, err := doc.NewFromFiles(fset, files, "github.com/seckillkit/seckill/"+dir, doc.AllDecls)
	if err != nil {
		t.Fatal(err)
	}
	syms := map[string]bool{}
	var texts []string
	add := func(name, text string) {
		syms[name] = true
		texts = append(texts, text)
	}
	texts = append(texts, pkg.Doc)
	values := func(prefix string, vs []*doc.Value) {
		for _, v := range vs {
			texts = append(texts, v.Doc)
			for _, n := range v.Names {
				syms[prefix+n] = true
			}
			for _, spec := range v.Decl.Specs {
				vs := spec.(*ast.ValueSpec)
				texts = append(texts, vs.Doc.Text(), vs.Comment.Text())
			}
		}
	}
	values("", pkg.Consts)
	values("", pkg.Vars)
	for _, f := range pkg.Funcs {
		add(f.Name, f.Doc)
	}
	for _, typ := range pkg.Types {
		add(typ.Name, typ.Doc)
		values("", typ.Consts)
		values("", typ.Vars)
		for _, f := range typ.Funcs {
			add(f.Name, f.Doc)
		}
		for _, m := range typ.Methods {
			add(typ.Name+"."+m.Name, m.Doc)
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
				texts = append(texts, fld.Doc.Text(), fld.Comment.Text())
				for _, n := range fld.Names {
					syms[typ.Name+"."+n.Name] = true
				}
				if len(fld.Names) == 0 { // an embedded type's promoted name
					if id, ok := fld.Type.(*ast.Ident); ok {
						syms[typ.Name+"."+id.Name] = true
					}
				}
			}
		}
	}
	return syms, texts
}

// TestDocLinksResolve fails for a doc link ([Name], [Type.Method],
// [pkg.Name]) in a public package that names nothing: go doc would print it
// as plain text, and a reader following it finds no such name (a rename
// that missed a comment).
func TestDocLinksResolve(t *testing.T) {
	all := map[string]map[string]bool{}
	texts := map[string][]string{}
	for _, dir := range publicPackages {
		all[dir], texts[dir] = symbols(t, dir)
	}
	for _, dir := range publicPackages {
		var bad []string
		for _, text := range texts[dir] {
			for _, m := range docLink.FindAllStringSubmatch(text, -1) {
				ref := m[1]
				if !strings.Contains(ref, ".") && !ast.IsExported(ref) && !all[dir][ref] {
					continue // an index such as msgs[i], not a link
				}
				parts := strings.SplitN(ref, ".", 2)
				if syms, ok := all[parts[0]]; ok && len(parts) == 2 && parts[0] != dir {
					if !syms[parts[1]] {
						bad = append(bad, ref)
					}
					continue
				}
				if all[dir][ref] || (len(parts) == 2 && parts[0] == dir && all[dir][parts[1]]) {
					continue
				}
				if len(parts) == 2 && !all[dir][parts[0]] {
					continue // another package's name (pgx.Tx, time.Duration): not checked
				}
				bad = append(bad, ref)
			}
		}
		if len(bad) > 0 {
			t.Errorf("package %s: doc links that name nothing: %s", dir, strings.Join(bad, ", "))
		}
	}
}
