//go:build !sqlmutate

package sqlfile

import (
	"os"
	"path/filepath"
	"testing"
)

// Without the sqlmutate tag the environment cannot replace a statement.
func TestNoMutationHookWithoutTag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "get.sql")
	if err := os.WriteFile(file, []byte("SELECT 2"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvMutateStatement, "sqlfile.get")
	t.Setenv(EnvMutateFile, file)
	t.Setenv(EnvMutateRecord, "1")
	set := MustParse(fsOf(map[string]string{"a.sql": good}), "sql")
	if textHook != nil || MutationHook || set.pkg != "" {
		t.Fatal("the mutation hook is compiled in without the sqlmutate tag")
	}
	if got := set.Bind(`"s"`).Get("get"); got != `SELECT * FROM "s".t WHERE id = $1` {
		t.Fatalf("Get returned %q", got)
	}
}
