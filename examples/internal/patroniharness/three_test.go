//go:build ha

package patroniharness

import (
	"context"
	"testing"
	"time"
)

// TestThreeNodesAsyncCandidate starts three nodes — a leader, its
// synchronous standby and an asynchronous replica — kills the leader with
// kill -9, and checks that only the synchronous standby is promoted, that
// the asynchronous replica follows it onto the new timeline and becomes
// its synchronous standby, and that the old leader rejoins through
// pg_rewind. Stop takes the leader down last and leaves no process behind. About a minute: it runs only
// with -tags ha:
//
//	go test -tags ha -count=1 -v -run TestThreeNodes ./examples/internal/patroniharness/
func TestThreeNodesAsyncCandidate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	dir := c.Dir()
	defer func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
		if left := Leftovers(dir); len(left) > 0 {
			t.Errorf("processes left: %v", left)
		}
	}()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before: %s", st)
	var syncName, asyncName string
	for _, m := range st.Members {
		switch m.Role {
		case "sync_standby":
			syncName = m.Name
		case "replica":
			asyncName = m.Name
		}
	}
	if st.Leader != "node1" || syncName == "" || asyncName == "" {
		t.Fatalf("want a leader, a synchronous standby and an asynchronous replica: %s", st)
	}
	old := c.Node(st.Leader)
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	n, err := c.WaitLeader(ctx, old.Name, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != syncName {
		t.Fatalf("%s was promoted; only the synchronous standby %s may be", n.Name, syncName)
	}
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	st, err = c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after: %s", st)
	if st.Timeline != 2 {
		t.Errorf("the new leader is on timeline %d, want 2", st.Timeline)
	}
	for _, name := range []string{asyncName, old.Name} {
		if tl, err := c.Node(name).Timeline(ctx); err != nil || tl != st.Timeline {
			t.Errorf("%s on timeline %d (%v), want %d", name, tl, err, st.Timeline)
		}
	}
	t.Logf("old leader rewound: %v", old.LogContains("pg_rewind exit code=0"))
	// Stop takes the leader down last, so that no standby promotes itself
	// on its way down.
	order := c.stopOrder()
	if last := order[len(order)-1].Name; last != n.Name {
		t.Errorf("Stop would stop %s last, want the leader %s", last, n.Name)
	}
}
