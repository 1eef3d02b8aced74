package sqlfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMutatedText(t *testing.T) {
	t.Parallel()
	set, err := Parse(fsOf(map[string]string{"a.sql": good}), "sql")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := set.Lookup("get")
	file := filepath.Join(t.TempDir(), "get.sql")
	if err := os.WriteFile(file, []byte("SELECT 1 FROM {schema}.t WHERE id <> $1"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"none", nil, st.Text},
		{"other statement", map[string]string{EnvMutateStatement: "p.count_all", EnvMutateFile: file}, st.Text},
		{"other package", map[string]string{EnvMutateStatement: "q.get", EnvMutateFile: file}, st.Text},
		{"replaced", map[string]string{EnvMutateStatement: "p.get", EnvMutateFile: file}, "SELECT 1 FROM {schema}.t WHERE id <> $1"},
		{"recorded", map[string]string{EnvMutateRecord: "1"}, "/* sqlmutate:p.get */ " + st.Text},
	} {
		if got := mutatedText("p", st, env(c.env)); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("an unreadable replacement file did not panic")
		}
	}()
	mutatedText("p", st, env(map[string]string{EnvMutateStatement: "p.get", EnvMutateFile: file + ".missing"}))
}
