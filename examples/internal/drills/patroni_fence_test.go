package drills

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/patroniharness"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// writeSampler samples, every few milliseconds, which nodes of the cluster
// would accept a write (answer and are not in recovery), all nodes at once
// in each sweep.
type writeSampler struct {
	c      *patroniharness.Cluster
	stop   context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	sweeps int
	most   int
	worst  string
	none   int // sweeps with no writable node
}

func sampleWritable(ctx context.Context, c *patroniharness.Cluster, every time.Duration) *writeSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &writeSampler{c: c, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			writable := make([]bool, len(c.Nodes))
			var wg sync.WaitGroup
			for i, n := range c.Nodes {
				wg.Add(1)
				go func() { defer wg.Done(); writable[i] = n.Writable(ctx) }()
			}
			wg.Wait()
			if ctx.Err() != nil {
				return
			}
			count, names := 0, []string{}
			for i, w := range writable {
				if w {
					count++
					names = append(names, c.Nodes[i].Name)
				}
			}
			s.mu.Lock()
			s.sweeps++
			if count == 0 {
				s.none++
			}
			if count > s.most {
				s.most, s.worst = count, fmt.Sprintf("%v at %s", names, time.Now().Format(time.RFC3339Nano))
			}
			s.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	return s
}

func (s *writeSampler) finish() (sweeps, most, none int, worst string) {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sweeps, s.most, s.none, s.worst
}

// writeProbe writes one row after another through a pool, each write with
// a deadline of its own, and records which were acknowledged and when:
// the longest gap between two acknowledged writes is the write outage a
// client of the pool sees.
type writeProbe struct {
	stop context.CancelFunc
	done chan struct{}

	mu        sync.Mutex
	acked     []int64
	last      time.Time
	gap       time.Duration
	gapEnd    time.Time
	failures  int
	lastError error
}

func startWriteProbe(t *testing.T, ctx context.Context, pool *pgxpool.Pool, every time.Duration) *writeProbe {
	t.Helper()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS ha_probe (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &writeProbe{stop: cancel, done: make(chan struct{}), last: time.Now()}
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
			var id int64
			err := pool.QueryRow(wctx, `INSERT INTO ha_probe DEFAULT VALUES RETURNING id`).Scan(&id)
			wcancel()
			now := time.Now()
			p.mu.Lock()
			if err == nil {
				p.acked = append(p.acked, id)
				if g := now.Sub(p.last); g > p.gap {
					p.gap, p.gapEnd = g, now
				}
				p.last = now
			} else if ctx.Err() == nil {
				p.failures++
				p.lastError = err
			}
			p.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	return p
}

// finish stops the probe and returns the acknowledged ids, the longest gap
// between acknowledged writes and the failed writes.
func (p *writeProbe) finish() (acked []int64, outage time.Duration, failures int, lastErr error) {
	p.stop()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked, p.gap, p.failures, p.lastError
}

// assertProbeRows requires every acknowledged probe write to be present.
func assertProbeRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, acked []int64, what string) {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ha_probe WHERE id = ANY($1)`, acked).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(acked) || len(acked) == 0 {
		t.Errorf("%s: %d writes acknowledged, %d present", what, len(acked), n)
	}
}

// TestPatroniFencingLeaderLosesEtcd: mid-sale the leader is cut off from
// etcd (a partition: its connections dropped, new ones refused) while the
// standby still reaches it. Patroni on the leader cannot renew the leader
// key, and within retry_timeout — before the key's TTL runs out — demotes
// it (stops PostgreSQL); only then may the standby take the key and
// promote. The drill samples every node every few milliseconds: never two
// writable at once. Writes sent to the old leader directly (not through
// the multi-host URL) fail from its demotion on, and every one of them it
// acknowledged is on the new leader (synchronous replication). The sale
// goes on on the new leader with nothing acknowledged lost; once etcd is
// back the old leader rejoins as the synchronous standby.
func TestPatroniFencingLeaderLosesEtcd(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 6*time.Minute)
	// A TTL well above retry_timeout: the leader demotes itself seconds
	// before its key expires, even on a loaded machine.
	c := startPatroni(t, ctx, patroniharness.Options{TTL: 15})
	oldLeader, standby := c.Nodes[0], c.Nodes[1]
	sampler := sampleWritable(ctx, c, 10*time.Millisecond)
	pool, relayPool, admin := haPools(t, c)
	requireSyncCommit(t, ctx, admin, standby.Name)
	direct := newPool(t, oldLeader.URL()+"&application_name=drill-direct", 2)
	r := newRig(t, rigConfig{Pool: pool, Admin: admin, Schema: "patroni_fence", Stock: 400, Buckets: 4,
		Tx: pgtx.Options{ResolveCommit: true}, Timeout: 6 * time.Minute})
	msgs := r.messages(plan{Users: 400, DoubleClick: 10, Expired: 5, Pay: 2})
	stopRelays := r.startRelays(relayPool, 2, outbox.RelayConfig{Lease: 2 * time.Second, RecoverInterval: 200 * time.Millisecond})
	payments := r.startPayers(2, len(msgs))
	canceller := r.startCanceller(1, 20, 20*time.Millisecond)
	// A slow sale whose last fifth waits for the new leader.
	fenced := make(chan struct{})
	q := r.consume(msgs, deliverConfig{Workers: 8, Handle: paced(r, 400*time.Millisecond, msgs[len(msgs)*4/5:], fenced)})
	q.waitAcked(int64(len(msgs)) / 5)

	through := startWriteProbe(t, ctx, direct, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // a few acknowledged writes through the old leader
	cut, ackedBefore := time.Now(), q.acked.Load()
	oldLeader.CutEtcd()
	// The old leader stops accepting writes (demoted) …
	for oldLeader.Writable(ctx) {
		select {
		case <-ctx.Done():
			t.Fatalf("%s still writable after losing etcd: %v", oldLeader.Name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	demoted := time.Since(cut)
	// … and only then does the standby take over.
	newLeader, err := c.WaitLeader(ctx, oldLeader.Name, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	promoted := time.Since(cut)
	if newLeader != standby {
		t.Fatalf("%s took over; want the synchronous standby %s", newLeader.Name, standby.Name)
	}
	close(fenced)
	t.Logf("%d messages acknowledged between the cut and the promotion, %d left", q.acked.Load()-ackedBefore, q.left.Load())
	directAcked, _, directFailures, directErr := through.finish()
	t.Logf("%s cut off from etcd: demoted (not writable) after %v, %s promoted after %v; writes through the old leader: %d acknowledged, %d failed (e.g. %v)",
		oldLeader.Name, demoted.Round(time.Millisecond), newLeader.Name, promoted.Round(time.Millisecond), len(directAcked), directFailures, directErr)
	if directFailures == 0 {
		t.Errorf("no write through the fenced leader failed")
	}
	if !oldLeader.LogContains("demoting self because DCS is not accessible") {
		t.Errorf("%s's Patroni did not demote it for the lost DCS; log:\n%s", oldLeader.Name, oldLeader.Log())
	}

	oldLeader.RestoreEtcd()
	assertRejoined(t, ctx, c, oldLeader, false)
	sweeps, most, none, worst := sampler.finish()
	t.Logf("writable nodes sampled %d times: at most %d at once; %d samples with none writable (the write outage)", sweeps, most, none)
	if most > 1 {
		t.Errorf("two writable nodes at once: %s", worst)
	}
	if sweeps < 100 {
		t.Errorf("only %d samples of the writable nodes", sweeps)
	}
	assertProbeRows(t, ctx, admin, directAcked, "writes acknowledged by the fenced leader")
	r.finishSale(msgs, q, payments, canceller, stopRelays)
}

// TestPatroniSwitchoverUnderLoad: a planned switchover (patronictl
// switchover) from the leader to the synchronous standby in the middle of
// the sale. Buyers see retries at most: every message is acknowledged once
// the pools reconnect to the new leader, nothing acknowledged is lost, and
// the old leader rejoins as the synchronous standby (a clean shutdown
// needs no rewind). The drill reports the write outage: the longest gap
// between two acknowledged writes of a probe writing every 5ms through the
// multi-host URL.
func TestPatroniSwitchoverUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 6*time.Minute)
	c := startPatroni(t, ctx, patroniharness.Options{})
	oldLeader, standby := c.Nodes[0], c.Nodes[1]
	pool, relayPool, admin := haPools(t, c)
	requireSyncCommit(t, ctx, admin, standby.Name)
	probePool := newPool(t, c.URL()+"&application_name=drill-probe", 1)
	r := newRig(t, rigConfig{Pool: pool, Admin: admin, Schema: "patroni_switchover", Stock: 400, Buckets: 4,
		Tx: pgtx.Options{ResolveCommit: true}, Timeout: 6 * time.Minute})
	msgs := r.messages(plan{Users: 400, DoubleClick: 10, Expired: 5, Pay: 2})
	stopRelays := r.startRelays(relayPool, 2, outbox.RelayConfig{Lease: 2 * time.Second, RecoverInterval: 200 * time.Millisecond})
	payments := r.startPayers(2, len(msgs))
	canceller := r.startCanceller(1, 20, 20*time.Millisecond)
	// A slow sale whose last fifth waits for the new leader.
	switched := make(chan struct{})
	q := r.consume(msgs, deliverConfig{Workers: 8, Handle: paced(r, 400*time.Millisecond, msgs[len(msgs)*4/5:], switched)})
	q.waitAcked(int64(len(msgs)) / 5)

	probe := startWriteProbe(t, ctx, probePool, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	began, ackedBefore := time.Now(), q.acked.Load()
	out, err := c.Switchover(ctx, oldLeader.Name, standby.Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(ctx, oldLeader.Name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	close(switched)
	t.Logf("patronictl switchover returned and %s accepts writes %v after the call; %d messages acknowledged meanwhile, %d left:\n%s",
		standby.Name, time.Since(began).Round(time.Millisecond), q.acked.Load()-ackedBefore, q.left.Load(), strings.TrimSpace(out))
	// Writes go on on the new leader for a moment before the probe stops.
	ackedAt := len(probeAcked(probe))
	for len(probeAcked(probe)) < ackedAt+20 {
		select {
		case <-ctx.Done():
			t.Fatal("the probe never wrote on the new leader")
		case <-time.After(10 * time.Millisecond):
		}
	}
	acked, outage, failures, lastErr := probe.finish()
	t.Logf("write outage of the switchover: %v (longest gap between acknowledged writes); %d writes acknowledged, %d failed (e.g. %v)",
		outage.Round(time.Millisecond), len(acked), failures, lastErr)
	assertRejoined(t, ctx, c, oldLeader, false)
	assertProbeRows(t, ctx, admin, acked, "probe writes")
	r.finishSale(msgs, q, payments, canceller, stopRelays)
}

func probeAcked(p *writeProbe) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked
}
