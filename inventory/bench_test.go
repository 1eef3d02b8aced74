package inventory_test

import (
	"context"
	"errors"
	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/inventory"
)

// benchAllocate measures one transaction per operation: BEGIN,
// AllocateBucket, COMMIT, from 4×GOMAXPROCS goroutines competing for
// buckets buckets (buckets=1: every transaction queues on one row lock).
// Stock is large enough never to run out.
func benchAllocate(b *testing.B, buckets int16) {
	ctx := context.Background()
	pool, schema, store := benchStore(b, buckets)
	rs := benchReservations(b, pool, schema, b.N, buckets)
	var next atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			a := rs[next.Add(1)-1]
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

// benchStore migrates a new schema and provisions SKU 1 of activity 1 in
// buckets buckets with stock that never runs out.
func benchStore(b *testing.B, buckets int16) (*pgxpool.Pool, string, *inventory.Store) {
	b.Helper()
	pool := pgtest.Pool(b)
	schema := pgtest.Schema(b)
	ctx := context.Background()
	if _, err := migrate.Apply(ctx, pool, schema, inventory.Migrations); err != nil {
		b.Fatal(err)
	}
	store, err := inventory.New(inventory.Config{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := store.Provision(ctx, pool, inventory.SKU{ActivityID: 1, SKUID: 1, Stock: 1 << 30, Buckets: buckets}); err != nil {
		b.Fatal(err)
	}
	return pool, schema, store
}

func BenchmarkAllocateBucket(b *testing.B) {
	b.Run("buckets=1", func(b *testing.B) { benchAllocate(b, 1) })
	b.Run("buckets=64", func(b *testing.B) { benchAllocate(b, 64) })
}

// BenchmarkRelease measures BEGIN, Release, COMMIT of allocations made
// before the timer starts.
func BenchmarkRelease(b *testing.B) {
	ctx := context.Background()
	pool, schema, store := benchStore(b, 64)
	rs := benchReservations(b, pool, schema, b.N, 64)
	ids := make([]uuid.UUID, b.N)
	for i := range ids {
		ids[i] = rs[i].ReservationID
	}
	// Allocate in pipelined batches of 500 to keep the setup short.
	for start := 0; start < len(ids); start += 500 {
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			var batch pgx.Batch
			for _, a := range rs[start:min(start+500, len(ids))] {
				if err := store.QueueAllocateBucket(&batch, a, new(inventory.Allocated), pgtx.Return); err != nil {
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
				_, err := store.ReleaseStock(ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: id}})
				return err
			})
			if err != nil && !errors.Is(err, inventory.ErrAlreadyApplied) {
				b.Error(err)
				return
			}
		}
	})
}

// benchReservations records n reservations of one unit for distinct buyers
// (bucket from PickBucket) with one COPY and returns their allocations.
func benchReservations(b *testing.B, pool *pgxpool.Pool, schema string, n int, buckets int16) []inventory.Allocation {
	b.Helper()
	now := time.Now()
	out := make([]inventory.Allocation, n)
	rows := make([][]any, n)
	for i := range out {
		id := uuid.Must(uuid.NewV7())
		bucket, _ := inventory.PickBucket(id.String(), int(buckets))
		out[i] = inventory.Allocation{
			Request: seckill.Request{ReservationID: id, ActivityID: 1, SKUID: 1, Bucket: bucket, Quantity: 1, UserID: int64(i + 1), MessageID: id},
		}
		rows[i] = []any{id, id, id, int64(1), int64(1), int64(i + 1), bucket, int16(1), now, now.Add(time.Hour)}
	}
	_, err := pool.CopyFrom(context.Background(), pgx.Identifier{schema, "inventory_reservation"},
		[]string{"reservation_id", "request_id", "first_message_id", "activity_id", "sku_id", "user_id",
			"inventory_bucket", "quantity", "redis_reserved_at", "expires_at"}, pgx.CopyFromRows(rows))
	if err != nil {
		b.Fatal(err)
	}
	return out
}
