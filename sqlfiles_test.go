package seckill_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/seckillkit/seckill/internal/sqlfile"
)

// sqlFilePackages are the packages whose every statement lives in
// embedded .sql files (internal/sqlfile): their Go code holds no SQL text
// at all. (BEGIN is pgx's: pgtx passes pgx.TxOptions.)
var sqlFilePackages = []string{"outbox", "inbox", "order", "inventory", "pgtx", "migrate"}

// utilityStatement recognises a string literal starting a utility
// statement the sqlWords pattern does not cover, or a whole transaction
// control statement.
var utilityStatement = regexp.MustCompile(`(?i)^\s*(listen|unlisten|notify)\s|^\s*(begin|start transaction|commit|end|rollback|abort)\s*;?\s*$`)

// sqlFileExceptions are the SQL-looking literals left in the Go code of
// sqlFilePackages (file: the literal as written, or its start), each with
// why it is not a named statement.
var sqlFileExceptions = map[string]string{
	`outbox/relay.go: "LISTEN "`:      "LISTEN takes the channel as an identifier, not a parameter: the channel is derived from the validated schema and quoted by pgx.Identifier.Sanitize",
	"migrate/schema.go: `all analyse": "the key words a schema name may not be, not a statement",
	`pgtx/onebatch.go: "ROLLBACK"`:    "a command tag COMMIT's answer is compared with, not a statement sent",
	`pgtx/txcontrol.go: "COMMIT"`:     "a key word the caller's batch is searched for (endsTx), not a statement sent",
	`pgtx/txcontrol.go: "ROLLBACK"`:   "a key word the caller's batch is searched for (endsTx), not a statement sent",
	`pgtx/txcontrol.go: "END"`:        "a key word the caller's batch is searched for (endsTx), not a statement sent",
	`pgtx/txcontrol.go: "ABORT"`:      "a key word the caller's batch is searched for (endsTx), not a statement sent",
}

// TestSQLLivesInSQLFiles extends TestNoSQLFromCallerStrings to the
// packages converted to named statements: (1) no string literal of their
// Go code is SQL (but the listed exceptions), so the only SQL text they
// send comes from their sql/*.sql files through internal/sqlfile, which
// substitutes nothing but the quoted schema; (2) every statement of the
// files is fetched by a literal name (no dead statement), and every name
// fetched exists; (3) the files bind only the quoted schema (Bind's
// argument is the value migrate.QuoteSchema returned). The checker is
// tested on bad code first.
func TestSQLLivesInSQLFiles(t *testing.T) {
	t.Parallel()
	bad := `package p
func f(db any, s sqlfile.Set, name string) {
	db.Exec(ctx, "DELETE FROM t WHERE id = $1", 1)
	q := s.Bind(name)
	q.Get("missing")
	_ = "LISTEN x"
	_ = "commit"
}`
	lits, problems := scanSQLFileGo(t, "p/bad.go", bad)
	if len(problems) != 4 || len(lits) != 1 {
		t.Fatalf("the checker found %d problems and %d names in the bad example, want 4 and 1:\n%s", len(problems), len(lits), strings.Join(problems, "\n"))
	}
	for _, pkg := range sqlFilePackages {
		set, err := sqlfile.Parse(os.DirFS(pkg), "sql")
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		paths, err := filepath.Glob(filepath.Join(pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, problems := scanSQLFileGo(t, filepath.ToSlash(path), string(src))
			for _, p := range problems {
				t.Error(p)
			}
			for n, pos := range got {
				names[n] = true
				if _, ok := set.Lookup(n); !ok {
					t.Errorf("%s: Get(%q): no such statement in %s/sql", pos, n, pkg)
				}
			}
		}
		for _, n := range set.Names() {
			if !names[n] {
				t.Errorf("%s/sql: statement %s is never fetched (Get(%q)): delete it or use it", pkg, n, n)
			}
		}
		if len(set.Names()) < 5 {
			t.Errorf("%s: only %d statements: is the test running from the module root?", pkg, len(set.Names()))
		}
	}
}

// scanSQLFileGo returns the statement names a file fetches (with their
// positions) and the problems found in it.
func scanSQLFileGo(t *testing.T, path, src string) (map[string]string, []string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	var problems []string
	getArgs := map[*ast.BasicLit]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := c.Fun.(*ast.SelectorExpr)
		if !ok || len(c.Args) != 1 {
			return true
		}
		switch sel.Sel.Name {
		case "Get":
			if lit, ok := c.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				name, _ := strconv.Unquote(lit.Value)
				names[name] = fset.Position(lit.Pos()).String()
				getArgs[lit] = true
			}
		case "Bind":
			if !schemaName.MatchString(lastName(c.Args[0])) {
				problems = append(problems, fset.Position(c.Pos()).String()+": Bind of something else than the quoted schema")
			}
		}
		return true
	})
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING || getArgs[lit] {
			return true
		}
		s, _ := strconv.Unquote(lit.Value)
		if !sqlWords.MatchString(s) && !utilityStatement.MatchString(s) {
			return true
		}
		for key := range sqlFileExceptions {
			if strings.HasPrefix(path+": "+lit.Value, key) {
				return true
			}
		}
		problems = append(problems, fset.Position(lit.Pos()).String()+": SQL text in Go code: move it to a named statement in sql/*.sql")
		return true
	})
	return names, problems
}
