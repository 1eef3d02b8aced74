package seckill_test

import (
	"go/ast"
	"go/doc"
	"go/printer"
	"go/token"
	"os"
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

// unshippedRef matches a reference to a document the module does not ship:
// the source articles the design started from ("seed 000 §8.2", "the
// seed's", a "§" section sign) and a design note that never shipped
// (DESIGN.md). The design ships as docs/design.md; a rule is stated where it
// applies.
var unshippedRef = regexp.MustCompile(`(?i:\bseeds?\s*(\d{3}\b|§|table\s+\d|ddl\b)|§|\bseed's\b|\bthe seeds?\b)|\bDESIGN\.md\b|\bDESIGN invariant`)

// TestNoReferenceToUnshippedDocuments fails for a line of code, SQL or
// documentation, in either module, that sends the reader to a document
// they cannot open.
func TestNoReferenceToUnshippedDocuments(t *testing.T) {
	for _, path := range repoTextFiles(t) {
		if path == "doclinks_test.go" {
			continue // this test's own description of what it refuses
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := unshippedRef.FindString(line); m != "" {
				t.Errorf("%s:%d: %q refers to a document that does not ship; state the rule, or link docs/design.md: %s", path, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}

// fileRef matches a Go file name, and camelCase a name that is not a plain
// English word: in go doc, one a reader can look up is exported (upper
// case) or a parameter of the signature shown.
var (
	fileRef   = regexp.MustCompile(`\b[A-Za-z0-9_]+\.go\b`)
	camelCase = regexp.MustCompile(`\b[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*\b`)
	// notNames are camelCase words that are no Go names.
	notNames = map[string]bool{"pgSQL": true, "kB": true}
)

// paramNames returns the names of the parameters and results of every
// function and method pkg lists: go doc prints them in the signature.
func paramNames(pkg *doc.Package) map[string]bool {
	out := map[string]bool{}
	add := func(fs []*doc.Func) {
		for _, f := range fs {
			for _, l := range []*ast.FieldList{f.Decl.Type.Params, f.Decl.Type.Results} {
				if l == nil {
					continue
				}
				for _, fld := range l.List {
					for _, n := range fld.Names {
						out[n.Name] = true
					}
				}
			}
		}
	}
	add(pkg.Funcs)
	for _, typ := range pkg.Types {
		add(typ.Funcs)
		add(typ.Methods)
	}
	return out
}

// TestGodocNamesOnlyWhatUsersCanOpen fails when the documentation go doc
// shows for a public package (its overview and the comments of its
// exported names) sends the reader to a source file ("see claim.go") or
// names what go doc does not show: an unexported identifier, or a name
// for a piece of code that has none (decrementThenLedger). Code blocks
// (the indented lines of a comment) and the parameters of the documented
// signatures may use any name. The doc must state the rule itself.
func TestGodocNamesOnlyWhatUsersCanOpen(t *testing.T) {
	// The example's order flow is read as a manual too: it is the code to copy.
	for _, dir := range append([]string{".", "examples/seckill/flow"}, publicPackages...) {
		pkg, _ := docPackage(t, dir, 0)
		params := paramNames(pkg)
		texts := []string{pkg.Doc}
		eachDecl(pkg, func(d docDecl) {
			if name := d.Name[strings.LastIndex(d.Name, ".")+1:]; ast.IsExported(name) {
				texts = append(texts, d.Text)
			}
		})
		var bad []string
		for _, text := range texts {
			for _, line := range strings.Split(text, "\n") {
				if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "    ") {
					continue // a code block
				}
				bad = append(bad, fileRef.FindAllString(line, -1)...)
				for _, w := range camelCase.FindAllString(line, -1) {
					if !params[w] && !notNames[w] {
						bad = append(bad, w)
					}
				}
			}
		}
		if len(bad) > 0 {
			t.Errorf("package %s: its go doc names what a reader cannot open: %s", dir, strings.Join(bad, ", "))
		}
	}
}
