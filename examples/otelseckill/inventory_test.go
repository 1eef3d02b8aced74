package otelseckill_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/otelseckill"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

// TestInventoryAllocations: five buyers for three units; the allocation
// counter by result matches the stock the SKU's totals say was
// allocated, and each allocation is an event on the buyer's span.
func TestInventoryAllocations(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := seckilltest.New(t, inventory.Migrations)
	b := setup(t)
	store, err := inventory.New(inventory.Config{Schema: db.Schema, Observer: b.obs.Inventory})
	if err != nil {
		t.Fatal(err)
	}
	const stock, buyers = 3, 5
	if _, err := store.Provision(ctx, db.Pool, inventory.SKU{ActivityID: 1, SKUID: 42, Stock: stock, Buckets: 1}); err != nil {
		t.Fatal(err)
	}
	tracer := b.tp.Tracer("test")
	for user := int64(1); user <= buyers; user++ {
		sctx, span := tracer.Start(ctx, "buy")
		now := time.Now()
		r := inventory.NewReservation{
			ReservationID: uuid.Must(uuid.NewV7()), RequestID: uuid.Must(uuid.NewV7()), FirstMessageID: uuid.Must(uuid.NewV7()),
			ActivityID: 1, SKUID: 42, UserID: user, Bucket: 0, Quantity: 1, ReservedAt: now, ExpiresAt: now.Add(time.Hour),
		}
		err := pgtx.RunInTx(sctx, db.Pool, pgtx.Options{Name: "buy", Observer: b.obs.Tx}, func(tx pgx.Tx) error {
			acq, err := store.AcquireReservation(sctx, tx, r)
			if err != nil {
				return err
			}
			_, err = store.AllocateBucket(sctx, tx, acq.Reservation.Allocation(user, uuid.Nil))
			if errors.Is(err, inventory.ErrSoldOut) {
				return nil
			}
			return err
		})
		span.End()
		if err != nil {
			t.Fatal(err)
		}
	}
	tot, err := store.SKUTotals(ctx, db.Pool, 1, 42)
	if err != nil {
		t.Fatal(err)
	}
	if tot.Allocated != stock {
		t.Fatalf("allocated %d, want %d", tot.Allocated, stock)
	}
	rm := collect(t, b.reader)
	allocs := find(t, rm, otelseckill.MetricAllocations)
	bucket0 := otelseckill.AttrInventoryBucket.Int(0)
	if got := sum(t, allocs, otelseckill.AttrInventoryResult.String("allocated"), bucket0); got != float64(tot.Allocated) {
		t.Errorf("allocated %v, the SKU's totals say %d", got, tot.Allocated)
	}
	if got := sum(t, allocs, otelseckill.AttrInventoryResult.String("sold_out"), bucket0); got != buyers-float64(tot.Allocated) {
		t.Errorf("sold out %v, want %d", got, buyers-int(tot.Allocated))
	}
	results := map[string]int{}
	for _, s := range b.ended("buy") {
		for _, e := range s.Events() {
			if e.Name != "inventory.allocate" {
				continue
			}
			for _, kv := range e.Attributes {
				if kv.Key == otelseckill.AttrInventoryResult {
					results[kv.Value.AsString()]++
				}
			}
		}
	}
	if results["allocated"] != int(tot.Allocated) || results["sold_out"] != buyers-int(tot.Allocated) {
		t.Errorf("span events by result %v, want %d allocated, %d sold out", results, tot.Allocated, buyers-int(tot.Allocated))
	}
}
