package seckill_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// libraryPackages are the packages whose SQL this test checks.
var libraryPackages = []string{"pgtx", "migrate", "inbox", "outbox", "inventory", "order"}

// sqlWords recognises a string literal that is (part of) SQL text.
var sqlWords = regexp.MustCompile(`(?is)\bselect\b.*\bfrom\b|\bselect\s+\S+|\binsert\s+into\b|\bupdate\s+\S+\s+set\b|\bdelete\s+from\b|\b(create|alter|drop)\s+(table|schema|index)\b|\bset\s+local\b|\bbegin\s+isolation\b|\breturning\b|\bsavepoint\b|\bwhere\s+\S+\s*=|\{schema\}`)

// schemaName recognises the one caller-derived value allowed in SQL text:
// the schema, validated and quoted by migrate.QuoteSchema at construction.
var schemaName = regexp.MustCompile(`(?i)^(quoted\w*|\w*schema\w*)$`)

// sqlExceptions are non-constant operands of SQL text that are not the
// schema, each with why it is safe (file: expression).
var sqlExceptions = map[string]string{}

// namedStatement reports whether c fetches a named statement of a .sql
// file (internal/sqlfile): a Get with one string literal.
func namedStatement(c *ast.CallExpr) bool {
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Get" || len(c.Args) != 1 {
		return false
	}
	lit, ok := c.Args[0].(*ast.BasicLit)
	return ok && lit.Kind == token.STRING
}

// TestNoSQLFromCallerStrings scans the library's Go files: SQL text may be
// built only from constants, the quoted schema (substituted once, at
// construction) and the listed exceptions; everything else must be a bind
// parameter. Concretely it rejects (1) fmt.Sprintf with SQL in the format,
// (2) a + concatenation or strings.Builder write of SQL with an operand
// that is neither a constant, the schema nor an exception, (3) an
// Exec/Query/QueryRow/Queue whose SQL argument is built inline from
// something else, and (4) a "{schema}" placeholder replaced with anything
// but the quoted schema. Its own checker is tested on bad code first.
func TestNoSQLFromCallerStrings(t *testing.T) {
	t.Parallel()
	bad := `package p
import ("fmt"; "strings")
const q = "SELECT 1"
func f(db any, name string, b *strings.Builder) {
	db.Exec(ctx, "SELECT * FROM t WHERE name = '" + name + "'")
	db.QueryRow(ctx, fmt.Sprintf("DELETE FROM t WHERE id = %s", name))
	db.Query(ctx, q + name)
	b.WriteString("UPDATE t SET x = " + name)
	strings.NewReplacer("{schema}", name)
	db.Exec(ctx, q) // fine
}`
	if got := checkSQLSource(t, "p/bad.go", bad); len(got) != 5 {
		t.Fatalf("the checker found %d problems in the bad example, want 5:\n%s", len(got), strings.Join(got, "\n"))
	}
	files := 0
	for _, pkg := range libraryPackages {
		paths, err := filepath.Glob(filepath.Join(pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			files++
			for _, p := range checkSQLSource(t, filepath.ToSlash(path), string(src)) {
				t.Error(p)
			}
		}
	}
	if files < 20 {
		t.Fatalf("scanned only %d files: is the test running from the module root?", files)
	}
}

// checkSQLSource returns the problems found in one file.
func checkSQLSource(t *testing.T, path, src string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if d, ok := n.(*ast.GenDecl); ok && d.Tok == token.CONST {
			for _, s := range d.Specs {
				for _, name := range s.(*ast.ValueSpec).Names {
					consts[name.Name] = true
				}
			}
		}
		return true
	})
	// Constants declared in other files of the package count too.
	if dir := filepath.Dir(path); dir != "p" {
		others, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, o := range others {
			if o == path || strings.HasSuffix(o, "_test.go") {
				continue
			}
			of, err := parser.ParseFile(token.NewFileSet(), o, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range of.Decls {
				if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
					for _, s := range g.Specs {
						for _, name := range s.(*ast.ValueSpec).Names {
							consts[name.Name] = true
						}
					}
				}
			}
		}
	}
	expr := func(e ast.Expr) string {
		start, end := fset.Position(e.Pos()).Offset, fset.Position(e.End()).Offset
		return src[start:end]
	}
	var problems []string
	report := func(n ast.Node, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), fmt.Sprintf(format, args...)))
	}
	isSQL := func(e ast.Expr) bool {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return false
		}
		s, _ := strconv.Unquote(lit.Value)
		return sqlWords.MatchString(s)
	}
	var operands func(e ast.Expr) []ast.Expr
	operands = func(e ast.Expr) []ast.Expr {
		if b, ok := e.(*ast.BinaryExpr); ok && b.Op == token.ADD {
			return append(operands(b.X), operands(b.Y)...)
		}
		if p, ok := e.(*ast.ParenExpr); ok {
			return operands(p.X)
		}
		return []ast.Expr{e}
	}
	// safe reports whether an operand of SQL text is a constant, the
	// schema, a number or a listed exception.
	safe := func(e ast.Expr) bool {
		switch v := e.(type) {
		case *ast.BasicLit:
			return true
		case *ast.Ident:
			if consts[v.Name] || schemaName.MatchString(v.Name) {
				return true
			}
		case *ast.SelectorExpr:
			if schemaName.MatchString(v.Sel.Name) {
				return true
			}
		case *ast.CallExpr:
			if s, ok := v.Fun.(*ast.SelectorExpr); ok {
				if x, ok := s.X.(*ast.Ident); ok && x.Name == "strconv" && (s.Sel.Name == "Itoa" || s.Sel.Name == "FormatInt") {
					return true
				}
			}
		}
		_, ok := sqlExceptions[path+": "+expr(e)]
		return ok
	}
	checkConcat := func(n ast.Expr) {
		ops := operands(n)
		hasSQL := false
		for _, o := range ops {
			hasSQL = hasSQL || isSQL(o)
		}
		if !hasSQL {
			return
		}
		for _, o := range ops {
			if !safe(o) {
				report(o, "SQL text built from %s", expr(o))
			}
		}
	}
	// sqlBuilders are the WriteString calls of functions that write SQL
	// text into a strings.Builder: every piece they write must be safe.
	sqlBuilders := map[*ast.CallExpr]bool{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		var writes []*ast.CallExpr
		writesSQL := false
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "WriteString" && len(c.Args) == 1 {
					writes = append(writes, c)
					for _, o := range operands(c.Args[0]) {
						writesSQL = writesSQL || isSQL(o)
					}
				}
			}
			return true
		})
		for _, c := range writes {
			sqlBuilders[c] = writesSQL
		}
	}
	seen := map[ast.Node]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch v := n.(type) {
		case *ast.BinaryExpr:
			if v.Op == token.ADD && !seen[v] {
				checkConcat(v)
				ast.Inspect(v, func(m ast.Node) bool { seen[m] = true; return true })
			}
		case *ast.CallExpr:
			sel, ok := v.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, _ := sel.X.(*ast.Ident)
			switch {
			case x != nil && x.Name == "fmt" && strings.HasPrefix(sel.Sel.Name, "Sprint") && len(v.Args) > 0 && isSQL(v.Args[0]):
				report(v, "fmt.%s builds SQL text", sel.Sel.Name)
			case sel.Sel.Name == "WriteString" && len(v.Args) == 1 && sqlBuilders[v]:
				for _, o := range operands(v.Args[0]) {
					if !safe(o) && !isSQL(o) {
						report(o, "SQL text built from %s", expr(o))
					}
				}
				ast.Inspect(v.Args[0], func(m ast.Node) bool { seen[m] = true; return true })
			case x != nil && x.Name == "strings" && (sel.Sel.Name == "NewReplacer" || sel.Sel.Name == "ReplaceAll"):
				args := v.Args
				if sel.Sel.Name == "ReplaceAll" && len(args) == 3 {
					args = args[1:]
				}
				for i := 0; i+1 < len(args); i += 2 {
					if lit, ok := args[i].(*ast.BasicLit); ok && lit.Value == `"{schema}"` && !schemaName.MatchString(lastName(args[i+1])) {
						report(args[i+1], "{schema} replaced with %s, not the quoted schema", expr(args[i+1]))
					}
				}
			case sel.Sel.Name == "Exec" || sel.Sel.Name == "Query" || sel.Sel.Name == "QueryRow" || sel.Sel.Name == "Queue":
				i := 1
				if sel.Sel.Name == "Queue" {
					i = 0
				}
				if len(v.Args) > i {
					if c, ok := v.Args[i].(*ast.CallExpr); ok && !namedStatement(c) {
						report(c, "%s's SQL is built inline by %s", sel.Sel.Name, expr(c.Fun))
					}
				}
			}
		}
		return true
	})
	return problems
}

func lastName(e ast.Expr) string {
	switch v := e.(type) {
	case *ast.Ident:
		return v.Name
	case *ast.SelectorExpr:
		return v.Sel.Name
	}
	return ""
}
