//go:build sqlmutate

package sqlfile

import (
	"os"
	"path/filepath"
	"testing"
)

// Under the sqlmutate tag the environment replaces the statement it names.
func TestMutationHookWithTag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "get.sql")
	if err := os.WriteFile(file, []byte("SELECT 2 FROM {schema}.t"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvMutateStatement, "sqlfile.get")
	t.Setenv(EnvMutateFile, file)
	set := MustParse(fsOf(map[string]string{"a.sql": good}), "sql")
	if !MutationHook || set.pkg != "sqlfile" {
		t.Fatalf("MutationHook %v, package %q", MutationHook, set.pkg)
	}
	b := set.Bind(`"s"`)
	if got := b.Get("get"); got != `SELECT 2 FROM "s".t` {
		t.Fatalf("Get returned %q", got)
	}
	if got := b.Get("count_all"); got != `SELECT count(*) FROM "s".t` {
		t.Fatalf("count_all: Get returned %q", got)
	}
}
