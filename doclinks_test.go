package seckill_test

import (
	"go/ast"
	"go/doc"
	"go/printer"
	"go/token"
	"regexp"
	"strings"
	"testing"
)

// docLink matches a doc link as go doc renders one: [Name], [Name.Method],
// [pkg.Name], [pkg.Name.Method], optionally with a leading *.
var docLink = regexp.MustCompile(`\[\*?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){0,2})\]([^(:]|$)`)

// symbols returns every name a doc link in dir may point at (package-level
// names, and Type.Method and Type.Field for every type, unexported ones
// included) and every doc text of dir, each once.
func symbols(t *testing.T, dir string) (map[string]bool, []string) {
	t.Helper()
	pkg, _ := docPackage(t, dir, doc.AllDecls)
	syms := map[string]bool{}
	texts := []string{pkg.Doc}
	seen := map[string]bool{pkg.Doc: true}
	eachDecl(pkg, func(d docDecl) {
		if d.Name != "" {
			syms[d.Name] = true
		}
		if !seen[d.Text] {
			seen[d.Text] = true
			texts = append(texts, d.Text)
		}
	})
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

// TestUsageRunsInPgtx fails when a package's documentation or one of its
// Example functions runs a transaction with pgx.BeginFunc or
// pgx.BeginTxFunc: the usage a reader copies runs in pgtx.RunInTx, which
// retries what is safe to retry and names an unknown COMMIT outcome.
func TestUsageRunsInPgtx(t *testing.T) {
	other := regexp.MustCompile(`pgx\.Begin(Tx)?Func\(`)
	for _, dir := range publicPackages {
		pkg, tests := docPackage(t, dir, 0)
		texts := []string{pkg.Doc}
		eachDecl(pkg, func(d docDecl) { texts = append(texts, d.Text) })
		for _, ex := range doc.Examples(tests...) {
			var b strings.Builder
			if err := printer.Fprint(&b, token.NewFileSet(), ex.Code); err != nil {
				t.Fatal(err)
			}
			texts = append(texts, b.String())
		}
		for _, text := range texts {
			if m := other.FindString(text); m != "" {
				t.Errorf("package %s: its documentation or an Example runs a transaction with %s…): use pgtx.RunInTx", dir, m)
			}
		}
	}
}
