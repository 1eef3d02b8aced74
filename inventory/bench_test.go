package inventory_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/inventory"
)

// benchAllocate measures one transaction per operation: BEGIN,
// AllocateBucket, COMMIT, from 4×GOMAXPROCS goroutines competing for
// buckets buckets (buckets=1: every transaction queues on one row lock).
// Stock is large enough never to run out.
func benchAllocate(b *testing.B, buckets int16) {
	pool := pgtest.Pool(b)
	schema := pgtest.Schema(b)
	ctx := context.Background()
	if err := inventory.Migrate(ctx, pool, schema); err != nil {
		b.Fatal(err)
	}
	store, err := inventory.New(inventory.Config{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := store.Provision(ctx, pool, inventory.SKU{ActivityID: 1, SKUID: 1, Stock: 1 << 30, Buckets: buckets}); err != nil {
		b.Fatal(err)
	}
	var user atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := uuid.Must(uuid.NewV7())
			bucket, _ := inventory.PickBucket(id.String(), int(buckets))
			a := inventory.Allocation{ReservationID: id, ActivityID: 1, SKUID: 1, Bucket: bucket, Quantity: 1,
				UserID: user.Add(1), SourceMessageID: id}
			err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
				_, err := store.AllocateBucket(ctx, tx, a)
				return err
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkAllocateBucket(b *testing.B) {
	b.Run("buckets=1", func(b *testing.B) { benchAllocate(b, 1) })
	b.Run("buckets=64", func(b *testing.B) { benchAllocate(b, 64) })
}

// BenchmarkRelease measures BEGIN, Release, COMMIT of allocations made
// before the timer starts.
func BenchmarkRelease(b *testing.B) {
	pool := pgtest.Pool(b)
	schema := pgtest.Schema(b)
	ctx := context.Background()
	if err := inventory.Migrate(ctx, pool, schema); err != nil {
		b.Fatal(err)
	}
	store, _ := inventory.New(inventory.Config{Schema: schema})
	if _, err := store.Provision(ctx, pool, inventory.SKU{ActivityID: 1, SKUID: 1, Stock: 1 << 30, Buckets: 64}); err != nil {
		b.Fatal(err)
	}
	ids := make([]uuid.UUID, b.N)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	// Allocate in pipelined batches of 500 to keep the setup short.
	for start := 0; start < len(ids); start += 500 {
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			var batch pgx.Batch
			for _, id := range ids[start:min(start+500, len(ids))] {
				bucket, _ := inventory.PickBucket(id.String(), 64)
				a := inventory.Allocation{ReservationID: id, ActivityID: 1, SKUID: 1, Bucket: bucket, Quantity: 1, UserID: 1, SourceMessageID: id}
				if err := store.QueueAllocateBucket(&batch, a, new(inventory.Allocated)); err != nil {
					return err
				}
			}
			return tx.SendBatch(ctx, &batch).Close()
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := ids[next.Add(1)-1]
			err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
				_, err := store.Release(ctx, tx, inventory.Release{ReservationID: id})
				return err
			})
			if err != nil && !errors.Is(err, inventory.ErrAlreadyApplied) {
				b.Error(err)
				return
			}
		}
	})
}
