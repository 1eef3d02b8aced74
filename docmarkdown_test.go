package seckill_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// markdownFiles returns every markdown file of the repository.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, p := range repoTextFiles(t) {
		if filepath.Ext(p) == ".md" {
			out = append(out, p)
		}
	}
	return out
}

// prose returns the lines of markdown outside fenced code blocks (the
// lines of a block are blank), so line numbers stay those of the file.
func prose(markdown string) []string {
	lines := strings.Split(markdown, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return lines
}

var (
	codeSpan = regexp.MustCompile("`[^`]*`")
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*$`)
)

// anchors returns the anchors GitHub gives the headings of markdown: lower
// case, punctuation dropped, spaces as hyphens, a repeat suffixed -1, -2, ….
func anchors(markdown string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(markdown) {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

// TestMarkdownLinksResolve fails for a link in any markdown file of the
// repository whose file or directory does not exist, or whose #anchor
// names no heading of the markdown file it points at. Links to other sites
// are not followed.
func TestMarkdownLinksResolve(t *testing.T) {
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range prose(string(b)) {
			for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(l, "code"), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				resolved := file
				if path != "" {
					resolved = filepath.Join(filepath.Dir(file), path)
				}
				if _, err := os.Stat(resolved); err != nil {
					t.Errorf("%s:%d: link %q: no such file or directory %s", file, i+1, target, resolved)
					continue
				}
				if anchor == "" {
					continue
				}
				if filepath.Ext(resolved) != ".md" {
					t.Errorf("%s:%d: link %q: an anchor into %s, which is not markdown", file, i+1, target, resolved)
					continue
				}
				tb, err := os.ReadFile(resolved)
				if err != nil {
					t.Fatal(err)
				}
				if !anchors(string(tb))[anchor] {
					t.Errorf("%s:%d: link %q: %s has no heading #%s", file, i+1, target, resolved, anchor)
				}
			}
		}
	}
}

// goNames is every name the Go code of the repository declares: per
// package name (test packages under the package's own name), and in all.
// A package's set holds its package-level names, Type.Member for every
// method, field and interface method, and each member's name alone.
type goNames struct {
	byPkg map[string]map[string]bool
	all   map[string]bool
	// public is what the library's documentation may name unqualified:
	// the names of the packages a service imports, and the tests,
	// benchmarks and fuzz targets of the whole repository.
	public map[string]bool
}

func declaredNames(t *testing.T) goNames {
	t.Helper()
	n := goNames{byPkg: map[string]map[string]bool{}, all: map[string]bool{}, public: map[string]bool{}}
	fset := token.NewFileSet()
	for _, path := range repoTextFiles(t) {
		if filepath.Ext(path) != ".go" {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		pkg := strings.TrimSuffix(f.Name.Name, "_test")
		if n.byPkg[pkg] == nil {
			n.byPkg[pkg] = map[string]bool{}
		}
		add := func(names ...string) {
			for _, s := range names {
				n.byPkg[pkg][s] = true
				n.all[s] = true
				if slices.Contains(publicPackages, pkg) || testFunc.MatchString(s) {
					n.public[s] = true
				}
			}
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					add(d.Name.Name)
					continue
				}
				typ := d.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if ix, ok := typ.(*ast.IndexExpr); ok {
					typ = ix.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					add(id.Name+"."+d.Name.Name, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.ValueSpec:
						for _, id := range s.Names {
							add(id.Name)
						}
					case *ast.TypeSpec:
						add(s.Name.Name)
						var fields *ast.FieldList
						switch u := s.Type.(type) {
						case *ast.StructType:
							fields = u.Fields
						case *ast.InterfaceType:
							fields = u.Methods
						}
						if fields == nil {
							continue
						}
						for _, fld := range fields.List {
							for _, id := range fld.Names {
								add(s.Name.Name+"."+id.Name, id.Name)
							}
						}
					}
				}
			}
		}
	}
	return n
}

// testFunc matches the name of a test, benchmark, fuzz target or example.
var testFunc = regexp.MustCompile(`^(Test|Benchmark|Fuzz|Example)`)

// goIdent matches a Go identifier as documentation writes one: Name,
// Type.Member or pkg.Name(.Member); written in a code span.
var goIdent = regexp.MustCompile(`(^|[^A-Za-z0-9_./-])(?:([a-z][a-z0-9]*)\.)?([A-Z][A-Za-z0-9_]*(?:\.[A-Z][A-Za-z0-9_]*)?)([^A-Za-z0-9_-]|$)`)

// TestMarkdownNamesExist fails when a code span of the documentation
// names a Go identifier that does not exist: a package-qualified name
// (pgtx.RunInTx, inventory.Store.ReleaseStock) must be declared in that
// package, an unqualified one (ClaimMessage, RelayConfig.InTx,
// TestFaultCutConnections) somewhere in the repository's code. Names of
// other modules must be qualified (pgx.Batch), and are not checked; the
// names of a go test -run pattern, and a name written Queue…, must start a
// declared name;
// upper-case words (SQL, statuses, event tags) are not identifiers. The
// changelog is exempt: it names what was removed.
func TestMarkdownNamesExist(t *testing.T) {
	names := declaredNames(t)
	for _, file := range markdownFiles(t) {
		if file == "CHANGELOG.md" {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// The library's pages name the library unqualified; the pages of
		// the examples may name the examples' code too.
		unqualified := names.public
		if strings.HasPrefix(file, "examples"+string(filepath.Separator)) {
			unqualified = names.all
		}
		var bad []string
		for i, l := range prose(string(b)) {
			for _, span := range codeSpan.FindAllString(l, -1) {
				if strings.HasPrefix(span, "`--") {
					continue // an SQL comment or a goose annotation
				}
				pattern := strings.Contains(span, " -run ") // go test -run: names are prefixes
				for _, m := range goIdent.FindAllStringSubmatch(span, -1) {
					pkg, name := m[2], m[3]
					if strings.ToUpper(name) == name {
						continue // SQL, a status, an event tag, an acronym
					}
					var ok bool
					switch {
					case pkg == "":
						ok = unqualified[name]
					case names.byPkg[pkg] != nil:
						ok = names.byPkg[pkg][name]
					default:
						continue // another module's name
					}
					if !ok && (pattern || m[4] == "…") && pkg == "" { // a prefix: Queue…
						for n := range unqualified {
							if strings.HasPrefix(n, name) {
								ok = true
								break
							}
						}
					}
					if !ok {
						bad = append(bad, fmt.Sprintf("%s:%d: %s", file, i+1, strings.TrimPrefix(pkg+"."+name, ".")))
					}
				}
			}
		}
		slices.Sort(bad)
		for _, s := range slices.Compact(bad) {
			t.Errorf("%s names no declared Go identifier", s)
		}
	}
}

// TestREADMEFirstScreen fails when the README stops being a ten-minute
// read: more than 300 lines, or a first code block that is not the two
// commands (the example flow, and the test command CI runs, read from
// .ci/run) followed directly by the quick start's Go block (whose text
// examples/quickstart's own test compares with the program).
func TestREADMEFirstScreen(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	var ciTest string
	for l := range strings.Lines(string(ci)) {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "go test ") && strings.Contains(l, "./examples/...") {
			ciTest = l
		}
	}
	if ciTest == "" {
		t.Fatal(".ci/run runs no go test of both modules")
	}
	lines := strings.Split(string(readme), "\n")
	if len(lines) > 300 {
		t.Errorf("README.md has %d lines, more than 300: move detail to docs/ or an example's README", len(lines))
	}
	type block struct {
		lang  string
		start int
		body  []string
	}
	var blocks []block
	for i := 0; i < len(lines) && len(blocks) < 2; i++ {
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		b := block{lang: strings.TrimPrefix(lines[i], "```"), start: i + 1}
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			b.body = append(b.body, lines[i])
		}
		blocks = append(blocks, b)
	}
	if len(blocks) < 2 {
		t.Fatal("README.md needs the commands and the quick start as its first two code blocks")
	}
	cmds := blocks[0]
	if cmds.lang != "sh" || cmds.start > 30 {
		t.Errorf("README.md's first code block (line %d, %q) must be the sh commands, on the first screen", cmds.start, cmds.lang)
	}
	var run []string
	for _, l := range cmds.body {
		cmd, _, _ := strings.Cut(l, "#")
		if cmd = strings.TrimSpace(cmd); cmd != "" {
			run = append(run, cmd)
		}
	}
	if len(run) != 2 || run[0] != "go run ./examples/seckill" || run[1] != ciTest {
		t.Errorf("README.md's commands are %q, want exactly the example flow and CI's test command: %q", run, []string{"go run ./examples/seckill", ciTest})
	}
	if blocks[1].lang != "go" || len(blocks[1].body) == 0 || !strings.HasPrefix(blocks[1].body[len(blocks[1].body)-1], "}") {
		t.Errorf("README.md's second code block (line %d) must be the quick start's Go program", blocks[1].start)
	}
}
