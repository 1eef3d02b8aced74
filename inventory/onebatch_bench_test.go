package inventory_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// The one-batch allocation as it was before its ledger row came first:
// the guarded decrement, then the ledger row INSERT … SELECT from the
// bucket (which Citus cannot route whole). The baseline of
// BenchmarkOneBatchAllocation.
const (
	insertSelectDecrementSQL = `
WITH upd AS (
	UPDATE {schema}.sku_inventory
	   SET available_stock = available_stock - $4::int, allocated_stock = allocated_stock + $4::int,
	       version = version + 1, updated_at = statement_timestamp()
	 WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3 AND available_stock >= $4::int
	   AND NOT EXISTS (SELECT 1 FROM {schema}.inventory_ledger WHERE idempotency_key = $5)
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_reservation AS r
	                WHERE r.reservation_id = $6 AND r.activity_id = $1 AND r.sku_id = $2
	                  AND r.inventory_bucket = $3 AND r.quantity = $4::int AND r.user_id = $7 AND r.status IN (0, 10))
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_sku AS k
	                WHERE k.activity_id = $1 AND k.sku_id = $2 AND k.sale_status = 10
	                  AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                  AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at))
	RETURNING version
)
SELECT coalesce((SELECT version::text FROM upd), 'SECKILL_ALLOCATION_REFUSED')::int8`
	insertSelectLedgerSQL = `
INSERT INTO {schema}.inventory_ledger (
	idempotency_key, reservation_id, order_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket,
	ledger_type, total_delta, available_delta, allocated_delta,
	before_available, after_available, before_allocated, after_allocated, reason)
SELECT $5, $6, $7, $8, $1, $2, $9, $3, 10, 0, -$4::int, $4::int,
       b.available_stock + $4::int, b.available_stock, b.allocated_stock - $4::int, b.allocated_stock, $10
  FROM {schema}.sku_inventory AS b
 WHERE b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3`
)

// BenchmarkOneBatchAllocation: one fresh reservation and its allocation
// per operation, as one batch (pgtx.RunBatch), from 4×GOMAXPROCS
// goroutines, with the library's statements (ledger row first, then the
// decrement that fills in its counters) and with the earlier INSERT …
// SELECT shape as the baseline, side by side, on 1 bucket (every
// transaction queues on one row lock) and on 64.
//
//	go test -run '^$' -bench OneBatchAllocation -benchtime 5s -count 3 ./inventory/
func BenchmarkOneBatchAllocation(b *testing.B) {
	for _, buckets := range []int16{1, 64} {
		for _, shape := range []string{"ledger-first", "insert-select"} {
			b.Run(fmt.Sprintf("buckets=%d/%s", buckets, shape), func(b *testing.B) {
				benchOneBatch(b, buckets, shape == "insert-select")
			})
		}
	}
}

func benchOneBatch(b *testing.B, buckets int16, baseline bool) {
	ctx := context.Background()
	pool, schema, store := benchStore(b, buckets)
	r := strings.NewReplacer("{schema}", pgx.Identifier{schema}.Sanitize())
	decrement, ledger := r.Replace(insertSelectDecrementSQL), r.Replace(insertSelectLedgerSQL)
	var next atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			now := time.Now()
			res := inventory.NewReservation{ReservationID: uuid.Must(uuid.NewV7()), RequestID: uuid.Must(uuid.NewV7()),
				FirstMessageID: uuid.Must(uuid.NewV7()), ActivityID: 1, SKUID: 1, UserID: i, Bucket: int16(i % int64(buckets)),
				Quantity: 1, ReservedAt: now, ExpiresAt: now.Add(time.Hour), OrderID: i}
			a := inventory.Allocation{ReservationID: res.ReservationID, ActivityID: 1, SKUID: 1, Bucket: res.Bucket,
				Quantity: 1, UserID: i, OrderID: i, SourceMessageID: res.FirstMessageID}
			var batch pgx.Batch
			if err := store.QueueInsertReservationOrAbort(&batch, res); err != nil {
				b.Error(err)
				return
			}
			if baseline {
				key := inventory.AllocateKey(a.ReservationID)
				batch.Queue(decrement, a.ActivityID, a.SKUID, a.Bucket, int32(1), key, a.ReservationID, a.UserID)
				batch.Queue(ledger, a.ActivityID, a.SKUID, a.Bucket, int32(1), key, a.ReservationID, a.OrderID,
					a.SourceMessageID, a.UserID, inventory.DefaultAllocateReason)
			} else if err := store.QueueAllocateBucketOrAbort(&batch, a, nil); err != nil {
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
