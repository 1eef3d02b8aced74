package pgtx

import (
	"strings"
	"testing"
)

// TestEndsTx: the statements that end a transaction are found at the start
// of every statement of a text, in any case, after comments; words in
// comments, strings, quoted identifiers and dollar-quoted bodies, and the
// statements that keep the transaction, are not.
func TestEndsTx(t *testing.T) {
	for sql, want := range map[string]string{
		"ROLLBACK":                               "ROLLBACK",
		"rollback;":                              "ROLLBACK",
		"  Commit  ":                             "COMMIT",
		"COMMIT AND CHAIN":                       "COMMIT",
		"ROLLBACK AND NO CHAIN":                  "ROLLBACK",
		"ROLLBACK WORK":                          "ROLLBACK",
		"END":                                    "END",
		"end transaction":                        "END",
		"ABORT":                                  "ABORT",
		"PREPARE TRANSACTION 'x'":                "PREPARE TRANSACTION",
		"/* a comment */ ROLLBACK":               "ROLLBACK",
		"/* nested /* comment */ */ COMMIT":      "COMMIT",
		"-- a line\nROLLBACK":                    "ROLLBACK",
		"SELECT 1; ROLLBACK":                     "ROLLBACK",
		"SELECT ';'; END":                        "END",
		"SELECT $$;$$;COMMIT":                    "COMMIT",
		"SELECT $a$ ; ROLLBACK $a$; ABORT":       "ABORT",
		"SELECT 'a\\'; ROLLBACK; SELECT '\\'":    "ROLLBACK",
		"SELECT 1":                               "",
		"":                                       "",
		";;":                                     "",
		"ROLLBACK TO SAVEPOINT s":                "",
		"rollback to s":                          "",
		"SAVEPOINT s":                            "",
		"RELEASE SAVEPOINT s":                    "",
		"COMMIT PREPARED 'x'":                    "",
		"ROLLBACK PREPARED 'x'":                  "",
		"PREPARE p AS SELECT 1":                  "",
		"SELECT 'ROLLBACK'":                      "",
		"SELECT 1 -- ; ROLLBACK":                 "",
		"SELECT 1 /* ; ROLLBACK */":              "",
		`SELECT "a;b" FROM t; SELECT 2`:          "",
		"SELECT $$ ; ROLLBACK $$":                "",
		"SELECT $tag$ ; COMMIT $tag$":            "",
		"SELECT E'\\'; ROLLBACK'":                "",
		"SELECT 'it''s; COMMIT'":                 "",
		"SELECT $1::int; SELECT 2":               "",
		"WITH x AS (SELECT 1) SELECT * FROM x":   "",
		"INSERT INTO t (end_at) VALUES (now())":  "",
		"SELECT endpoint FROM t; SELECT commits": "",
	} {
		if got := endsTx(sql); got != want {
			t.Errorf("endsTx(%q) = %q, want %q", sql, got, want)
		}
	}
}

// FuzzEndsTx: endsTx never panics and never reads past the text.
func FuzzEndsTx(f *testing.F) {
	for _, s := range []string{"ROLLBACK", "SELECT $$", "SELECT 'a", "/* x", "SELECT $a$ ;", "E'\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { _ = endsTx(s) })
}

// BenchmarkEndsTx: the check RunBatch makes of every queued statement, on
// a statement of 4 KB without a semicolon (the common case: only its
// first word is read) and on one with a semicolon in a trailing comment
// (the text is walked to its end).
func BenchmarkEndsTx(b *testing.B) {
	long := "WITH upd AS (UPDATE t SET v = v - 1 WHERE id = $1 RETURNING v) " + strings.Repeat("SELECT v FROM upd UNION ALL ", 140) + "SELECT 1"
	for name, sql := range map[string]string{"one_statement": long, "semicolon_in_comment": long + " -- a; b"} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(sql)))
			for b.Loop() {
				if endsTx(sql) != "" {
					b.Fatal("found one")
				}
			}
		})
	}
}
