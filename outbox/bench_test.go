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
					_, err := bb.store.EnqueueMany(bb.ctx, tx, evs)
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
		if _, err := bb.store.Release(bb.ctx, bb.pool, c.Lease, c.IDs()); err != nil {
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
			noop := outbox.PublisherFunc(func(context.Context, []outbox.Message) []error { return nil })
			m := newCounters(func(c *counters) bool { return c.published.Load() >= int64(n) })
			b.ResetTimer()
			start := time.Now()
			stop := bb.startRelays(b, relays, outbox.RelayConfig{Publisher: noop, Metrics: m, BatchSize: 500}, nil)
			m.wait(b, bb.ctx)
			elapsed := time.Since(start)
			b.StopTimer()
			stop()
			b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
		})
	}
}
