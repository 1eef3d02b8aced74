package outbox_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/outbox"
)

// ownPool returns a pool of its own whose sessions carry a unique
// application_name, so that a test can find (and cut) them.
func (b *bundle) ownPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	app := fmt.Sprintf("outbox-test-%d", time.Now().UnixNano())
	cfg := b.pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	p, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, app
}

// tableUpdates reads n_tup_upd of the outbox table once it stops growing
// (other backends' statistics arrive when they exit or go idle), after
// the sessions that updated it closed.
func (b *bundle) tableUpdates(t *testing.T, atLeast int64) int64 {
	t.Helper()
	var n int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Each query is its own transaction: a fresh statistics snapshot.
		if err := b.pool.QueryRow(b.ctx, `SELECT coalesce(n_tup_upd, 0) FROM pg_stat_user_tables
			WHERE schemaname = $1 AND relname = 'event_outbox'`, b.schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n >= atLeast || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if err := b.pool.QueryRow(b.ctx, `SELECT coalesce(n_tup_upd, 0) FROM pg_stat_user_tables
		WHERE schemaname = $1 AND relname = 'event_outbox'`, b.schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// InTx mode writes each event once (PENDING → SENT); lease mode twice
// (PENDING → SENDING → SENT). Counted in the server's own statistics of
// the table, for the same events drained both ways.
func TestRelayInTxWritesEachEventOnce(t *testing.T) {
	t.Parallel()
	const n = 600
	for _, inTx := range []bool{false, true} {
		b := setup(t, outbox.Config{})
		b.enqueue(t, manyEvents(n, nil)...)
		pool, _ := b.ownPool(t)
		m := newCounters(func(c *counters) bool { return c.published.Load() >= n })
		ctx, cancel := context.WithCancel(b.ctx)
		r, err := outbox.NewRelay(pool, outbox.RelayConfig{Store: b.store, Publish: newRecorder().Publish, Observer: observe(m),
			BatchSize: 50, DisableListen: true, InTx: inTx})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		m.wait(t, b.ctx)
		cancel()
		if err := testwait.Recv(t, done, "the blocked call to return"); err != nil {
			t.Fatal(err)
		}
		pool.Close() // its sessions exit and report their statistics
		want := int64(2 * n)
		if inTx {
			want = n
		}
		if got := b.tableUpdates(t, want); got != want {
			t.Errorf("InTx %v: %d row updates for %d events, want %d", inTx, got, n, want)
		}
		if s := b.count(t, "status = 20"); s != n {
			t.Errorf("InTx %v: %d SENT, want %d", inTx, s, n)
		}
	}
}

// A relay whose connection is cut while it publishes (the transaction that
// holds the batch dies with it): nothing was marked, nothing is SENDING,
// and the events are published again at once, not after the lease (an
// hour here).
func TestRelayInTxCutConnectionRepublishesAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	const n = 30
	enq := b.enqueue(t, manyEvents(n, nil)...)
	pool, app := b.ownPool(t)
	rec := newRecorder()
	var cut atomic.Bool
	var sawCut atomic.Int32
	rec.after = func(ctx context.Context, msgs []outbox.Message, errs []error) {
		if !cut.CompareAndSwap(false, true) {
			return
		}
		// Kill the session that holds this batch locked.
		var killed int
		if err := b.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'idle in transaction'`, app).Scan(&killed); err != nil || killed != 1 {
			t.Errorf("terminated %d sessions (%v), want 1", killed, err)
		}
		// Still locked? The killed session's locks are gone once it has
		// exited: a locking read that skips locked rows sees every event.
		deadline := time.Now().Add(testwait.Step)
		for {
			if time.Now().After(deadline) {
				t.Errorf("the killed session still holds the events after %v", testwait.Step)
				return
			}
			var free int
			err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+b.table()+` WHERE status = 0
					FOR UPDATE SKIP LOCKED) AS x`).Scan(&free)
			})
			if err != nil {
				t.Error(err)
				return
			}
			if free == n {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if s, pending := b.count(t, "status <> 0"), b.count(t, "status = 0 AND retry_count = 0"); s != 0 || pending != n {
			t.Errorf("after the cut: %d events not PENDING, %d PENDING unattempted; want 0, %d", s, pending, n)
		}
	}
	obs := &cutObserver{counters: newCounters(func(c *counters) bool { return c.published.Load() >= n })}
	obs.onEnd = func(e outbox.RelayEvent) {
		if e.Err != nil {
			sawCut.Add(1)
			if e.Published != 0 || e.Failed != 0 {
				t.Errorf("failed batch reports %d published, %d failed", e.Published, e.Failed)
			}
		}
	}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	r, err := outbox.NewRelay(pool, outbox.RelayConfig{Store: b.store, Publish: rec.Publish, Observer: observe(obs), BatchSize: n,
		DisableListen: true, InTx: true, Lease: time.Hour, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	obs.wait(t, b.ctx)
	cancel()
	if err := testwait.Recv(t, done, "the blocked call to return"); err != nil {
		t.Fatal(err)
	}
	if sawCut.Load() != 1 {
		t.Fatalf("%d batches ended in an error, want the cut one", sawCut.Load())
	}
	for _, e := range enq {
		if rec.attempts[e.EventID] != 2 || rec.ok[e.EventID] != 2 {
			t.Fatalf("event %s published %d times, want 2 (before and after the cut)", e.EventID, rec.attempts[e.EventID])
		}
	}
	if s, other := b.count(t, "status = 20 AND retry_count = 0"), b.count(t, "status <> 20"); s != n || other != 0 {
		t.Fatalf("%d SENT, %d not SENT; want %d, 0", s, other, n)
	}
}

// cutObserver adds a BatchEnd callback to counters.
type cutObserver struct {
	*counters
	onEnd func(outbox.RelayEvent)
}

func (c *cutObserver) BatchEnd(ctx context.Context, e outbox.RelayEvent) {
	c.onEnd(e)
	c.counters.BatchEnd(ctx, e)
}

// A relay in lease mode and one in InTx mode share an outbox: every event
// published exactly once (no failures injected), all SENT.
func TestRelayModesShareAnOutbox(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	const n = 4000
	enq := b.enqueue(t, manyEvents(n, nil)...)
	rec := newRecorder()
	m := newCounters(func(c *counters) bool { return c.published.Load() >= n })
	stopLease := b.startRelays(t, 2, outbox.RelayConfig{Publish: rec.Publish, Observer: observe(m), BatchSize: 50}, nil)
	stopTx := b.startRelays(t, 2, outbox.RelayConfig{Publish: rec.Publish, Observer: observe(m), BatchSize: 50, InTx: true}, nil)
	m.wait(t, b.ctx)
	stopLease()
	stopTx()
	if got := m.published.Load(); got != n {
		t.Fatalf("marked SENT %d times, want %d", got, n)
	}
	for _, e := range enq {
		if rec.attempts[e.EventID] != 1 {
			t.Fatalf("event %s attempted %d times", e.EventID, rec.attempts[e.EventID])
		}
	}
	if st := b.stats(t); st.Sent != n {
		t.Fatalf("stats = %+v", st)
	}
}
