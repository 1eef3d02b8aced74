package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

const stmt = `WITH lk AS (
	SELECT status FROM {schema}.t WHERE id = $1 FOR NO KEY UPDATE
), upd AS (
	UPDATE {schema}.t SET status = 20, n = n + 1
	 WHERE id = $1 AND (status = 10 OR qty >= $2) AND created BETWEEN $3 AND $4
	RETURNING id
)
SELECT CASE WHEN n < 3 AND status <> 0 THEN 1 END FROM {schema}.t
 WHERE status IN (0, 10) ORDER BY id LIMIT $5 FOR UPDATE SKIP LOCKED`

func TestGenerate(t *testing.T) {
	t.Parallel()
	got := map[string]bool{}
	for _, m := range generate(stmt, enums{"status": {0, 10, 20}}) {
		got[m.Kind+": "+m.New] = true
		if m.Kind == "compare" && strings.HasPrefix(m.New, "UPDATE") {
			t.Errorf("the = of a SET list flipped: %s", m.New)
		}
		if m.Kind == "conjunct" && strings.Contains(m.New, "(true OR ($4) IS NULL)") {
			t.Errorf("the AND of a BETWEEN split: %s", m.New)
		}
	}
	for _, want := range []string{
		"lock: SELECT status FROM {schema}.t WHERE id = $1",
		"conjunct: SELECT status FROM {schema}.t WHERE (true OR (id = $1) IS NULL) FOR NO KEY UPDATE",
		"status: UPDATE {schema}.t SET status = 0, n = n + 1",
		"conjunct: WHERE id = $1 AND (true OR ((status = 10 OR qty >= $2)) IS NULL) AND created BETWEEN $3 AND $4",
		"disjunct: WHERE id = $1 AND (status = 10 OR (false AND (qty >= $2) IS NULL)) AND created BETWEEN $3 AND $4",
		"conjunct: WHERE id = $1 AND (status = 10 OR qty >= $2) AND (true OR (created BETWEEN $3 AND $4) IS NULL)",
		"compare: WHERE id = $1 AND (status = 10 OR qty > $2) AND created BETWEEN $3 AND $4",
		"conjunct: SELECT CASE WHEN n < 3 AND (true OR (status <> 0) IS NULL) THEN 1 END FROM {schema}.t",
		"status: SELECT CASE WHEN n < 3 AND status <> 10 THEN 1 END FROM {schema}.t",
		"status: WHERE status IN (0, 20) ORDER BY id LIMIT $5 FOR UPDATE SKIP LOCKED",
		"limit: WHERE status IN (0, 10) ORDER BY id LIMIT NULL + 0 * ($5) FOR UPDATE SKIP LOCKED",
		"lock: WHERE status IN (0, 10) ORDER BY id LIMIT $5 FOR UPDATE",
		"lock: WHERE status IN (0, 10) ORDER BY id LIMIT $5",
	} {
		if !got[want] {
			t.Errorf("no mutant %q", want)
		}
	}
}

// Every statement of the four packages yields mutants that still name
// their placeholders, and the lexer covers each text whole.
func TestPackageMutants(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	for _, pkg := range []string{"inbox", "outbox", "order", "inventory"} {
		ms, err := packageMutantsIn(root, pkg, regexp.MustCompile(""))
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) < 20 {
			t.Errorf("%s: only %d mutants", pkg, len(ms))
		}
		for _, m := range ms {
			if m.Orig == m.New && m.Kind != "lock" && m.Kind != "conjunct" {
				t.Errorf("%s %s: the changed line is unchanged: %q", m.Statement, m.Desc, m.Orig)
			}
		}
	}
}

// The statement hook of internal/sqlfile is compiled in with the
// sqlmutate tag only (TestNoMutationHookWithoutTag covers the other side).
func TestOverrideUnderTag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a test binary")
	}
	t.Parallel()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "test", "-count=1", "-tags", "sqlmutate", "-run", "^TestMutationHookWithTag$", "./internal/sqlfile")
	cmd.Dir = filepath.Join("..", "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("go test -tags sqlmutate ./internal/sqlfile: %v\n%s", err, out)
	}
}

func TestKillersFirst(t *testing.T) {
	t.Parallel()
	k := killersOf([]result{
		{mutant: mutant{Statement: "p.a"}, Outcome: killed, By: "TestOne/tokens"},
		{mutant: mutant{Statement: "p.a"}, Outcome: killed, By: "TestTwo"},
		{mutant: mutant{Statement: "p.a"}, Outcome: lived},
		{mutant: mutant{Statement: "p.a"}, Outcome: invalid, By: "ERROR: syntax error"},
		{mutant: mutant{Statement: "p.b"}, Outcome: killed, By: "TestThree"},
	})
	if got := fmt.Sprint(k["p.a"]); got != "[TestTwo TestOne]" {
		t.Fatalf("killers of p.a = %s, want the most recent first, top-level names, no refusal text", got)
	}
	stages := [][]string{{"TestFast", "TestOne"}, {"TestSlow", "TestTwo", "TestThree"}}
	if got := fmt.Sprint(killersFirst(stages, k["p.a"])); got != "[[TestOne TestTwo] [TestFast] [TestSlow TestThree]]" {
		t.Fatalf("killersFirst = %s", got)
	}
	if got := fmt.Sprint(killersFirst(stages, nil)); got != fmt.Sprint(stages) {
		t.Fatalf("no killers: %s, want the stages as they are", got)
	}
	if got := fmt.Sprint(killersFirst([][]string{{"TestOne"}}, []string{"TestOne"})); got != "[[TestOne]]" {
		t.Fatalf("a stage left empty: %s", got)
	}
}
