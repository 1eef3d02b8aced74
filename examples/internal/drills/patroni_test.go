package drills

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/patroniharness"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// The drills on a Patroni cluster: etcd and two PostgreSQL nodes, each run
// by its own Patroni (synchronous_mode, use_pg_rewind), every client on a
// multi-host URL with target_session_attrs=read-write.

// startPatroni starts a Patroni cluster stopped at the end of the test,
// and fails the test if a process of it outlives Stop.
func startPatroni(t *testing.T, ctx context.Context, opts patroniharness.Options) *patroniharness.Cluster {
	t.Helper()
	began := time.Now()
	c, err := patroniharness.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Patroni cluster of %d nodes up in %v", len(c.Nodes), time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		dir := c.Dir()
		if err := c.Stop(); err != nil {
			t.Errorf("stop the Patroni cluster: %v", err)
		}
		if left := patroniharness.Leftovers(dir); len(left) > 0 {
			t.Errorf("processes of the Patroni cluster left running: %v", left)
		}
	})
	return c
}

// haPools are the drill's pools on the cluster's multi-host URL.
func haPools(t *testing.T, c *patroniharness.Cluster) (flowPool, relayPool, admin *pgxpool.Pool) {
	t.Helper()
	return newPool(t, c.URL()+"&application_name=drill-flow", 10),
		newPool(t, c.URL()+"&application_name=drill-relay", 4),
		newPool(t, c.URL()+"&application_name=drill-admin", 4)
}

// requireSyncCommit fails the test unless commits wait for a synchronous
// standby: otherwise the drill would prove nothing.
func requireSyncCommit(t *testing.T, ctx context.Context, admin *pgxpool.Pool, standby string) {
	t.Helper()
	var commit, names string
	if err := admin.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names')`).Scan(&commit, &names); err != nil {
		t.Fatal(err)
	}
	if commit != "on" || !strings.Contains(names, standby) {
		t.Fatalf("synchronous_commit = %s, synchronous_standby_names = %s: want on and %s", commit, names, standby)
	}
}

// assertReconciled runs the three-way reconciliation (orders by status,
// ledger by type, events by status, in one snapshot) and requires every
// difference to match — or to be a front-door release in flight, which
// the drills (without a front door) leave pending.
func (r *rig) assertReconciled() {
	r.t.Helper()
	rec, err := r.audit.Reconcile(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, d := range rec.Differences {
		if d.Class != flow.ClassMatch && d.Class != flow.ClassReleaseInFlight {
			r.t.Errorf("reconciliation: %s: %d vs %d: %s", d.Name, d.Have, d.Expected, d.Class)
		}
	}
	r.t.Logf("reconciliation:\n%s", rec)
}

// assertAcknowledgedSurvive requires every order acknowledged as created
// and every payment acknowledged as paid to be in the database.
func (r *rig) assertAcknowledgedSurvive(payments *payer) {
	r.t.Helper()
	created := r.ackedCreated()
	if got := r.count(`SELECT count(*) FROM %s.orders WHERE order_id = ANY($1)`, created); got != int64(len(created)) || len(created) == 0 {
		r.t.Errorf("%d orders acknowledged as created, %d of them exist", len(created), got)
	}
	var paid []int64
	payments.mu.Lock()
	for id, k := range payments.results {
		if k == order.PaymentPaid {
			paid = append(paid, id)
		}
	}
	payments.mu.Unlock()
	if got := r.count(`SELECT count(*) FROM %s.orders WHERE order_id = ANY($1) AND status = 30`, paid); got != int64(len(paid)) || len(paid) == 0 {
		r.t.Errorf("%d payments acknowledged, %d orders paid", len(paid), got)
	}
	r.t.Logf("acknowledged and present: %d orders, %d payments", len(created), len(paid))
}

// finishSale waits for the queue, drains the outbox, ends payments and
// cancels, and runs every check: acknowledged orders and payments present,
// exactly once, every event published, the audit and the reconciliation.
func (r *rig) finishSale(msgs []*msg, q *queue, payments *payer, canceller *canceller, stopRelays func()) {
	r.t.Helper()
	q.wait()
	r.drain()
	payments.close()
	canceller.finish(r)
	r.drain()
	stopRelays()
	r.t.Logf("pgtx events %v; payment retries %d, cancel sweep errors %d, cancelled %d; redeliveries %d",
		r.tx, payments.errs.Load(), canceller.errs.Load(), canceller.cancelled.Load(), q.redeliv.Load())
	r.logErrors()
	r.assertAcknowledgedSurvive(payments)
	r.assertExactlyOnce(msgs)
	r.assertAllPublished()
	r.assertAudit()
	r.assertReconciled()
}

// timelineRule counts the unknown commits that ResolveCommit left unknown
// because the server it asked was on another timeline.
type timelineRule struct{ n atomic.Int64 }

func (tr *timelineRule) handle(r *rig) func(ctx context.Context, m *msg) (flow.Outcome, error) {
	return func(ctx context.Context, m *msg) (flow.Outcome, error) {
		out, err := r.svc.PlaceOrder(ctx, m.ID, m.Body)
		var ce *pgtx.CommitError
		if errors.As(err, &ce) && ce.Unknown && strings.Contains(ce.Resolution, "timeline changed") {
			tr.n.Add(1)
		}
		return out, err
	}
}

// paced is the flow's PlaceOrder after a pause of d until after is closed
// (always, when after is nil): eight consumers then take about d/8 per
// message, so the sale goes on through a fault that takes seconds. The
// messages of late wait for after: the end of the sale is certainly
// processed after the fault.
func paced(r *rig, d time.Duration, late []*msg, after <-chan struct{}) func(ctx context.Context, m *msg) (flow.Outcome, error) {
	held := map[*msg]bool{}
	for _, m := range late {
		held[m] = true
	}
	return func(ctx context.Context, m *msg) (flow.Outcome, error) {
		fast := false
		if after != nil {
			select {
			case <-after:
				fast = true
			default:
			}
		}
		if !fast {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return flow.Outcome{}, ctx.Err()
			case <-t.C:
			}
		}
		if held[m] {
			select {
			case <-ctx.Done():
				return flow.Outcome{}, ctx.Err()
			case <-after:
			}
		}
		return r.svc.PlaceOrder(ctx, m.ID, m.Body)
	}
}

// walReceiverPID is the standby's WAL receiver process.
func walReceiverPID(t *testing.T, ctx context.Context, n *patroniharness.Node) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pid FROM pg_stat_wal_receiver WHERE status = 'streaming'`).Scan(&pid); err != nil {
		t.Fatalf("%s has no streaming WAL receiver: %v", n.Name, err)
	}
	return pid
}

// waitSyncRepWaiters waits until at least n sessions of application app
// on node wait in COMMIT for the synchronous standby.
func waitSyncRepWaiters(t *testing.T, ctx context.Context, node *patroniharness.Node, app string, n int) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, node.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var got int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND application_name = $1`, app).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("only %d COMMITs wait for the held standby, want %d", got, n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// assertRejoined requires node to be a streaming synchronous standby of
// the leader on the leader's timeline (pg_stat_replication), and, when
// rewound, its Patroni to have run pg_rewind successfully.
func assertRejoined(t *testing.T, ctx context.Context, c *patroniharness.Cluster, node *patroniharness.Node, wantRewind bool) patroniharness.Status {
	t.Helper()
	if err := c.WaitHealthy(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the rejoin: %s", st)
	t.Logf("patronictl list:\n%s", c.List(ctx))
	if st.Leader == node.Name {
		t.Fatalf("%s leads again; want it a standby", node.Name)
	}
	found := false
	for _, r := range st.Replication {
		if r.Name == node.Name && r.State == "streaming" {
			found = true
		}
	}
	if !found {
		t.Errorf("%s is not in the leader's pg_stat_replication: %s", node.Name, st)
	}
	tl, err := node.Timeline(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tl != st.Timeline {
		t.Errorf("%s replays timeline %d, the leader is on %d", node.Name, tl, st.Timeline)
	}
	if wantRewind && !node.LogContains("pg_rewind exit code=0") {
		t.Errorf("%s rejoined without a successful pg_rewind; its log:\n%s", node.Name, node.Log())
	}
	return st
}

// TestPatroniKillLeaderMidSale: kill -9 of the Patroni leader — its
// Patroni and its postmaster and every server process — in the middle of
// the sale. Just before, the synchronous standby's WAL receiver is held
// until consumer COMMITs wait for it, and it is killed right after the
// leader (what it had not flushed is gone): those COMMITs are unknown
// outcomes whose WAL the standby never got. Patroni promotes the
// synchronous standby once the leader key expires; the pools follow it
// (target_session_attrs=read-write). Then: every acknowledged order and
// payment is on the new leader; ResolveCommit, asking the new leader,
// leaves the waiting COMMITs unknown (the timeline rule: another
// timeline's pg_xact_status says nothing about them) — a probe
// transaction whose id certainly reached the client shows it every run,
// and its row is not on the new leader; the sale's redeliveries
// meet the inbox and create each order once; every event is published;
// the audit and the reconciliation pass. The old leader, started again,
// is rewound by Patroni (pg_rewind) and rejoins as the synchronous standby
// on the new timeline.
func TestPatroniKillLeaderMidSale(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 6*time.Minute)
	c := startPatroni(t, ctx, patroniharness.Options{})
	oldLeader, standby := c.Nodes[0], c.Nodes[1]
	pool, relayPool, admin := haPools(t, c)
	requireSyncCommit(t, ctx, admin, standby.Name)
	// ObserveAll: the COMMITs counted waiting at the kill are any of the
	// flow pool's (orders, payments, cancels), so every one of them must
	// be observed.
	r := newRig(t, rigConfig{Pool: pool, Admin: admin, Schema: "patroni_kill", Stock: 400, Buckets: 4, ObserveAll: true,
		Tx: pgtx.Options{ResolveCommit: true, ResolveTimeout: 90 * time.Second}, Timeout: 6 * time.Minute})
	msgs := r.messages(plan{Users: 400, DoubleClick: 10, Expired: 5, Pay: 2})
	var rule timelineRule
	stopRelays := r.startRelays(relayPool, 2, outbox.RelayConfig{Lease: 2 * time.Second, RecoverInterval: 200 * time.Millisecond})
	payments := r.startPayers(2, len(msgs))
	canceller := r.startCanceller(1, 20, 20*time.Millisecond)
	q := r.consume(msgs, deliverConfig{Workers: 8, Handle: rule.handle(r)})
	q.waitAcked(int64(len(msgs)) * 2 / 5)

	// A transaction of its own whose COMMIT will wait for the held
	// standby: its id reaches the client before COMMIT (RunInTx reads it
	// in a round trip of its own), so ResolveCommit can ask about it.
	probePool := newPool(t, c.URL()+"&application_name=drill-timeline", 1)
	if _, err := probePool.Exec(ctx, `CREATE TABLE ha_timeline_probe (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	receiver := walReceiverPID(t, ctx, standby)
	if err := syscall.Kill(receiver, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	probeErr := make(chan error, 1)
	go func() {
		probeErr <- pgtx.RunInTx(ctx, probePool, pgtx.Options{Name: "timeline_probe", ResolveCommit: true, ResolveTimeout: 90 * time.Second},
			func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO ha_timeline_probe VALUES (1)`)
				return err
			})
	}()
	waitSyncRepWaiters(t, ctx, oldLeader, "drill-timeline", 1)
	waiters := waitSyncRepWaiters(t, ctx, oldLeader, "drill-flow", 2)
	ackedBefore := q.acked.Load()
	killed := time.Now()
	if err := oldLeader.Kill(); err != nil {
		t.Fatal(err)
	}
	// The standby loses what its frozen receiver had not flushed.
	_ = syscall.Kill(receiver, syscall.SIGKILL)
	newLeader, err := c.WaitLeader(ctx, oldLeader.Name, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	promoted := time.Since(killed)
	t.Logf("kill -9 of %s after %d of %d messages were acknowledged, %d COMMITs waiting for the standby; %s leads and accepts writes %v later",
		oldLeader.Name, ackedBefore, len(msgs), waiters, newLeader.Name, promoted.Round(time.Millisecond))
	if newLeader != standby {
		t.Fatalf("%s took over; want the synchronous standby %s", newLeader.Name, standby.Name)
	}

	// The old leader comes back: Patroni rewinds it onto the new timeline.
	if err := oldLeader.Start(); err != nil {
		t.Fatal(err)
	}
	st := assertRejoined(t, ctx, c, oldLeader, true)
	if st.Timeline < 2 {
		t.Errorf("the new leader is on timeline %d, want a new one (2)", st.Timeline)
	}
	t.Logf("old leader rejoined %v after the kill", time.Since(killed).Round(time.Millisecond))

	r.finishSale(msgs, q, payments, canceller, stopRelays)
	if got := r.tx.get("commit_unknown"); got < int64(waiters) {
		t.Errorf("%d unknown commits, want at least the %d COMMITs waiting at the kill", got, waiters)
	}
	if got := r.tx.get("resolved_committed"); got != 0 {
		t.Errorf("ResolveCommit called %d commits of the old timeline committed", got)
	}
	// The timeline rule on the probe: its COMMIT was unknown, and the new
	// leader (timeline 2) was not asked to vouch for an id of timeline 1.
	var ce *pgtx.CommitError
	select {
	case err := <-probeErr:
		if !errors.As(err, &ce) || !ce.Unknown || !strings.Contains(ce.Resolution, "timeline changed") {
			t.Errorf("the probe's COMMIT across the promotion: %v; want an unknown outcome left unknown for the timeline change", err)
		}
	case <-ctx.Done():
		t.Fatal("the probe transaction never returned")
	}
	var present bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM ha_timeline_probe)`).Scan(&present); err != nil {
		t.Fatal(err)
	}
	if present {
		t.Errorf("the probe's row, whose COMMIT never reached the standby, is on the new leader")
	}
	resolution := "no CommitError"
	if ce != nil {
		resolution = ce.Resolution
	}
	t.Logf("timeline rule: the probe's COMMIT stayed unknown (%s); %d of the sale's unknown commits too (the others lost their transaction id with the connection), each redelivered and met by the inbox",
		resolution, rule.n.Load())
}
