// Command funclen lists the functions of the repository that are longer
// than a limit (issue 27: no function over 80 lines), and fails when one of
// them is not on its allow list.
//
//	go run ./internal/cmd/funclen -max 80
//
// It reads every non-test .go file under the root (both modules; hidden,
// testdata and vendor directories skipped) except generated files (a
// "// Code generated … DO NOT EDIT." line before the package clause). A
// function's length runs from its func keyword to its closing brace, as
// the apisurface tool counts it. Test files are left out: their long
// functions are table-driven test data.
//
// Every function over the limit is printed with its length. The exit
// status is 1 when one of them is not in allowed, 2 when the tree cannot
// be read. An entry of allowed that no longer matches a long function is
// reported, so that the list can be emptied as the splits land.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// allowed are the functions that may stay over the limit for now, by
// "path/of/file.go Recv.Name" (slash-separated, from the root), each with
// its reason.
var allowed = map[string]string{}

func main() {
	root := flag.String("root", ".", "repository root")
	max := flag.Int("max", 80, "longest function allowed, in lines")
	flag.Parse()
	failed, err := check(os.Stdout, *root, *max, allowed)
	if err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// fn is one function over the limit.
type fn struct {
	key   string // "path Recv.Name", the allow list's key
	line  int
	lines int
}

// check prints to w every function under root longer than max lines and
// reports whether one of them is not in allow.
func check(w io.Writer, root string, max int, allow map[string]string) (failed bool, err error) {
	long, err := longFuncs(root, max)
	if err != nil {
		return false, err
	}
	sort.SliceStable(long, func(i, j int) bool { return long[i].lines > long[j].lines })
	fmt.Fprintf(w, "functions over %d lines (non-test, non-generated files): %d\n", max, len(long))
	seen := map[string]bool{}
	for _, f := range long {
		path, name, _ := strings.Cut(f.key, " ")
		note := "NOT ALLOWED"
		if reason, ok := allow[f.key]; ok {
			note = "allowed: " + reason
			seen[f.key] = true
		} else {
			failed = true
		}
		fmt.Fprintf(w, "  %4d  %s:%d %s  (%s)\n", f.lines, path, f.line, name, note)
	}
	var stale []string
	for k := range allow {
		if !seen[k] {
			stale = append(stale, k)
		}
	}
	slices.Sort(stale)
	for _, k := range stale {
		fmt.Fprintf(w, "  allow list entry no longer needed (within %d lines, or gone): %s\n", max, k)
	}
	if failed {
		fmt.Fprintf(w, "funclen: split the functions marked NOT ALLOWED into pieces of at most %d lines\n", max)
	}
	return failed, nil
}

// longFuncs returns the functions of root's non-test, non-generated Go
// files that are longer than max lines.
func longFuncs(root string, max int) ([]fn, error) {
	var long []fn
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		for _, decl := range f.Decls {
			d, ok := decl.(*ast.FuncDecl)
			if !ok || d.Body == nil {
				continue
			}
			start := fset.Position(d.Pos()).Line
			if n := fset.Position(d.Body.End()).Line - start + 1; n > max {
				long = append(long, fn{key: filepath.ToSlash(rel) + " " + funcName(d), line: start, lines: n})
			}
		}
		return nil
	})
	return long, err
}

// funcName is Name, or Recv.Name for a method (the receiver's type
// without * and type parameters).
func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	t := d.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name + "." + d.Name.Name
		default:
			return d.Name.Name
		}
	}
}
