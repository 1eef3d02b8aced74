package inventory_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// BenchmarkOneBatchAllocation: one fresh reservation and its allocation
// per operation, as one batch (pgtx.RunBatch), from 4×GOMAXPROCS
// goroutines, with QueueAllocateBucketOrAbort's two shapes side by side:
// "default" (the decrement, then the ledger row INSERT … SELECT from the
// bucket) and "citus" (Config.Citus: the ledger row with placeholder
// counters, then the decrement that writes the counters into it), on 1
// bucket (every transaction queues on one row lock) and on 64.
//
//	go test -run '^$' -bench OneBatchAllocation -benchtime 5s -count 3 ./inventory/
func BenchmarkOneBatchAllocation(b *testing.B) {
	for _, buckets := range []int16{1, 64} {
		for _, citus := range []bool{false, true} {
			b.Run(fmt.Sprintf("buckets=%d/shape=%s", buckets, map[bool]string{false: "default", true: "citus"}[citus]), func(b *testing.B) {
				benchOneBatch(b, buckets, citus)
			})
		}
	}
}

func benchOneBatch(b *testing.B, buckets int16, citus bool) {
	ctx := context.Background()
	pool, schema, _ := benchStore(b, buckets)
	store, err := inventory.New(inventory.Config{Schema: schema, Citus: citus})
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			now := time.Now()
			res := inventory.NewReservation{
				Request:    seckill.Request{ReservationID: uuid.Must(uuid.NewV7()), RequestID: uuid.Must(uuid.NewV7()), MessageID: uuid.Must(uuid.NewV7()), ActivityID: 1, SKUID: 1, UserID: i, Bucket: int16(i % int64(buckets)), Quantity: 1, OrderID: i},
				Ordered:    true,
				ReservedAt: now,
				ExpiresAt:  now.Add(time.Hour),
			}
			a := inventory.Allocation{
				Request: seckill.Request{ReservationID: res.ReservationID, ActivityID: 1, SKUID: 1, Bucket: res.Bucket, Quantity: 1, UserID: i, OrderID: i, MessageID: res.MessageID},
			}
			var batch pgx.Batch
			if err := store.QueueAcquireReservation(&batch, res, nil, pgtx.Abort); err != nil {
				b.Error(err)
				return
			}
			if err := store.QueueAllocateBucket(&batch, a, nil, pgtx.Abort); err != nil {
				b.Error(err)
				return
			}
			if err := pgtx.RunBatch(ctx, pool, pgtx.Options{}, &batch); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
