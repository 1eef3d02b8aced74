package patroniharness

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMissingProgram: a program that is not installed fails with one
// sentence naming the package. (The cluster itself is exercised by the
// drills in examples/internal/drills, each of which also checks that Stop
// leaves no process behind.)
func TestMissingProgram(t *testing.T) {
	_, err := findProgram("seckill-no-such-program", "some-package")
	if !errors.Is(err, ErrMissingProgram) || !strings.Contains(err.Error(), "apt-get install some-package") {
		t.Fatalf("err = %v", err)
	}
}

// TestFailedStartStopsEverything: a Start that fails half-way (its
// context ends while the nodes bootstrap) stops what it started: no
// process and no directory is left.
func TestFailedStartStopsEverything(t *testing.T) {
	tmp, err := os.MkdirTemp("", "seckill-harness-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil { // as /tmp: the server's OS user may enter it
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	c, err := Start(ctx, Options{})
	if err == nil {
		_ = c.Stop()
		t.Fatal("Start succeeded within 4s; the test wants it cut short")
	}
	if errors.Is(err, ErrMissingProgram) {
		t.Fatal(err)
	}
	t.Logf("Start: %.200s", err)
	if left := Leftovers(tmp); len(left) > 0 {
		t.Errorf("processes left after a failed Start: %v", left)
	}
	entries, _ := os.ReadDir(tmp)
	if len(entries) > 0 {
		t.Errorf("%d entries left in the temporary directory", len(entries))
	}
}

// TestUnhealthyNamesWhy: WaitHealthy's error names what keeps the cluster
// from being healthy, not only its status.
func TestUnhealthyNamesWhy(t *testing.T) {
	members := func(states ...string) []Member {
		ms := []Member{{Name: "n1", Role: "leader", State: "running"}, {Name: "n2", Role: "sync_standby", State: "streaming"}, {Name: "n3", Role: "replica", State: "streaming"}}
		for i, s := range states {
			ms[i].State = s
		}
		return ms
	}
	repl := []Replication{{"n2", "streaming", "sync"}, {"n3", "streaming", "async"}}
	for _, tc := range []struct {
		name string
		st   Status
		want string
	}{
		{"healthy", Status{Leader: "n1", Members: members(), Replication: repl}, ""},
		{"no leader", Status{Members: members(), Replication: repl}, "no member holds the leader key"},
		{"a member short", Status{Leader: "n1", Members: members()[:2], Replication: repl[:1]}, "2 of 3 nodes are members"},
		{"starting", Status{Leader: "n1", Members: members("running", "running", "starting"), Replication: repl}, "n3 (replica) is starting"},
		{"not connected", Status{Leader: "n1", Members: members(), Replication: repl[:1]}, "n3 is not in the leader's pg_stat_replication: it is not connected to n1"},
		{"catching up", Status{Leader: "n1", Members: members(), Replication: []Replication{repl[0], {"n3", "catchup", "async"}}}, "n3 is connected to n1 but catchup, not streaming"},
		{"no sync", Status{Leader: "n1", Members: members(), Replication: []Replication{{"n2", "streaming", "async"}, repl[1]}}, "0 synchronous standbys in pg_stat_replication and 1 sync_standby members, want 1 and 1"},
	} {
		if got := tc.st.unhealthy(3); got != tc.want {
			t.Errorf("%s: unhealthy = %q, want %q", tc.name, got, tc.want)
		}
		if got := tc.st.healthy(3); got != (tc.want == "") {
			t.Errorf("%s: healthy = %v", tc.name, got)
		}
	}
}
