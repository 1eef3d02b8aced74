package inventory_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// TestQueueAllocateOrAbortRefusalsEveryStock: on a SKU of buckets and on
// one of inventory tokens, the one-batch allocation (QueueAllocateBucket
// with pgtx.Abort: the statements decrement_then_raise, and
// decrement_abort with Config.Citus) refuses, aborting the batch with the
// typed error and taking no stock,
// an allocation that differs from its reservation in buyer, quantity, SKU
// or bucket, a reservation that is not there or no longer pending or
// ordered, a sale paused, not yet open or closed, and more units than the
// free stock. An allocation that goes through takes exactly its units of
// its own SKU (on tokens, the reservation holds that many): another SKU of
// the activity keeps all of its own.
func TestQueueAllocateOrAbortRefusalsEveryStock(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		dec, _ := tb.allocationOrder()
		tb.provision(t, 2, 20, 10, 1)
		tb.provision(t, 2, 21, 3, 1)
		// The same SKU id in another activity; with buckets, one more than
		// SKU 20 of activity 2 has.
		otherBuckets := int16(2)
		if tb.tokens {
			otherBuckets = 1
		}
		tb.provision(t, 3, 20, 6, otherBuckets)
		taken := func(activity, sku int64) int64 {
			t.Helper()
			tot, err := tb.store.Stock(tb.ctx, tb.pool, activity, sku)
			if err != nil {
				t.Fatal(err)
			}
			if tb.tokens {
				if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_token")+` WHERE activity_id = $1 AND sku_id = $2 AND reservation_id IS NOT NULL`, activity, sku); n != int64(tot.Allocated) {
					t.Fatalf("SKU %d/%d: %d tokens claimed, %d allocated", activity, sku, n, tot.Allocated)
				}
			}
			return int64(tot.Allocated)
		}
		claimed := func(sku int64) int64 {
			t.Helper()
			if n := taken(3, 20); n != 0 {
				t.Fatalf("SKU 20 of activity 3: %d units taken, want none", n)
			}
			return taken(2, sku)
		}
		refused := func(name string, r inventory.NewReservation, a inventory.Allocation, sentinel error, code string) {
			t.Helper()
			n0, m0 := claimed(20), claimed(21)
			err := tb.buyOrAbort(t, r, tb.ids.Add(1), a, nil)
			abortedAt(t, name, err, 1+dec) // the decrement, after the reservation
			abortedBy(t, name, err, "QueueAllocateBucket", sentinel, code)
			if n, m := claimed(20), claimed(21); n != n0 || m != m0 {
				t.Fatalf("%s: %d and %d units taken, want %d and %d as before", name, n, m, n0, m0)
			}
		}
		r := tb.newReservation(2, 20, 0)
		a := allocationOf(r, 1)
		a.UserID++
		refused("another buyer", r, a, inventory.ErrAllocationMismatch, "SK005")
		r = tb.newReservation(2, 20, 0)
		a = allocationOf(r, 1)
		a.Quantity = 2
		refused("another quantity", r, a, inventory.ErrAllocationMismatch, "SK005")
		r = tb.newReservation(2, 21, 0)
		a = allocationOf(r, 1)
		a.SKUID = 20
		refused("the reservation of another SKU", r, a, inventory.ErrAllocationMismatch, "SK005")
		r = tb.newReservation(3, 20, 0)
		a = allocationOf(r, 1)
		a.ActivityID = 2
		refused("the reservation of another activity", r, a, inventory.ErrAllocationMismatch, "SK005")
		r = tb.newReservation(2, 20, 1) // a reservation of bucket 1 allocated as bucket 0
		a = allocationOf(r, 1)
		a.Bucket = 0
		refused("another bucket than the reservation's", r, a, inventory.ErrAllocationMismatch, "SK005")
		r = tb.newReservation(2, 20, 1) // the SKU has bucket 0 only
		refused("a bucket other than 0", r, allocationOf(r, 1), inventory.ErrUnknownBucket, "SK003")

		// A reservation rejected before its allocation, while its buyer
		// holds another, pending one of the same SKU: only the allocation
		// is sent.
		rejected, pending := tb.newReservation(2, 20, 0), tb.newReservation(2, 20, 0)
		pending.UserID = rejected.UserID
		// The pending one's lane starts at token 0, so on tokens only the
		// claim from the lane's start can take its unit.
		for lane := int64(-1); lane != 0; {
			pending.ReservationID = uuid.Must(uuid.NewV7())
			lane = tb.count(t, `SELECT (abs(hashtext($1::text)::int8) % 64) * 10 / 64`, pending.ReservationID)
		}
		tb.insertReservations(t, []inventory.NewReservation{rejected, pending})
		if _, err := tb.store.TransitionReservation(tb.ctx, tb.pool, inventory.Transition{
			ReservationID: rejected.ReservationID, To: inventory.StatusRejected, FailureCode: "TEST"}); err != nil {
			t.Fatal(err)
		}
		var b pgx.Batch
		if err := tb.store.QueueAllocateBucket(&b, allocationOf(rejected, 1), nil, pgtx.Abort); err != nil {
			t.Fatal(err)
		}
		err := pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{}, &b)
		abortedBy(t, "a rejected reservation", err, "QueueAllocateBucket", inventory.ErrAllocationMismatch, "SK005")
		if n := claimed(20); n != 0 {
			t.Fatalf("a rejected reservation: %d units taken", n)
		}

		// The buyer's pending reservation (acquired, not yet ordered) is
		// allocated.
		b = pgx.Batch{}
		if err := tb.store.QueueAllocateBucket(&b, allocationOf(pending, 1), nil, pgtx.Abort); err != nil {
			t.Fatal(err)
		}
		if err := pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{}, &b); err != nil {
			t.Fatalf("the pending reservation: %v", err)
		}
		if n := claimed(20); n != 1 {
			t.Fatalf("the pending reservation: %d units taken, want 1", n)
		}

		// More units than free stock: SKU 21 has 3.
		r = tb.newReservation(2, 21, 0)
		r.Quantity = 4
		refused("4 units of 3 tokens", r, allocationOf(r, 1), inventory.ErrSoldOut, "SK001")

		// Then three lots of two: each takes its own
		// units, none of SKU 21, none of the other activity's SKU 20.
		for i := range 3 {
			r = tb.newReservation(2, 20, 0)
			r.Quantity = 2
			if err := tb.buyOrAbort(t, r, tb.ids.Add(1), allocationOf(r, 1), nil); err != nil {
				t.Fatalf("lot %d: %v", i, err)
			}
			if n, m := claimed(20), claimed(21); n != int64(1+2*(i+1)) || m != 0 {
				t.Fatalf("after lot %d: %d and %d units taken, want %d and 0", i, n, m, 1+2*(i+1))
			}
		}
		// A window that opened an hour ago and closes in an hour sells.
		err = pgx.BeginFunc(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.SetSaleStatus(tb.ctx, tx, inventory.SaleChange{ActivityID: 2, SKUID: 20, To: inventory.SaleOnSale,
				StartsAt: time.Now().Add(-time.Hour), EndsAt: time.Now().Add(time.Hour), Operator: "test", Reason: "window"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}

		// Two more units go through in it; one is left.
		r = tb.newReservation(2, 20, 0)
		r.Quantity = 2
		if err := tb.buyOrAbort(t, r, tb.ids.Add(1), allocationOf(r, 1), nil); err != nil {
			t.Fatal(err)
		}
		if n, m := claimed(20), claimed(21); n != 9 || m != 0 {
			t.Fatalf("after 2 more units of SKU 20: %d and %d units taken, want 9 and 0", n, m)
		}
		if tb.tokens {
			if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_token")+` WHERE reservation_id = $1`, r.ReservationID); n != 2 {
				t.Fatalf("the reservation holds %d tokens, want 2", n)
			}
		}

		// The sale paused, then open but its window not yet open, then
		// closed: refused each time, nothing more taken.
		window := func(to inventory.SaleStatus, from, until time.Time) {
			t.Helper()
			err := pgx.BeginFunc(tb.ctx, tb.pool, func(tx pgx.Tx) error {
				_, err := tb.store.SetSaleStatus(tb.ctx, tx, inventory.SaleChange{ActivityID: 2, SKUID: 20, To: to, StartsAt: from, EndsAt: until, Operator: "test", Reason: "window"})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			name        string
			to          inventory.SaleStatus
			from, until time.Time
		}{
			{"sale paused", inventory.SalePaused, time.Time{}, time.Time{}},
			{"before the window", inventory.SaleOnSale, time.Now().Add(time.Hour), time.Time{}},
			{"after the window", inventory.SaleOnSale, time.Time{}, time.Now().Add(-time.Hour)},
		} {
			window(c.to, c.from, c.until)
			r = tb.newReservation(2, 20, 0)
			err := tb.buyOrAbort(t, r, tb.ids.Add(1), allocationOf(r, 1), nil)
			abortedAt(t, c.name, err, 1+dec)
			abortedBy(t, c.name, err, "QueueAllocateBucket", inventory.ErrNotOnSale, "SK002")
			if n := claimed(20); n != 9 {
				t.Fatalf("%s: %d units taken, want the 9 of before", c.name, n)
			}
		}
	})
}
