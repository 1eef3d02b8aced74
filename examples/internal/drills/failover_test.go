package drills

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// cluster is a throwaway primary with a streaming standby, and pools on a
// multi-host URL (target_session_attrs=read-write) that follow a failover.
type cluster struct {
	primary, standby *pgharness.Server
	url              string
}

func startCluster(t *testing.T, ctx context.Context, primary pgharness.Options, standby pgharness.StandbyOptions) *cluster {
	t.Helper()
	p, err := pgharness.StartThrowaway(ctx, primary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stop the primary: %v", err)
		}
	})
	s, err := p.StartStandby(ctx, standby)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop the standby: %v", err)
		}
	})
	return &cluster{primary: p, standby: s, url: pgharness.MultiHostURL(p, s)}
}

// pool is a pool on the multi-host URL whose connections carry app as
// their application_name.
func (c *cluster) pool(t *testing.T, app string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return newPool(t, c.url+"&application_name="+app, maxConns)
}

// failover crashes the primary (immediate shutdown), powers the standby
// off and on again — a WAL receiver held by HoldReplication loses what it
// had not flushed — and promotes it. afterCrash, when not nil, runs while
// no server accepts writes.
func (c *cluster) failover(t *testing.T, ctx context.Context, afterCrash func()) {
	t.Helper()
	if err := c.primary.Crash(); err != nil {
		t.Fatal(err)
	}
	if afterCrash != nil {
		afterCrash()
	}
	if err := c.standby.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.standby.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
}

// syncRepWaiters counts the primary's sessions of application app whose
// COMMIT waits for the synchronous standby.
func (c *cluster) syncRepWaiters(t *testing.T, ctx context.Context, conn *pgx.Conn, app string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND application_name = $1`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// stuckRelay starts a relay that claims one batch and holds it, publishing
// nothing, until release is called: its lease stays in the database across
// a fault. It returns the claimed event ids.
func (r *rig) stuckRelay(pool *pgxpool.Pool) (claimed []uuid.UUID, release func()) {
	r.t.Helper()
	ids := make(chan []uuid.UUID, 1)
	held := make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(held) }) }
	rl, err := outbox.NewRelay(pool, outbox.RelayConfig{
		Store: r.svc.Outbox, Owner: "drill-stuck-relay", BatchSize: 20, Lease: time.Minute, DisableListen: true,
		PollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond,
		Publish: func(ctx context.Context, ms []outbox.Message) []error {
			batch := make([]uuid.UUID, len(ms))
			for i, m := range ms {
				batch[i] = m.EventID
			}
			select {
			case ids <- batch:
			default:
			}
			<-held
			errs := make([]error, len(ms))
			for i := range errs {
				errs[i] = context.Canceled
			}
			return errs
		},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(r.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = rl.Run(ctx) }()
	release = func() { stop(); let(); <-done }
	r.t.Cleanup(release)
	select {
	case claimed = <-ids:
	case <-r.ctx.Done():
		r.t.Fatal("the stuck relay never claimed a batch")
	}
	return claimed, release
}

// ackedCreated lists the orders consumers were told were created.
func (r *rig) ackedCreated() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []int64
	for _, acks := range r.acks {
		for _, a := range acks {
			if !a.Duplicate && a.Code == flow.CodeOrderCreated {
				ids = append(ids, a.OrderID)
			}
		}
	}
	return ids
}

// TestFailoverSynchronousStandby runs the sale on a primary with a
// synchronous standby (synchronous_commit = on, synchronous_standby_names
// naming it); every client connects through a multi-host URL with
// target_session_attrs=read-write. Mid-sale — consumers, relays, payments
// and cancels running, one relay holding a claimed batch — the standby's
// WAL receiver is held until consumer COMMITs wait for it (executed on the
// primary, never on the standby, their clients still waiting), then the
// primary is stopped immediately and the standby promoted (what it had not
// flushed is lost with it). Then: every order and payment acknowledged
// before the failover exists on the new primary; the waiting COMMITs come
// back as unknown outcomes that ResolveCommit, asking the new primary, does
// not call committed (another timeline); their redeliveries meet the inbox
// and create each order once; consumers and relays reconnect by themselves
// and finish the sale; the stranded claim is recovered after its lease;
// the audit passes with exact counts.
func TestFailoverSynchronousStandby(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 4*time.Minute)
	c := startCluster(t, ctx, pgharness.Options{MaxConnections: 100}, pgharness.StandbyOptions{Synchronous: true, Name: "sync_standby"})
	pool := c.pool(t, "drill-flow", 10)
	relayPool := c.pool(t, "drill-relay", 4)
	admin := c.pool(t, "drill-admin", 4)
	for setting, want := range map[string]string{"synchronous_commit": "on", "synchronous_standby_names": `"sync_standby"`} {
		var v string
		if err := admin.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != want {
			t.Fatalf("%s = %s, want %s: the drill would prove nothing", setting, v, want)
		}
	}
	r := newRig(t, rigConfig{Pool: pool, Admin: admin, Schema: "failover_sync", Stock: 400, Buckets: 4,
		Tx: pgtx.Options{ResolveCommit: true}, Timeout: 4 * time.Minute})
	msgs := r.messages(plan{Users: 400, DoubleClick: 10, Expired: 5, Pay: 2})

	stopRelays := r.startRelays(relayPool, 2, outbox.RelayConfig{Lease: 2 * time.Second, RecoverInterval: 200 * time.Millisecond})
	payments := r.startPayers(2, len(msgs))
	canceller := r.startCanceller(1, 20, 20*time.Millisecond)
	q := r.consume(msgs, deliverConfig{Workers: 8})
	q.waitAcked(int64(len(msgs)) * 2 / 5)
	stranded, releaseStuck := r.stuckRelay(relayPool)

	// Hold replication until at least one consumer's COMMIT waits for the
	// standby (at most three of the flow's sessions are payers and the
	// canceller).
	primary, err := pgx.Connect(ctx, c.primary.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.standby.HoldReplication(ctx); err != nil {
		t.Fatal(err)
	}
	waiters := 0
	for waiters < 4 {
		if waiters = c.syncRepWaiters(t, ctx, primary, "drill-flow"); waiters < 4 {
			select {
			case <-ctx.Done():
				t.Fatalf("only %d COMMITs wait for the held standby", waiters)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	primary.Close(ctx)
	ackedBefore := q.acked.Load()
	began := time.Now()
	// The stuck relay's process is gone with the primary.
	c.failover(t, ctx, releaseStuck)
	t.Logf("failover (crash, standby power cycle, promotion) took %v", time.Since(began).Round(time.Millisecond))
	t.Logf("failover after %d of %d messages were acknowledged; %d COMMITs were waiting for the standby; %d events stranded in a claim",
		ackedBefore, len(msgs), waiters, len(stranded))

	q.wait()
	r.drain()
	payments.close()
	canceller.finish(r)
	r.drain()
	stopRelays()
	t.Logf("pgtx events %v; payment retries %d, cancel sweep errors %d, cancelled %d", r.tx, payments.errs.Load(), canceller.errs.Load(), canceller.cancelled.Load())
	r.logErrors()

	var port int
	if err := admin.QueryRow(ctx, `SELECT current_setting('port')::int`).Scan(&port); err != nil || port != c.standby.Port() {
		t.Fatalf("the pools reach port %d (%v), want the promoted standby's %d", port, err, c.standby.Port())
	}
	// The waiting COMMITs were unknown and never resolved as committed.
	if got := r.tx.get("commit_unknown"); got < 1 {
		t.Errorf("%d unknown commits, want at least one (COMMITs were waiting for the standby at the failover)", got)
	}
	if got := r.tx.get("resolved_committed"); got != 0 {
		t.Errorf("ResolveCommit reported %d commits of the old timeline as committed", got)
	}
	created := r.ackedCreated()
	if got := r.count(`SELECT count(*) FROM %s.orders WHERE order_id = ANY($1)`, created); got != int64(len(created)) {
		t.Errorf("%d orders acknowledged as created, %d of them exist after the failover", len(created), got)
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
		t.Errorf("%d payments acknowledged, %d orders paid after the failover", len(paid), got)
	}
	for _, id := range stranded {
		if r.pub.count(id) == 0 {
			t.Errorf("event %s, claimed before the failover, was never published", id)
		}
	}
	if got := r.pub.recovered.Load(); got < int64(len(stranded)) {
		t.Errorf("relays recovered %d expired leases, want at least the %d stranded", got, len(stranded))
	}
	t.Logf("acknowledged and present on the new primary: %d orders, %d payments; %d leases recovered; %d unknown commits redelivered",
		len(created), len(paid), r.pub.recovered.Load(), r.errCount("commit_unknown"))
	r.assertExactlyOnce(msgs)
	r.assertAllPublished()
	r.assertAudit()
}

// waitReceived waits until the standby has received and flushed the
// primary's WAL up to where it is now.
func (c *cluster) waitReceived(t *testing.T, ctx context.Context) {
	t.Helper()
	p, err := pgx.Connect(ctx, c.primary.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	s, err := pgx.Connect(ctx, c.standby.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	var lsn string
	if err := p.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	for {
		var ok bool
		if err := s.QueryRow(ctx, `SELECT coalesce(pg_last_wal_receive_lsn() >= $1::text::pg_lsn, false)`, lsn).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the standby never received the WAL up to %s", lsn)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ackedIDs is the set of messages acknowledged so far.
func (r *rig) ackedIDs() map[uuid.UUID]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make(map[uuid.UUID]bool, len(r.acks))
	for id := range r.acks {
		ids[id] = true
	}
	return ids
}

// TestFailoverAsynchronousStandby is the failover drill with asynchronous
// replication (synchronous_commit = local, no synchronous standby), to show
// exactly what it loses. The standby's WAL receiver is held while the sale
// goes on, so the primary acknowledges commits the standby never receives
// (an asynchronous standby's lag, made long); then the primary is stopped
// immediately and the standby promoted. Every message acknowledged during
// the hold is lost: its inbox row, its order and its events are not on the
// new primary, the broker will not redeliver it (it was acknowledged), and
// the stock it took is for sale again. The drill counts and reports the
// losses (acknowledged messages, created orders, events already published
// for rows that no longer exist) and asserts that they are the
// acknowledgements the standby never received (none acknowledged and
// replicated before the hold; all acknowledged after it, but for one per
// consumer whose COMMIT just preceded the hold) — and that the new primary
// is consistent in itself: the rest of the sale completes exactly once and
// the audit passes.
func TestFailoverAsynchronousStandby(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 4*time.Minute)
	c := startCluster(t, ctx, pgharness.Options{MaxConnections: 100, Settings: []string{"synchronous_commit=local"}},
		pgharness.StandbyOptions{Name: "async_standby"})
	pool := c.pool(t, "drill-flow", 10)
	relayPool := c.pool(t, "drill-relay", 4)
	admin := c.pool(t, "drill-admin", 4)
	r := newRig(t, rigConfig{Pool: pool, Admin: admin, Schema: "failover_async", Stock: 400, Buckets: 4,
		Tx: pgtx.Options{ResolveCommit: true}, Timeout: 4 * time.Minute})
	msgs := r.messages(plan{Users: 400, DoubleClick: 10, Expired: 5})

	stopRelays := r.startRelays(relayPool, 2, outbox.RelayConfig{Lease: 2 * time.Second, RecoverInterval: 200 * time.Millisecond})
	canceller := r.startCanceller(1, 20, 20*time.Millisecond)
	const workers = 8
	q := r.consume(msgs, deliverConfig{Workers: workers})
	q.waitAcked(int64(len(msgs)) * 3 / 10)
	// Everything acknowledged so far reaches the standby before the hold;
	// what is acknowledged after the hold never does. In between (the
	// usual asynchronous lag) it may go either way.
	replicated := r.ackedIDs()
	c.waitReceived(t, ctx)
	if err := c.standby.HoldReplication(ctx); err != nil {
		t.Fatal(err)
	}
	beforeHold := r.ackedIDs()
	q.waitAcked(int64(len(beforeHold)) + int64(len(msgs))/4)
	c.failover(t, ctx, nil)
	beforeCrash := r.ackedIDs()

	q.wait()
	r.drain()
	canceller.finish(r)
	r.drain()
	stopRelays()
	t.Logf("pgtx events %v; cancel sweep errors %d, cancelled %d", r.tx, canceller.errs.Load(), canceller.cancelled.Load())
	r.logErrors()

	// What the new primary lost: acknowledged messages without an inbox row.
	rows, err := admin.Query(ctx, r.q(`SELECT message_id FROM %s.consumer_inbox WHERE consumer_group = $1`), flow.ConsumerGroup)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	present := map[uuid.UUID]bool{}
	for _, id := range ids {
		present[id] = true
	}
	var kept []*msg
	lost, lostOrders, lostDuringHold, heldAcks := 0, 0, 0, 0
	r.mu.Lock()
	for _, m := range msgs {
		if present[m.ID] {
			kept = append(kept, m)
			continue
		}
		lost++
		if replicated[m.ID] {
			t.Errorf("message %s, acknowledged and replicated before the hold, is lost", m.ID)
		}
		if !beforeCrash[m.ID] {
			t.Errorf("message %s, never acknowledged before the failover, has no inbox row", m.ID)
		}
		for _, a := range r.acks[m.ID] {
			if !a.Duplicate && a.Code == flow.CodeOrderCreated {
				lostOrders++
				break
			}
		}
	}
	for id := range beforeCrash {
		if !beforeHold[id] {
			heldAcks++
			if !present[id] {
				lostDuringHold++
			}
		}
	}
	r.mu.Unlock()
	// Every acknowledgement recorded after the hold is lost, except at
	// most one per consumer: a COMMIT that reached the standby just before
	// the hold whose acknowledgement was recorded just after it.
	if heldAcks == 0 || lostDuringHold == 0 || heldAcks-lostDuringHold > workers {
		t.Errorf("%d messages acknowledged while replication was held, %d of them lost: want all but at most %d (one per consumer in flight at the hold)",
			heldAcks, lostDuringHold, workers)
	}
	// Events the relays published for rows the new primary does not have.
	rows, err = admin.Query(ctx, r.q(`SELECT event_id FROM %s.event_outbox`))
	if err != nil {
		t.Fatal(err)
	}
	events, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	inOutbox := map[uuid.UUID]bool{}
	for _, id := range events {
		inOutbox[id] = true
	}
	ghost := 0
	r.pub.mu.Lock()
	for id := range r.pub.seen {
		if !inOutbox[id] {
			ghost++
		}
	}
	r.pub.mu.Unlock()
	t.Logf("LOST with asynchronous replication: %d acknowledged messages (%d created orders whose buyers were told yes, their stock back on sale); "+
		"%d events were published for rows the new primary does not have", lost, lostOrders, ghost)

	r.assertExactlyOnce(kept)
	r.assertAllPublished()
	r.assertAudit()
}
