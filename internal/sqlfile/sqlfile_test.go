package sqlfile

import (
	"strings"
	"testing"
	"testing/fstest"
)

const good = `-- A file comment.

-- name: get
-- Reads one row.
-- $1 = id (int8): the row's id
-- index: t_pkey
SELECT * FROM {schema}.t WHERE id = $1

-- name: count_all
-- index: none (a report)
-- explain with: 1000
-- full scan: t (counts every row)
SELECT count(*) FROM {schema}.t
`

func fsOf(files map[string]string) fstest.MapFS {
	m := fstest.MapFS{}
	for name, text := range files {
		m["sql/"+name] = &fstest.MapFile{Data: []byte(text)}
	}
	return m
}

func TestParse(t *testing.T) {
	t.Parallel()
	set, err := Parse(fsOf(map[string]string{"a.sql": good}), "sql")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(set.Names(), ","); got != "count_all,get" {
		t.Fatalf("names %s", got)
	}
	st, _ := set.Lookup("get")
	if st.Text != "SELECT * FROM {schema}.t WHERE id = $1" || len(st.Params) != 1 || st.Params[0].Doc != "id (int8): the row's id" ||
		strings.Join(st.Indexes, ",") != "t_pkey" || strings.Join(st.Doc, " ") != "Reads one row." || st.Line != 3 {
		t.Fatalf("parsed %+v", st)
	}
	c, _ := set.Lookup("count_all")
	if c.IndexNote != "(a report)" || c.ExplainWith != "1000" || strings.Join(c.FullScans, ",") != "t" || c.FullScanNote != "counts every row" {
		t.Fatalf("parsed %+v", c)
	}
	if got := set.Bind(`"my ""s"""`).Get("get"); got != `SELECT * FROM "my ""s""".t WHERE id = $1` {
		t.Fatalf("bound %s", got)
	}
	plain, err := Parse(fsOf(map[string]string{"p.sql": "-- name: commit\n-- index: none (reads no table)\n-- not explained: no plan\nCOMMIT\n"}), "sql")
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := plain.Lookup("commit"); st.NotExplained != "no plan" || plain.Get("commit") != "COMMIT" {
		t.Fatalf("parsed %+v, Get %q", st, plain.Get("commit"))
	}
	two := MustParse(fsOf(map[string]string{"p.sql": "-- name: two\n-- $1 = a\n-- $2 = b\n-- index: none (x)\nSELECT set_config('x', $1, true), $2, $1\n"}), "sql")
	if got := two.Inline("two", 1234, -5); got != "SELECT set_config('x', '1234', true), '-5', '1234'" {
		t.Fatalf("Inline: %q", got)
	}
}

// TestParseRejects is the loader's loud failure: each malformed file is
// refused with an error naming the file, the line and the problem.
func TestParseRejects(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"duplicate in one file", map[string]string{"a.sql": good + "\n-- name: get\n-- index: none (x)\nSELECT 1\n"}, `duplicate statement name "get"`},
		{"duplicate across files", map[string]string{"a.sql": good, "b.sql": "-- name: get\n-- index: none (x)\nSELECT 1\n"}, `duplicate statement name "get"`},
		{"undocumented parameter", map[string]string{"a.sql": "-- name: x\n-- index: none (x)\nSELECT $1\n"}, "lists 0 parameters"},
		{"unused parameter", map[string]string{"a.sql": "-- name: x\n-- $1 = a\n-- $2 = b\n-- index: none (x)\nSELECT $1\n"}, "lists 2 parameters"},
		{"gap", map[string]string{"a.sql": "-- name: x\n-- $1 = a\n-- $2 = b\n-- index: none (x)\nSELECT $2\n"}, "$1 is not used"},
		{"out of order", map[string]string{"a.sql": "-- name: x\n-- $2 = a\n-- index: none (x)\nSELECT 1\n"}, "listed after"},
		{"no index line", map[string]string{"a.sql": "-- name: x\nSELECT 1\n"}, "no index: line"},
		{"index none without reason", map[string]string{"a.sql": "-- name: x\n-- index: none\nSELECT 1\n"}, "without a reason"},
		{"placeholder", map[string]string{"a.sql": "-- name: x\n-- index: none (x)\nSELECT 1 FROM {schema}.t WHERE {cond}\n"}, "placeholder {cond}"},
		{"empty", map[string]string{"a.sql": "-- name: x\n-- index: none (x)\n\n"}, "empty statement"},
		{"bad name", map[string]string{"a.sql": "-- name: Bad-Name\n-- index: none (x)\nSELECT 1\n"}, "malformed name line"},
		{"text before", map[string]string{"a.sql": "SELECT 1\n-- name: x\n-- index: none (x)\nSELECT 1\n"}, "text before the first"},
		{"comment inside", map[string]string{"a.sql": "-- name: x\n-- index: none (x)\nSELECT 1\n-- later\nFROM t\n"}, "comment line inside"},
		{"no statement", map[string]string{"a.sql": "-- nothing\n"}, "no -- name: header"},
		{"bad index", map[string]string{"a.sql": "-- name: x\n-- index: a | B-c\nSELECT 1\n"}, "not a lower-case index name"},
	} {
		_, err := Parse(fsOf(c.files), "sql")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
	alt, err := Parse(fsOf(map[string]string{"a.sql": "-- name: x\n-- index: a_pkey, b_idx | c_idx\nSELECT 1\n"}), "sql")
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := alt.Lookup("x"); strings.Join(st.Indexes, ",") != "a_pkey,b_idx|c_idx" {
		t.Errorf("alternatives parsed as %q", st.Indexes)
	}
	if _, err := Parse(fsOf(nil), "sql"); err == nil {
		t.Error("an empty directory was accepted")
	}
}

func TestPanics(t *testing.T) {
	t.Parallel()
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", what)
			}
		}()
		f()
	}
	set := MustParse(fsOf(map[string]string{"a.sql": good}), "sql")
	mustPanic("Get of an unknown name", func() { set.Bind(`"s"`).Get("nope") })
	mustPanic("Set.Get of an unknown name", func() { set.Get("nope") })
	mustPanic("Set.Get of a statement naming {schema}", func() { set.Get("get") })
	mustPanic("Inline with too few values", func() { set.Inline("get") })
	mustPanic("Inline of a statement naming {schema}", func() { set.Inline("get", 1) })
	mustPanic("Bind of an unquoted schema", func() { set.Bind("s") })
	mustPanic("Bind of a schema with a stray quote", func() { set.Bind(`"a"b"`) })
	mustPanic("MustParse of a bad file", func() { MustParse(fsOf(map[string]string{"a.sql": "-- name: x\nSELECT 1\n"}), "sql") })
}

func TestFragment(t *testing.T) {
	t.Parallel()
	set := MustParse(fsOf(map[string]string{"a.sql": good + "\n-- name: get2\n-- $1 = id\n-- index: t_pkey\nSELECT *  FROM {schema}.t\n\tWHERE id = $1 FOR UPDATE\n"}), "sql")
	if err := set.SameFragment("get", "get2", "FROM", "$1"); err != nil {
		t.Fatal(err)
	}
	if err := set.SameFragment("get", "count_all", "FROM", "t"); err != nil {
		t.Fatal(err)
	}
	if err := set.SameFragment("get", "get2", "SELECT", "$1", "id", "other"); err == nil {
		t.Fatal("differing fragments compared equal")
	}
	if _, err := set.Fragment("get", "nope", "$1"); err == nil {
		t.Fatal("a missing start was accepted")
	}
}
