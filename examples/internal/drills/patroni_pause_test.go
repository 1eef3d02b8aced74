//go:build ha

package drills

import (
	"testing"
	"time"

	"github.com/seckillkit/seckill/examples/internal/patroniharness"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// TestPatroniPausedLeader: the leader's Patroni is frozen (SIGSTOP, a
// stalled agent) while its PostgreSQL keeps running, past the leader key's
// TTL. Without Patroni's watchdog nothing demotes the old primary: once
// the standby is promoted, two nodes answer as primaries. What keeps the
// promise is synchronous replication: the old primary's commits wait for
// its synchronous standby, which now leads and no longer streams from it,
// so none of them is acknowledged — every write the old primary
// acknowledged (through a connection to it alone) is on the new leader.
// When Patroni resumes (cut off from etcd: see below) it demotes the old
// primary and it rejoins as a standby. The drill reports how long two
// nodes accepted statements. It runs only with -tags ha:
//
//	go test -tags ha -race -count=1 -v -run TestPatroniPausedLeader ./examples/internal/drills/
func TestPatroniPausedLeader(t *testing.T) {
	ctx := pgtest.Context(t, 5*time.Minute)
	c := startPatroni(t, ctx, patroniharness.Options{})
	oldLeader, standby := c.Nodes[0], c.Nodes[1]
	sampler := sampleWritable(ctx, c, 10*time.Millisecond)
	_, _, admin := haPools(t, c)
	requireSyncCommit(t, ctx, admin, standby.Name)
	direct := newPool(t, oldLeader.URL()+"&application_name=drill-direct", 4)
	probe := startWriteProbe(t, ctx, direct, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)

	paused := time.Now()
	oldLeader.Pause()
	t.Cleanup(oldLeader.Resume)
	newLeader, err := c.WaitLeader(ctx, oldLeader.Name, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	promoted := time.Since(paused)
	// The old primary runs on, unfenced, for a while.
	time.Sleep(3 * time.Second)
	stillPrimary := oldLeader.Writable(ctx)
	// Patroni 3.0.2 resumed with etcd reachable reads the cluster from its
	// etcd3 watch cache, which may still show it holding the leader key;
	// it then renews its expired lease with a new one and writes the
	// leader key back unconditionally, taking it from the promoted standby
	// (fixed upstream by patroni/patroni#2689): in one run of two the old
	// primary stayed "the leader with the lock". So it resumes cut off
	// from etcd: renewing its key fails, it demotes itself (DCS not
	// accessible), and it reads a fresh view once etcd is back.
	oldLeader.CutEtcd()
	oldLeader.Resume()
	for deadline := time.Now().Add(90 * time.Second); oldLeader.Writable(ctx); {
		if time.Now().After(deadline) {
			t.Fatalf("%s still a primary 90s after its Patroni resumed; its log:\n%s", oldLeader.Name, oldLeader.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	demoted := time.Since(paused)
	oldLeader.RestoreEtcd()
	acked, _, failures, lastErr := probe.finish()
	t.Logf("%s's Patroni paused: %s promoted after %v; %s still a primary 3s later: %v; demoted %v after the pause (%v after the resume)",
		oldLeader.Name, newLeader.Name, promoted.Round(time.Millisecond), oldLeader.Name, stillPrimary,
		demoted.Round(time.Millisecond), (demoted - promoted - 3*time.Second).Round(time.Millisecond))
	t.Logf("writes through %s alone: %d acknowledged, %d failed (e.g. %v)", oldLeader.Name, len(acked), failures, lastErr)
	assertRejoined(t, ctx, c, oldLeader, false)
	sweeps, most, none, worst := sampler.finish()
	t.Logf("writable nodes sampled %d times: at most %d at once (%s); %d samples with none", sweeps, most, worst, none)
	if !stillPrimary || most < 2 {
		t.Logf("the old primary was demoted without its Patroni: not the case this drill shows")
	}
	// The promise: nothing the old primary acknowledged is lost.
	assertProbeRows(t, ctx, admin, acked, "writes acknowledged by the paused leader's PostgreSQL")
}
