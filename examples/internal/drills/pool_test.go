package drills

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/leakcheck"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// acquireTracer counts the pool's acquisitions, failed and successful.
type acquireTracer struct{ ok, failed atomic.Int64 }

func (a *acquireTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (a *acquireTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (a *acquireTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return ctx
}
func (a *acquireTracer) TraceAcquireEnd(_ context.Context, _ *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	if d.Err != nil {
		a.failed.Add(1)
	} else {
		a.ok.Add(1)
	}
}

// TestFaultPoolExhaustion gives sixteen consumers a pool of two
// connections and each delivery 20ms to acquire one. Acquire timeouts
// surface as errors (context.DeadlineExceeded), the messages are
// nacked and come back after a growing backoff, everything is processed
// exactly once, no connection stays checked out, and no goroutine of the
// library outlives the drill.
//
// It does not run in parallel: the leak check looks at every goroutine of
// the process, and the parallel drills wait while it runs.
func TestFaultPoolExhaustion(t *testing.T) {
	const acquireTimeout = 20 * time.Millisecond
	tr := &acquireTracer{}
	pool := pgtest.NewPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 2
		c.ConnConfig.Tracer = tr
	})
	r := newRig(t, rigConfig{Pool: pool, Stock: 250, Buckets: 4})
	msgs := r.messages(plan{Users: 250, DoubleClick: 10})
	stopRelays := r.startRelays(pgtest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 4 }), 2, outbox.RelayConfig{})
	opts := pgtx.Options{Name: "place_order", LockTimeout: 2 * time.Second, Observer: r.tx.observer()}
	q := r.consume(msgs, deliverConfig{Workers: 16, Handle: func(ctx context.Context, m *msg) (flow.Outcome, error) {
		// The consumer waits at most acquireTimeout for a connection; the
		// transaction itself runs on the delivery's ctx.
		actx, cancel := context.WithTimeout(ctx, acquireTimeout)
		conn, err := pool.Acquire(actx)
		cancel()
		if err != nil {
			return flow.Outcome{}, fmt.Errorf("acquire a connection: %w", err)
		}
		defer conn.Release()
		return r.placeOn(ctx, conn, opts, m, nil)
	}})
	q.wait()
	r.drain()
	stopRelays()

	r.logErrors()
	t.Logf("acquisitions %d ok, %d timed out; %d redeliveries, at most %d deliveries of one message; pgtx events %v",
		tr.ok.Load(), tr.failed.Load(), q.redeliv.Load(), q.maxAtt.Load(), r.tx)
	if tr.failed.Load() == 0 {
		t.Errorf("no acquire timed out: the pool was not exhausted")
	}
	if got := r.errCount("deadline"); got < tr.failed.Load() {
		t.Errorf("%d acquire timeouts, but only %d deliveries failed with context.DeadlineExceeded", tr.failed.Load(), got)
	}
	if q.maxAtt.Load() < 2 {
		t.Errorf("no message was redelivered")
	}
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d connections still checked out", n)
	}
	r.assertExactlyOnce(msgs)
	r.assertAllPublished()
	r.assertAudit()
	if err := leakcheck.Wait("", 10*time.Second); err != nil {
		t.Error(err)
	}
}
