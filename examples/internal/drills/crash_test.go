package drills

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
)

// TestCrashImmediateShutdown crashes PostgreSQL (immediate shutdown: no
// checkpoint, every connection dropped) in the middle of the load —
// consumers, relays, payments and timeout cancels running, and one relay
// holding a claimed batch it has not marked — restarts it and lets the
// same driver continue. Every order a consumer acknowledged as created and
// every payment acknowledged as recorded survive, the relays resume, the
// stranded claim is recovered after its lease and published, and the
// audit passes.
func TestCrashImmediateShutdown(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	srv, err := pgharness.StartThrowaway(ctx, pgharness.Options{MaxConnections: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop the crash drill's server: %v", err)
		}
	})
	pool := newPool(t, srv.URL, 8)
	admin := newPool(t, srv.URL, 4)
	for _, name := range []string{"fsync", "synchronous_commit"} {
		var v string
		if err := admin.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != "on" {
			t.Fatalf("%s = %s, want on: the drill would prove nothing", name, v)
		}
	}
	r := newRig(t, rigConfig{Pool: pool, Admin: admin, Schema: "crash_drill", Stock: 400, Buckets: 4})
	msgs := r.messages(plan{Users: 400, DoubleClick: 10, Expired: 5, Pay: 2})

	const lease = 2 * time.Second
	relayCfg := outbox.RelayConfig{Lease: lease, RecoverInterval: 200 * time.Millisecond}
	stopRelays := r.startRelays(pool, 2, relayCfg)
	payments := r.startPayers(2, len(msgs))
	canceller := r.startCanceller(1, 20, 20*time.Millisecond)

	// Once armed, the next fresh orders are held in flight: their
	// transaction has run (bucket decremented and locked, order, inbox and
	// event written) and waits for the crash before its COMMIT.
	// (Each holds its bucket's row lock: the other consumers of that
	// bucket time out and are redelivered until the crash.)
	const inFlight = 3
	var armed atomic.Bool
	var holding atomic.Int64
	heldOrders := make(chan int64, inFlight)
	crashed := make(chan struct{})
	var crashOnce sync.Once
	crash := func() { crashOnce.Do(func() { close(crashed) }) }
	t.Cleanup(crash)
	var heldMu sync.Mutex
	heldErrs := map[int64]error{}
	// Only buyers who clicked once are held: a double click's other
	// message may legitimately take the order while one is held.
	clicks := map[int64]int{}
	for _, m := range msgs {
		clicks[m.M.UserID]++
	}
	handle := func(ctx context.Context, m *msg) (flow.Outcome, error) {
		if !armed.Load() || holding.Load() >= inFlight || clicks[m.M.UserID] > 1 {
			return r.svc.PlaceOrder(ctx, m.ID, m.Body)
		}
		held := false
		out, err := r.placeWithTx(ctx, m, func(out flow.Outcome) {
			if out.Code == flow.CodeOrderCreated && !out.Duplicate && holding.Add(1) <= inFlight {
				held = true
				heldOrders <- m.M.OrderID
				<-crashed
			}
		})
		if held {
			heldMu.Lock()
			heldErrs[m.M.OrderID] = err
			heldMu.Unlock()
		}
		return out, err
	}
	q := r.consume(msgs, deliverConfig{Workers: 8, Handle: handle})
	q.waitAcked(int64(len(msgs)) * 2 / 5)
	armed.Store(true)
	var held []int64
	for len(held) < inFlight {
		select {
		case id := <-heldOrders:
			held = append(held, id)
		case <-ctx.Done():
			t.Fatalf("only %d orders held in flight", len(held))
		}
	}

	// One relay claims a batch and is still publishing it when the server
	// goes down: its lease stays behind in the database.
	stuckIDs := make(chan []uuid.UUID, 1)
	stuck, err := outbox.NewRelay(pool, outbox.RelayConfig{
		Store: r.svc.Outbox, Owner: "drill-stuck-relay", BatchSize: 20, Lease: time.Minute, DisableListen: true,
		PollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond,
		Publish: func(ctx context.Context, ms []outbox.Message) []error {
			ids := make([]uuid.UUID, len(ms))
			for i, m := range ms {
				ids[i] = m.EventID
			}
			select {
			case stuckIDs <- ids:
			default:
			}
			<-crashed
			errs := make([]error, len(ms))
			for i := range errs {
				errs[i] = context.Canceled
			}
			return errs
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stuckCtx, stopStuck := context.WithCancel(ctx)
	stuckDone := make(chan struct{})
	go func() { defer close(stuckDone); _ = stuck.Run(stuckCtx) }()
	t.Cleanup(func() { stopStuck(); crash(); <-stuckDone })
	var stranded []uuid.UUID
	select {
	case stranded = <-stuckIDs:
	case <-ctx.Done():
		t.Fatal("the stuck relay never claimed a batch")
	}
	ackedBefore := q.acked.Load()

	if err := srv.Crash(); err != nil {
		t.Fatal(err)
	}
	stopStuck() // the stuck relay's process is gone with the crash
	crash()
	<-stuckDone
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("crashed after %d of %d messages were acknowledged, %d orders in flight before COMMIT; %d events stranded in a claim",
		ackedBefore, len(msgs), len(held), len(stranded))

	// The same driver goes on: the pools reconnect, the unacknowledged
	// messages are redelivered.
	q.wait()
	r.drain()
	payments.close()
	canceller.finish(r)
	r.drain()
	stopRelays()
	t.Logf("pgtx events %v; payment retries %d, cancel sweep errors %d, cancelled %d", r.tx, payments.errs.Load(), canceller.errs.Load(), canceller.cancelled.Load())
	r.logErrors()

	// Every order a consumer acknowledged as created exists.
	var created []int64
	r.mu.Lock()
	for _, acks := range r.acks {
		for _, a := range acks {
			if !a.Duplicate && a.Code == flow.CodeOrderCreated {
				created = append(created, a.OrderID)
			}
		}
	}
	r.mu.Unlock()
	if got := r.count(`SELECT count(*) FROM %s.orders WHERE order_id = ANY($1)`, created); got != int64(len(created)) {
		t.Errorf("%d orders acknowledged as created, %d of them exist after the crash", len(created), got)
	}
	// Every payment acknowledged as PAID is still paid.
	var paid []int64
	payments.mu.Lock()
	for id, k := range payments.results {
		if k == order.PaymentPaid {
			paid = append(paid, id)
		}
	}
	payments.mu.Unlock()
	if got := r.count(`SELECT count(*) FROM %s.orders WHERE order_id = ANY($1) AND status = 30`, paid); got != int64(len(paid)) || len(paid) == 0 {
		t.Errorf("%d payments acknowledged, %d orders paid after the crash", len(paid), got)
	}
	// The stranded claim was recovered after its lease and published.
	for _, id := range stranded {
		if r.pub.count(id) == 0 {
			t.Errorf("event %s, claimed before the crash, was never published", id)
		}
	}
	if got := r.pub.recovered.Load(); got < int64(len(stranded)) {
		t.Errorf("relays recovered %d expired leases, want at least the %d stranded", got, len(stranded))
	}
	// The orders in flight at the crash did not commit then; their
	// redeliveries created each once.
	heldMu.Lock()
	for _, id := range held {
		if err, ok := heldErrs[id]; !ok || err == nil {
			t.Errorf("order %d, in flight at the crash: its first transaction returned %v, want an error", id, err)
		}
	}
	heldMu.Unlock()
	if got := r.count(`SELECT count(*) FROM %s.orders WHERE order_id = ANY($1)`, held); got != int64(len(held)) {
		t.Errorf("%d of the %d orders in flight at the crash exist after their redelivery", got, len(held))
	}
	t.Logf("acknowledged and present: %d orders, %d payments; %d leases recovered", len(created), len(paid), r.pub.recovered.Load())

	r.assertExactlyOnce(msgs)
	r.assertAllPublished()
	r.assertAudit()
}
