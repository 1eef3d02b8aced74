// Package sqlfile loads the named SQL statements a package sends from the
// .sql files it embeds. Every statement is written out whole in one file
// (one file per operation), under a header a DBA can review without
// reading Go:
//
//	-- name: claim
//	-- Claims up to $1 ready events for owner $2, oldest first.
//	-- $1 = limit (int4): the most events to claim
//	-- $2 = owner (text): the relay's name, stored in locked_by
//	-- index: idx_outbox_ready, idx_outbox_ordering
//	WITH candidates AS (
//	…
//
// The header is the run of "--" lines after "-- name: <name>": "$n = …"
// lines list the parameters (every $n the text uses, numbered from 1, and
// no other), one "index:" line names the indexes the statement is meant
// to use (all of them; "a | b" when either serves; "index: none (why)"
// for a statement that reads no table through an index), an optional "full scan: <table>, … (why)" line names the
// tables it reads whole by design, an optional "explain with: <value>, …"
// line gives typical parameter values for the plan test (see
// Statement.ExplainWith), an optional "not explained: <why>" line marks
// a statement EXPLAIN does not take (COMMIT, ROLLBACK, DDL), and the other
// lines describe it. The
// text runs to the next "-- name:" line or the end of the file. Text
// before a file's first statement is a comment about the file.
//
// The only placeholder is {schema}: [Set.Bind] replaces it, once, with the
// schema name as migrate.QuoteSchema quoted it; everything else is a bind
// parameter. Variants (plain, Citus, pgtx.Abort) are separate statements
// written out in full: nothing is concatenated at run time.
//
// [Parse] rejects a malformed file, a duplicate name, an undocumented or
// unused parameter and any placeholder but {schema}; [MustParse] panics
// instead, at package initialisation. [Bound.Get] panics on an unknown
// name, so a misspelt name fails in New, at the first test.
package sqlfile

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Param is one documented parameter of a statement.
type Param struct {
	N       int    // its number: $N
	Doc     string // the rest of the header line: name, type and meaning
	Comment string // the whole header line, without "-- "
}

// Statement is one named statement as written in its file.
type Statement struct {
	Name string
	File string   // the file's path inside the embedded file system
	Line int      // the line of its "-- name:" header
	Doc  []string // the description lines of its header
	// Params are the documented parameters, in order $1, $2, ….
	Params []Param
	// Indexes are the indexes it is meant to use, each used by the plan;
	// an entry "a|b" (written "a | b") is satisfied by either index.
	// IndexNote explains an "index: none" header.
	Indexes   []string
	IndexNote string
	// FullScans are the tables it reads whole by design; FullScanNote
	// says why.
	FullScans    []string
	FullScanNote string
	// ExplainWith are the parameter values (SQL expressions, in order)
	// the plan test explains the statement with, from an "explain with:"
	// line: for a statement whose plan depends on its values (a LIMIT, a
	// range), the custom plan PostgreSQL uses for typical values instead
	// of the generic one. Empty: the generic plan.
	ExplainWith string
	// NotExplained says why the statement has no plan (EXPLAIN does not
	// take it: a transaction control or DDL statement), from a "not
	// explained:" line; empty for a statement the plan test explains.
	NotExplained string
	// Header is the header as written, "--" lines included.
	Header string
	// Text is the statement, {schema} not yet replaced.
	Text string
}

// Set is the statements of one package.
type Set struct {
	pkg    string // the last element of the parsing package's path, under the sqlmutate tag
	list   []*Statement
	byName map[string]*Statement
	files  []File
}

// File is one .sql file of a Set.
type File struct {
	Path string   // its path inside the embedded file system
	Doc  []string // the comment before its first statement, without "-- "
}

var (
	nameLine   = regexp.MustCompile(`^-- name: ([a-z][a-z0-9_]*)\s*$`)
	paramLine  = regexp.MustCompile(`^-- \$([0-9]+) = (.+)$`)
	paramUse   = regexp.MustCompile(`\$([0-9]+)`)
	indexLine  = regexp.MustCompile(`^-- index: (.+)$`)
	fullLine   = regexp.MustCompile(`^-- full scan: ([a-z0-9_, ]+?)(?: \((.+)\))?$`)
	identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	// placeholder is any {word}: only {schema} is allowed.
	placeholder = regexp.MustCompile(`\{[A-Za-z_.]+\}`)
)

// Parse reads every .sql file in dir of fsys.
func Parse(fsys fs.FS, dir string) (*Set, error) {
	paths, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("sqlfile: no .sql file in %s", dir)
	}
	set := &Set{byName: map[string]*Statement{}}
	for _, p := range paths {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		stmts, err := parseFile(p, string(b))
		if err != nil {
			return nil, err
		}
		f := File{Path: p}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "-- name:") {
				break
			}
			if strings.HasPrefix(l, "--") {
				f.Doc = append(f.Doc, strings.TrimSpace(strings.TrimPrefix(l, "--")))
			}
		}
		set.files = append(set.files, f)
		for _, st := range stmts {
			if prev, ok := set.byName[st.Name]; ok {
				return nil, fmt.Errorf("sqlfile: %s:%d: duplicate statement name %q (first at %s:%d)", st.File, st.Line, st.Name, prev.File, prev.Line)
			}
			set.byName[st.Name] = st
			set.list = append(set.list, st)
		}
	}
	return set, nil
}

// MustParse is Parse for a package variable: it panics on any error.
func MustParse(fsys fs.FS, dir string) *Set {
	s, err := Parse(fsys, dir)
	if err != nil {
		panic(err)
	}
	s.pkg = callerPackage()
	return s
}

func parseFile(file, src string) ([]*Statement, error) {
	lines := strings.Split(src, "\n")
	var out []*Statement
	var cur *Statement
	var body []string
	inHeader := false
	errorf := func(line int, format string, args ...any) error {
		return fmt.Errorf("sqlfile: %s:%d: %s", file, line, fmt.Sprintf(format, args...))
	}
	finish := func() error {
		if cur == nil {
			return nil
		}
		cur.Text = strings.TrimSpace(strings.Join(body, "\n"))
		if err := check(cur); err != nil {
			return errorf(cur.Line, "%s: %v", cur.Name, err)
		}
		out = append(out, cur)
		return nil
	}
	for i, l := range lines {
		n := i + 1
		if m := nameLine.FindStringSubmatch(l); m != nil {
			if err := finish(); err != nil {
				return nil, err
			}
			cur, body, inHeader = &Statement{Name: m[1], File: file, Line: n}, nil, true
			cur.Header = l
			continue
		}
		if strings.HasPrefix(l, "-- name:") {
			return nil, errorf(n, "malformed name line %q (want -- name: lower_snake_case)", l)
		}
		if cur == nil {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
				return nil, errorf(n, "text before the first -- name: header")
			}
			continue
		}
		if inHeader && strings.HasPrefix(l, "--") {
			cur.Header += "\n" + l
			if msg := cur.headerLine(l); msg != "" {
				return nil, errorf(n, "%s", msg)
			}
			continue
		}
		inHeader = false
		body = append(body, l)
	}
	if err := finish(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sqlfile: %s: no -- name: header", file)
	}
	return out, nil
}

// headerLine reads one "--" line of st's header; it returns what is wrong
// with it, or "".
func (st *Statement) headerLine(l string) string {
	switch {
	case paramLine.MatchString(l):
		m := paramLine.FindStringSubmatch(l)
		k, _ := strconv.Atoi(m[1])
		if k != len(st.Params)+1 {
			return fmt.Sprintf("parameter $%d listed after $%d: list them in order, from $1", k, len(st.Params))
		}
		st.Params = append(st.Params, Param{N: k, Doc: m[2], Comment: strings.TrimPrefix(l, "-- ")})
	case indexLine.MatchString(l):
		if st.Indexes != nil || st.IndexNote != "" {
			return "a second index: line"
		}
		v := indexLine.FindStringSubmatch(l)[1]
		if strings.HasPrefix(v, "none") {
			st.IndexNote = strings.TrimSpace(strings.TrimPrefix(v, "none"))
			if st.IndexNote == "" {
				return "index: none without a reason, e.g. index: none (reads no table)"
			}
			return ""
		}
		for _, ix := range strings.Split(v, ",") {
			var alts []string
			for _, a := range strings.Split(ix, "|") {
				a = strings.TrimSpace(a)
				if !identifier.MatchString(a) {
					return fmt.Sprintf("index %q is not a lower-case index name", a)
				}
				alts = append(alts, a)
			}
			st.Indexes = append(st.Indexes, strings.Join(alts, "|"))
		}
	case strings.HasPrefix(l, "-- explain with: "):
		st.ExplainWith = strings.TrimPrefix(l, "-- explain with: ")
	case strings.HasPrefix(l, "-- not explained: "):
		st.NotExplained = strings.TrimPrefix(l, "-- not explained: ")
	case strings.HasPrefix(l, "-- full scan:"):
		m := fullLine.FindStringSubmatch(l)
		if m == nil || m[2] == "" {
			return "malformed full scan line (want -- full scan: table, … (why))"
		}
		for _, t := range strings.Split(m[1], ",") {
			st.FullScans = append(st.FullScans, strings.TrimSpace(t))
		}
		st.FullScanNote = m[2]
	default:
		st.Doc = append(st.Doc, strings.TrimSpace(strings.TrimPrefix(l, "--")))
	}
	return ""
}

// check validates one parsed statement.
func check(st *Statement) error {
	if st.Text == "" {
		return errors.New("empty statement")
	}
	if st.Indexes == nil && st.IndexNote == "" {
		return errors.New("no index: line (name the index it is meant to use, or index: none (why))")
	}
	for _, p := range placeholder.FindAllString(st.Text, -1) {
		if p != "{schema}" {
			return fmt.Errorf("placeholder %s: {schema} is the only one; write variants out as separate statements", p)
		}
	}
	for _, l := range strings.Split(st.Text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "--") {
			return errors.New("a comment line inside the statement: put it in the header")
		}
	}
	used := map[int]bool{}
	maxUsed := 0
	for _, m := range paramUse.FindAllStringSubmatch(st.Text, -1) {
		k, _ := strconv.Atoi(m[1])
		used[k] = true
		maxUsed = max(maxUsed, k)
	}
	for k := 1; k <= maxUsed; k++ {
		if !used[k] {
			return fmt.Errorf("$%d is not used but $%d is", k, maxUsed)
		}
	}
	if len(st.Params) != maxUsed {
		return fmt.Errorf("the header lists %d parameters, the text uses $1..$%d", len(st.Params), maxUsed)
	}
	return nil
}

// Statements returns the statements in file order (files sorted by name),
// each file's in the order written.
func (s *Set) Statements() []*Statement { return append([]*Statement(nil), s.list...) }

// Files returns the files in name order.
func (s *Set) Files() []File { return append([]File(nil), s.files...) }

// Names returns the statement names, sorted.
func (s *Set) Names() []string {
	names := make([]string, 0, len(s.list))
	for _, st := range s.list {
		names = append(names, st.Name)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the statement called name.
func (s *Set) Lookup(name string) (*Statement, bool) {
	st, ok := s.byName[name]
	return st, ok
}

// Get returns the text of the statement called name, for a set whose
// statements name no schema (pgtx's). An unknown name, or a statement
// with a {schema} placeholder (which needs [Set.Bind]), panics.
func (s *Set) Get(name string) string {
	st, ok := s.byName[name]
	if !ok {
		panic(fmt.Sprintf("sqlfile: no statement named %q", name))
	}
	if strings.Contains(st.Text, "{schema}") {
		panic(fmt.Sprintf("sqlfile: statement %q names {schema}: use Bind", name))
	}
	if textHook != nil {
		return textHook(s.pkg, st)
	}
	return st.Text
}

// Inline returns the text of the statement called name, as Get does,
// with each parameter $n replaced by args[n-1] written as a quoted
// integer literal ('1234'): for a message of the simple query protocol,
// which takes no bind parameters. Only integers can be inlined, so
// nothing but digits (and a minus sign) enters the text. An unknown name,
// a {schema} placeholder or a count of args other than the statement's
// parameters panics.
func (s *Set) Inline(name string, args ...int64) string {
	text := s.Get(name)
	st := s.byName[name]
	if len(args) != len(st.Params) {
		panic(fmt.Sprintf("sqlfile: Inline(%q) with %d values for %d parameters", name, len(args), len(st.Params)))
	}
	return paramUse.ReplaceAllStringFunc(text, func(p string) string {
		k, _ := strconv.Atoi(p[1:])
		return "'" + strconv.FormatInt(args[k-1], 10) + "'"
	})
}

// Bound is a Set with {schema} replaced by one quoted schema name.
type Bound struct {
	set    *Set
	quoted string
}

// Bind returns the statements of set for the schema quoted, which must be
// the quoted identifier migrate.QuoteSchema returned ("name"): anything
// else panics, as a programming error.
func (s *Set) Bind(quoted string) Bound {
	if len(quoted) < 3 || quoted[0] != '"' || quoted[len(quoted)-1] != '"' || strings.Contains(strings.ReplaceAll(quoted[1:len(quoted)-1], `""`, ""), `"`) {
		panic(fmt.Sprintf("sqlfile: Bind(%q): not a quoted identifier (use migrate.QuoteSchema)", quoted))
	}
	return Bound{set: s, quoted: quoted}
}

// Get returns the text of the statement called name, its {schema}
// replaced. An unknown name panics.
func (b Bound) Get(name string) string {
	st, ok := b.set.byName[name]
	if !ok {
		panic(fmt.Sprintf("sqlfile: no statement named %q", name))
	}
	text := st.Text
	if textHook != nil {
		text = textHook(b.set.pkg, st)
	}
	return strings.ReplaceAll(text, "{schema}", b.quoted)
}

// Fragment returns the part of the statement called name that starts at
// the first occurrence of from and ends with the first occurrence of to
// after it, both included, with each pair of replace applied (old, new, …)
// to it: what a test compares when two statements must carry identical
// copies of a fragment.
func (s *Set) Fragment(name, from, to string, replace ...string) (string, error) {
	st, ok := s.byName[name]
	if !ok {
		return "", fmt.Errorf("sqlfile: no statement named %q", name)
	}
	i := strings.Index(st.Text, from)
	if i < 0 {
		return "", fmt.Errorf("sqlfile: %s has no %q", name, from)
	}
	j := strings.Index(st.Text[i+len(from):], to)
	if j < 0 {
		return "", fmt.Errorf("sqlfile: %s has no %q after %q", name, to, from)
	}
	frag := st.Text[i : i+len(from)+j+len(to)]
	if len(replace)%2 != 0 {
		return "", errors.New("sqlfile: Fragment's replace needs old, new pairs")
	}
	for k := 0; k < len(replace); k += 2 {
		if !strings.Contains(frag, replace[k]) {
			return "", fmt.Errorf("sqlfile: the fragment of %s has no %q to replace", name, replace[k])
		}
		frag = strings.ReplaceAll(frag, replace[k], replace[k+1])
	}
	return frag, nil
}

// SameFragment reports (as an error naming both) whether the fragments of
// the statements a and b between from and to differ, after replace is
// applied to b's. Runs of white space compare equal (a fragment nested in
// a CTE is indented deeper).
func (s *Set) SameFragment(a, b, from, to string, replace ...string) error {
	fa, err := s.Fragment(a, from, to)
	if err != nil {
		return err
	}
	fb, err := s.Fragment(b, from, to, replace...)
	if err != nil {
		return err
	}
	if strings.Join(strings.Fields(fa), " ") != strings.Join(strings.Fields(fb), " ") {
		return fmt.Errorf("sqlfile: the copies of a shared fragment differ:\n--- %s\n%s\n--- %s\n%s", a, fa, b, fb)
	}
	return nil
}
