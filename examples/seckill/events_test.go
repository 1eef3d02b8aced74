package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/proccpu"
	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/roundtrip"
)

// TestEventConsumerWays: the ORDER_CREATED consumer, in both of its ways
// (its result claimed with the event, or claimed and then completed with
// -event-two-step), applies an event once when it arrives three times at
// once, stores the event's row as PROCESSED with BUYER_NOTIFIED, and
// answers the two others as duplicates. The one-step way writes the row
// once: its version is its transaction's first write, where the two-step
// way's visible version is Complete's, the second. (Not the row's ctid:
// duplicates racing the first claim's speculative insertion may leave a
// dead line pointer before it.)
func TestEventConsumerWays(t *testing.T) {
	t.Parallel()
	for _, twoStep := range []bool{false, true} {
		t.Run(fmt.Sprintf("two-step=%v", twoStep), func(t *testing.T) {
			t.Parallel()
			ctx := pgtest.Context(t, time.Minute)
			pool := pgtest.Pool(t)
			cfg := smallConfig(t)
			cfg.EventTwoStep = twoStep
			useStack(t, &cfg, stackMemory, false)
			s, err := newService(ctx, pool, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			var notified atomic.Int64
			s.onOrderCreated = func(id int64) {
				if id == 42 {
					notified.Add(1)
				}
			}
			h := s.eventHandlers()["order-created"]
			ev := broker.Message{ID: uuid.Must(uuid.NewV7()), Body: []byte(`{"order_id":42}`)}
			var wg sync.WaitGroup
			errs := make([]error, 3)
			for i := range errs {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = h(ctx, ev) }()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if got := notified.Load(); got != 1 {
				t.Errorf("buyer notified %d times, want 1", got)
			}
			if got := s.stats.eventDuplicates.Load(); got != 2 {
				t.Errorf("duplicates answered by the inbox: %d, want 2", got)
			}
			rec, err := s.Inbox.Lookup(ctx, pool, inbox.Key{Group: "order-created-consumer", MessageID: ev.ID})
			if err != nil {
				t.Fatal(err)
			}
			if rec.Status != inbox.StatusProcessed || rec.Result.Code != "BUYER_NOTIFIED" {
				t.Errorf("inbox row: %s %q, want PROCESSED BUYER_NOTIFIED", rec.Status, rec.Result.Code)
			}
			// cmin is the command of its transaction that wrote the row's
			// version: the claim's INSERT is the transaction's first write
			// (0); Complete's UPDATE writes a second version (1).
			var rows, cmin int
			if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) OVER (), cmin::text::int FROM %s.consumer_inbox`,
				pgx.Identifier{cfg.Schema}.Sanitize())).Scan(&rows, &cmin); err != nil {
				t.Fatal(err)
			}
			want := map[bool]int{false: 0, true: 1}[twoStep]
			if rows != 1 || cmin != want {
				t.Errorf("inbox: %d row(s), the event's version written by command %d of its transaction; want 1 row, by command %d", rows, cmin, want)
			}
		})
	}
}

// TestEventConsumerKnownResultGuard: a consumer whose apply returns a
// result other than the one its claim stored fails, and its transaction
// stores nothing: the row is not left claiming a result that was not the
// consumer's.
func TestEventConsumerKnownResultGuard(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	cfg := smallConfig(t)
	useStack(t, &cfg, stackMemory, false)
	s, err := newService(ctx, pool, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	h := s.eventHandler("guard-consumer", flow.TagOrderCreated, "KNOWN", func(_ context.Context, _ pgx.Tx, _ []byte) (string, error) {
		return "OTHER", nil
	})
	ev := broker.Message{ID: uuid.Must(uuid.NewV7()), Body: []byte(`{"order_id":7}`)}
	if err := h(ctx, ev); err == nil || !strings.Contains(err.Error(), `"KNOWN"`) {
		t.Fatalf("apply's other result: %v, want an error naming the stored one", err)
	}
	if _, err := s.Inbox.Lookup(ctx, pool, inbox.Key{Group: "guard-consumer", MessageID: ev.ID}); !errors.Is(err, inbox.ErrNotFound) {
		t.Fatalf("inbox row after the failed apply: %v, want ErrNotFound", err)
	}
}

// BenchmarkEventConsumer puts the ORDER_CREATED consumer's ways side by
// side in one run, on one connection (its first events, untimed, prepare
// the statements): the result claimed with the event behind a deferred
// BEGIN, one event per transaction; the claim then Complete
// (-event-two-step); and batches of 16 events per transaction (the
// service's default -event-batch, as under load). It reports the round
// trips, the WAL bytes and the CPU per event of this process (the client)
// and of the connection's backend (read from /proc: reported when the
// server runs on this machine).
//
//	cd examples && go test -run '^$' -bench BenchmarkEventConsumer -benchtime 5000x ./seckill/
func BenchmarkEventConsumer(b *testing.B) {
	for _, way := range []struct {
		name    string
		twoStep bool
		batch   int
	}{{"one-step", false, 1}, {"two-step", true, 1}, {"batch-16", false, 16}} {
		b.Run(way.name, func(b *testing.B) {
			ctx := pgtest.Context(b, 10*time.Minute)
			var rt roundtrip.Counter
			pool := pgtest.NewPool(b, func(c *pgxpool.Config) { c.MaxConns, c.ConnConfig.Tracer = 1, &rt })
			cfg := smallConfig(b)
			cfg.EventTwoStep, cfg.EventBatch = way.twoStep, way.batch
			useStack(b, &cfg, stackMemory, false)
			s, err := newService(ctx, pool, cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.close()
			h, hb := s.eventHandlers()["order-created"], s.eventBatchHandlers()["order-created"]
			// deliver hands events [from, to) to the consumer, in batches
			// of way.batch when it takes batches.
			deliver := func(from, to int) {
				for i := from; i < to; {
					n := 1
					if hb != nil {
						n = min(way.batch, to-i)
					}
					ms := make([]broker.Message, n)
					for k := range ms {
						ms[k] = broker.Message{ID: uuid.Must(uuid.NewV7()), Body: fmt.Appendf(nil, `{"order_id":%d}`, i+k+1)}
					}
					var err error
					if hb != nil {
						err = errors.Join(hb(ctx, ms)...)
					} else {
						err = h(ctx, ms[0])
					}
					if err != nil {
						b.Fatal(err)
					}
					i += n
				}
			}
			deliver(0, 40)
			lsn := func() (l int64) {
				if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&l); err != nil {
					b.Fatal(err)
				}
				return l
			}
			var backend int
			if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
				b.Fatal(err)
			}
			wal0, client0 := lsn(), selfCPU(b)
			server0, serverOK := proccpu.Of(backend)
			rt.Store(0)
			b.ResetTimer()
			deliver(40, 40+b.N)
			b.StopTimer()
			trips, client := rt.Load(), selfCPU(b)-client0
			server, _ := proccpu.Of(backend)
			perEvent := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/event")
			b.ReportMetric(float64(lsn()-wal0)/float64(b.N), "WAL-B/event")
			b.ReportMetric(perEvent(client), "client-µs/event")
			if serverOK {
				b.ReportMetric(perEvent(server-server0), "server-µs/event")
			}
		})
	}
}

// selfCPU is this process's CPU time so far.
func selfCPU(tb testing.TB) time.Duration {
	d, err := proccpu.Self()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}
