package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/outbox"
)

// BenchmarkEnqueue: one event per transaction (BEGIN, Enqueue, COMMIT), the
// shape of an order transaction's outbox write.
func BenchmarkEnqueue(b *testing.B) {
	bb := setup(b, outbox.Config{})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		err := pgx.BeginFunc(bb.ctx, bb.pool, func(tx pgx.Tx) error {
			_, err := bb.store.Enqueue(bb.ctx, tx, event(i))
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnqueueMany: 100 events per statement, one statement per
// transaction.
func BenchmarkEnqueueMany(b *testing.B) {
	for _, ordered := range []bool{false, true} {
		b.Run(fmt.Sprintf("ordered=%v", ordered), func(b *testing.B) {
			bb := setup(b, outbox.Config{})
			const per = 100
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				evs := manyEvents(per, func(j int, e *outbox.Event) {
					e.DedupKey = fmt.Sprintf("%d-%d", i, j)
					if ordered {
						e.OrderingKey = fmt.Sprintf("key-%d", j%10)
					}
				})
				err := pgx.BeginFunc(bb.ctx, bb.pool, func(tx pgx.Tx) error {
					_, err := bb.store.Enqueue(bb.ctx, tx, evs...)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkClaimOutboxBatch: claim 100 events and release them again, over
// a fixed backlog of 10,000.
func BenchmarkClaimOutboxBatch(b *testing.B) {
	bb := setup(b, outbox.Config{})
	bb.enqueue(b, manyEvents(10000, nil)...)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := bb.store.ClaimOutboxBatch(bb.ctx, bb.pool, "bench", 100)
		if err != nil || len(c.Messages) != 100 {
			b.Fatalf("claimed %d, %v", len(c.Messages), err)
		}
		if _, err := bb.store.Mark(bb.ctx, bb.pool, outbox.Outcome{Lease: c.Lease, Released: claimIDs(c)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRelayThroughput: relays publishing to a no-op publisher; reports
// events/s from start until every event is SENT.
func BenchmarkRelayThroughput(b *testing.B) {
	for _, relays := range []int{1, 4} {
		b.Run(fmt.Sprintf("relays=%d", relays), func(b *testing.B) {
			bb := setup(b, outbox.Config{})
			n := max(b.N, 1000)
			bb.enqueue(b, manyEvents(n, nil)...)
			noop := func(context.Context, []outbox.Message) []error { return nil }
			m := newCounters(func(c *counters) bool { return c.published.Load() >= int64(n) })
			b.ResetTimer()
			start := time.Now()
			stop := bb.startRelays(b, relays, outbox.RelayConfig{Publish: noop, Observer: observe(m), BatchSize: 500}, nil)
			m.wait(b, bb.ctx)
			elapsed := time.Since(start)
			b.StopTimer()
			stop()
			b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
		})
	}
}

// BenchmarkRelayDrainBacklog: two relays (batch 200, no-op publisher) drain
// a backlog of pending events, each claim from the relay's cursor (what
// Relay does) or from the head of idx_outbox_ready (the claim before the
// cursor), side by side. The backlog is inserted by one statement, with
// event ids in insertion order as Enqueue's UUIDv7 ids are, and vacuumed
// first; the figure is events/s from start until every event is
// SENT. Run with -benchtime 1x: each iteration drains the whole backlog.
//
//	go test -run XXX -bench RelayDrainBacklog -benchtime 1x ./outbox/
func BenchmarkRelayDrainBacklog(b *testing.B) {
	for _, backlog := range drainBacklogs {
		for _, claim := range []string{"head", "cursor"} {
			b.Run(fmt.Sprintf("backlog=%d/claim=%s", backlog, claim), func(b *testing.B) {
				bb := setup(b, outbox.Config{})
				var rate float64
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					bb.exec(b, `INSERT INTO `+bb.table()+` (event_id, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key, schema_version, payload)
SELECT format('%s-0000-7000-8000-%s', lpad(to_hex($1::int), 8, '0'), lpad(to_hex(g), 12, '0'))::uuid, 'DRAIN:' || $1::text || ':' || g, 'ORDER', g::text, 'ORDER_EVENT', 'ORDER_CREATED', g::text, 1,
       jsonb_build_object('order_id', g, 'user_id', g, 'amount', 9900)
FROM generate_series(1, $2::int) AS g`, i, backlog)
					bb.exec(b, `VACUUM ANALYZE `+bb.table())
					noop := func(context.Context, []outbox.Message) []error { return nil }
					m := newCounters(func(c *counters) bool { return c.published.Load() >= int64(backlog) })
					b.StartTimer()
					start := time.Now()
					stop := bb.startRelays(b, 2, outbox.RelayConfig{Publish: noop, Observer: observe(m), BatchSize: 200,
						PollInterval: 5 * time.Millisecond, DisableListen: true}, func(r *outbox.Relay) {
						if claim == "head" {
							outbox.DisableClaimCursor(r)
						}
					})
					m.wait(b, bb.ctx)
					rate = float64(backlog) / time.Since(start).Seconds()
					b.StopTimer()
					stop()
					if left := bb.count(b, "status <> 20"); left != 0 {
						b.Fatalf("%d events not SENT", left)
					}
				}
				b.ReportMetric(rate, "events/s")
			})
		}
	}
}

// drainBacklogs are BenchmarkRelayDrainBacklog's backlog sizes.
var drainBacklogs = []int{10_000, 200_000, 1_000_000}
