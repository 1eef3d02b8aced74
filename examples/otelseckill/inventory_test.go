package otelseckill_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
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
	var allocated, soldOut []uuid.UUID
	for user := int64(1); user <= buyers; user++ {
		sctx, span := tracer.Start(ctx, "buy")
		now := time.Now()
		r := inventory.NewReservation{
			Request:    seckill.Request{ReservationID: uuid.Must(uuid.NewV7()), RequestID: uuid.Must(uuid.NewV7()), MessageID: uuid.Must(uuid.NewV7()), ActivityID: 1, SKUID: 42, UserID: user, Bucket: 0, Quantity: 1},
			ReservedAt: now,
			ExpiresAt:  now.Add(time.Hour),
		}
		err := pgtx.RunInTx(sctx, db.Pool, pgtx.Options{Name: "buy", Observer: b.obs.Tx}, func(tx pgx.Tx) error {
			if _, err := store.AcquireReservation(sctx, tx, r); err != nil {
				return err
			}
			a := inventory.Allocation{Request: r.Request}
			a.OrderID = user
			_, err := store.AllocateBucket(sctx, tx, a)
			switch {
			case errors.Is(err, inventory.ErrSoldOut):
				soldOut = append(soldOut, r.ReservationID)
				return nil
			case err == nil:
				allocated = append(allocated, r.ReservationID)
			}
			return err
		})
		span.End()
		if err != nil {
			t.Fatal(err)
		}
	}
	tot, err := store.Stock(ctx, db.Pool, 1, 42)
	if err != nil {
		t.Fatal(err)
	}
	if tot.Allocated != stock || len(allocated) != stock || len(soldOut) != buyers-stock {
		t.Fatalf("allocated %d (%d buyers served, %d sold out), want %d", tot.Allocated, len(allocated), len(soldOut), stock)
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

// TestInventoryReleases: a release of an allocation, the same release
// again and a release of a reservation that got nothing are counted by
// result; the released count is what the SKU's totals gave back.
func TestInventoryReleases(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := seckilltest.New(t, inventory.Migrations)
	b := setup(t)
	store, err := inventory.New(inventory.Config{Schema: db.Schema, Observer: b.obs.Inventory})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Provision(ctx, db.Pool, inventory.SKU{ActivityID: 1, SKUID: 7, Stock: 1, Buckets: 1}); err != nil {
		t.Fatal(err)
	}
	reserve := func(user int64) uuid.UUID {
		now := time.Now()
		r := inventory.NewReservation{
			Request:    seckill.Request{ReservationID: uuid.Must(uuid.NewV7()), RequestID: uuid.Must(uuid.NewV7()), MessageID: uuid.Must(uuid.NewV7()), ActivityID: 1, SKUID: 7, UserID: user, Bucket: 0, Quantity: 1},
			ReservedAt: now,
			ExpiresAt:  now.Add(time.Hour),
		}
		if err := pgtx.RunInTx(ctx, db.Pool, pgtx.Options{}, func(tx pgx.Tx) error {
			if _, err := store.AcquireReservation(ctx, tx, r); err != nil {
				return err
			}
			a := inventory.Allocation{Request: r.Request}
			a.OrderID = user
			_, err := store.AllocateBucket(ctx, tx, a)
			if errors.Is(err, inventory.ErrSoldOut) {
				return nil
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return r.ReservationID
	}
	got, none := reserve(1), reserve(2)
	release := func(id uuid.UUID) error {
		return pgtx.RunInTx(ctx, db.Pool, pgtx.Options{}, func(tx pgx.Tx) error {
			_, err := store.ReleaseStock(ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: id}})
			return err
		})
	}
	before, err := store.Stock(ctx, db.Pool, 1, 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := release(got); err != nil {
		t.Fatal(err)
	}
	if err := release(got); !errors.Is(err, inventory.ErrAlreadyApplied) {
		t.Fatalf("second release: %v, want ErrAlreadyApplied", err)
	}
	if err := release(none); !errors.Is(err, inventory.ErrNotAllocated) {
		t.Fatalf("release without allocation: %v, want ErrNotAllocated", err)
	}
	after, err := store.Stock(ctx, db.Pool, 1, 7)
	if err != nil {
		t.Fatal(err)
	}
	rel := find(t, collect(t, b.reader), otelseckill.MetricReleases)
	result := func(r string) float64 { return sum(t, rel, otelseckill.AttrInventoryResult.String(r)) }
	if result("released") != float64(before.Allocated-after.Allocated) || before.Allocated != 1 || after.Allocated != 0 {
		t.Errorf("released %v; the SKU's totals went from %d to %d allocated", result("released"), before.Allocated, after.Allocated)
	}
	if result("already_applied") != 1 || result("not_allocated") != 1 {
		t.Errorf("already_applied %v, not_allocated %v; want 1, 1", result("already_applied"), result("not_allocated"))
	}
}
