package migrate

import (
	"slices"
	"strings"
	"testing"
)

func TestSplitStatements(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []string
	}{
		{"plain", "CREATE TABLE a (id int);\nCREATE TABLE b (id int);\n", []string{"CREATE TABLE a (id int)", "CREATE TABLE b (id int)"}},
		{"no final semicolon", "SELECT 1;\nSELECT 2", []string{"SELECT 1", "SELECT 2"}},
		{"comments between statements dropped", "-- head; note\n/* block; */\nSELECT 1; -- tail;\n-- only a comment;\n", []string{"SELECT 1"}},
		{"comment inside a statement kept", "SELECT 1, -- one; two\n 2;", []string{"SELECT 1, -- one; two\n 2"}},
		{"string with semicolon", "INSERT INTO t VALUES ('a;b', 'it''s; fine');", []string{"INSERT INTO t VALUES ('a;b', 'it''s; fine')"}},
		{"backslash is literal in a standard string", `SELECT 'a\'; SELECT 2;`, []string{`SELECT 'a\'`, "SELECT 2"}},
		{"E string escapes", `SELECT E'a\'; still', e'\\'; SELECT 2;`, []string{`SELECT E'a\'; still', e'\\'`, "SELECT 2"}},
		{"identifier that ends in e", `SELECT somee'x;y';`, []string{`SELECT somee'x;y'`}},
		{"quoted identifier", `CREATE TABLE "a;b" ("c""; d" int);`, []string{`CREATE TABLE "a;b" ("c""; d" int)`}},
		{"dollar quote", "DO $$ BEGIN PERFORM 1; END $$;\nSELECT 2;", []string{"DO $$ BEGIN PERFORM 1; END $$", "SELECT 2"}},
		{"tagged dollar quote with nested $$", "CREATE FUNCTION f() RETURNS text LANGUAGE sql AS $fn$ SELECT $$;$$ $fn$;", []string{"CREATE FUNCTION f() RETURNS text LANGUAGE sql AS $fn$ SELECT $$;$$ $fn$"}},
		{"parameter is no dollar quote", "PREPARE p AS SELECT $1; SELECT 2;", []string{"PREPARE p AS SELECT $1", "SELECT 2"}},
		{"dollar inside an identifier", "SELECT a$b$ FROM t; SELECT 2;", []string{"SELECT a$b$ FROM t", "SELECT 2"}},
		{"nested block comment", "SELECT /* a /* b; */ c; */ 1; SELECT 2;", []string{"SELECT /* a /* b; */ c; */ 1", "SELECT 2"}},
		{"goose block", "-- +goose Up\n-- +goose StatementBegin\nCREATE FUNCTION f() RETURNS int LANGUAGE sql\nBEGIN ATOMIC\n  SELECT 1;\nEND;\n-- +goose StatementEnd\nSELECT 2;\n",
			[]string{"CREATE FUNCTION f() RETURNS int LANGUAGE sql\nBEGIN ATOMIC\n  SELECT 1;\nEND", "SELECT 2"}},
		{"annotations are case-insensitive", "-- +goose UP\n-- +goose statementbegin\nSELECT 1;\n-- +goose STATEMENTEND\n", []string{"SELECT 1"}},
		{"empty statements", ";;\n ; SELECT 1;;", []string{"SELECT 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := splitStatements(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			var sqls []string
			for _, st := range got {
				sqls = append(sqls, st.sql)
			}
			if !slices.Equal(sqls, tc.want) {
				t.Fatalf("split %q\n got %q\nwant %q", tc.src, sqls, tc.want)
			}
		})
	}
}

func TestSplitStatementsRejects(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"SELECT 'abc;", "line 1: string never closed"},
		{"SELECT 1;\nSELECT \"abc;", "line 2: quoted identifier never closed"},
		{"DO $x$ BEGIN END $y$;", "line 1: dollar quote $x$ never closed"},
		{"SELECT 1; /* /* */", "comment /* never closed"},
		{"-- +goose Up\nSELECT 1;\n-- +goose Down\nDROP TABLE t;", `line 3: goose annotation "-- +goose Down"`},
		{"-- +goose NO TRANSACTION\nSELECT 1;", "only Up, StatementBegin and StatementEnd"},
		{"-- +goose StatementBegin\nSELECT 1;\n", "line 1: -- +goose StatementBegin without StatementEnd"},
		{"SELECT 1;\n-- +goose StatementEnd\n", "line 2: -- +goose StatementEnd without StatementBegin"},
		{"-- +goose StatementBegin\n-- +goose StatementBegin\n", "StatementBegin inside the block"},
		{"-- +goose StatementBegin\n-- nothing\n-- +goose StatementEnd\n", "empty StatementBegin block"},
		{"SELECT 1\n-- +goose StatementBegin\nSELECT 2;\n-- +goose StatementEnd\n", "missing ';'"},
	} {
		_, err := splitStatements(tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("split %q = %v, want an error containing %q", tc.src, err, tc.want)
		}
	}
}

// Comments, annotations and whitespace between tokens do not change the
// checksum; any change to a token does, including whitespace in a string.
func TestChecksumIgnoresCommentsAndLayout(t *testing.T) {
	sum := func(src string) string {
		t.Helper()
		st, err := splitStatements(src)
		if err != nil {
			t.Fatal(err)
		}
		return checksum(st)
	}
	base := sum("CREATE TABLE a (id int, s text DEFAULT 'x  y');\nCREATE INDEX i ON a (id);\n")
	for _, same := range []string{
		"-- +goose Up\n-- a comment\nCREATE TABLE a (\n    id int, -- the key\n    s text DEFAULT 'x  y'\n);\n\nCREATE INDEX i ON a (id)",
		"CREATE TABLE a (id int, /* note */ s text DEFAULT 'x  y');CREATE INDEX i ON a (id);",
	} {
		if got := sum(same); got != base {
			t.Errorf("checksum of %q differs from the original's", same)
		}
	}
	for _, other := range []string{
		"CREATE TABLE a (id bigint, s text DEFAULT 'x  y');\nCREATE INDEX i ON a (id);",
		"CREATE TABLE a (id int, s text DEFAULT 'x y');\nCREATE INDEX i ON a (id);",
		"CREATE TABLE a (id int, s text DEFAULT 'x  y');\nCREATE INDEX i ON a (id);\nSELECT 1;",
		"CREATE TABLE a (id int, s text DEFAULT 'x  y'); CREATE INDEX i ON a (id, s);",
	} {
		if sum(other) == base {
			t.Errorf("checksum of %q equals the original's", other)
		}
	}
}

// FuzzSplitStatements: splitting never panics, and a statement it
// returns (outside a goose block) splits again into itself alone.
func FuzzSplitStatements(f *testing.F) {
	for _, s := range []string{"SELECT 1;", "DO $$ ; $$;", "SELECT E'\\';'", "/* /* */ */;", "-- +goose StatementBegin\nx;\n-- +goose StatementEnd\n", "$a$$a$;", "'';\"\";"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		stmts, err := splitStatements(src)
		if err != nil {
			return
		}
		for _, st := range stmts {
			if st.block || strings.Contains(st.sql, "-- +goose") {
				continue
			}
			again, err := splitStatements(st.sql)
			if err != nil || len(again) != 1 || again[0].sql != st.sql {
				t.Fatalf("statement %q of %q splits again into %+v (%v)", st.sql, src, again, err)
			}
		}
	})
}
