package inventory_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// An allocation must match its reservation: another bucket, quantity,
// buyer, SKU or activity, a reservation that does not exist, or one that
// can no longer take stock is refused with a typed error, nothing is
// written, and the transaction stays usable (direct and batch forms).
func TestAllocationBoundToReservation(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 1, 1, 10, 2)
		tb.provision(t, 1, 2, 10, 2)
		tb.provision(t, 2, 1, 10, 2)
		r := tb.reserved(t, 1, 1, 0, 1)
		good := r2ToAlloc(r)

		cases := map[string]func(a *inventory.Allocation){
			"inventory_bucket": func(a *inventory.Allocation) { a.Bucket = 1 },
			"quantity":         func(a *inventory.Allocation) { a.Quantity = 2 },
			"user_id":          func(a *inventory.Allocation) { a.UserID++ },
			"sku_id":           func(a *inventory.Allocation) { a.SKUID = 2 },
			"activity_id":      func(a *inventory.Allocation) { a.ActivityID = 2 },
		}
		check := func(name string, a inventory.Allocation, want func(error) bool) {
			t.Helper()
			for _, batch := range []bool{false, true} {
				err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
					var err error
					if batch {
						var b pgx.Batch
						if err := tb.store.QueueAllocateBucket(&b, a, new(inventory.Allocated), pgtx.Return); err != nil {
							return err
						}
						err = tx.SendBatch(tb.ctx, &b).Close()
					} else {
						_, err = tb.store.AllocateBucket(tb.ctx, tx, a)
					}
					if !want(err) {
						t.Errorf("%s (batch %v): %v", name, batch, err)
					}
					// The transaction is usable.
					_, err = tx.Exec(tb.ctx, "SELECT 1")
					return err
				})
				if err != nil {
					t.Fatalf("%s (batch %v): %v", name, batch, err)
				}
			}
		}
		for field, change := range cases {
			a := good
			change(&a)
			check(field, a, func(err error) bool {
				var me *inventory.Error
				return errors.Is(err, inventory.ErrAllocationMismatch) && errors.As(err, &me) &&
					me.Field == field && me.ReservationID == r.ReservationID
			})
		}
		unknown := good
		unknown.ReservationID = uuid.Must(uuid.NewV7())
		check("unknown reservation", unknown, func(err error) bool { return errors.Is(err, inventory.ErrReservationNotFound) })

		if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")+` WHERE ledger_type = 10`); n != 0 {
			t.Fatalf("%d ALLOCATE rows after refused allocations", n)
		}
		for _, sku := range []struct{ a, s int64 }{{1, 1}, {1, 2}, {2, 1}} {
			if tot := tb.totals(t, sku.a, sku.s); tot.Allocated != 0 {
				t.Fatalf("activity %d sku %d: %+v", sku.a, sku.s, tot)
			}
		}

		// A rejected (or expired, released) reservation takes no stock.
		if _, err := tb.store.TransitionReservation(tb.ctx, tb.pool, inventory.Transition{
			ReservationID: r.ReservationID, To: inventory.StatusRejected, FailureCode: "TEST"}); err != nil {
			t.Fatal(err)
		}
		check("rejected", good, func(err error) bool {
			var me *inventory.Error
			return errors.As(err, &me) && me.Field == "status" && me.Found == "REJECTED"
		})

		// The matching allocation of a live reservation goes through.
		r2 := tb.reserved(t, 1, 1, 1, 2)
		if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(r2))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if tot := tb.totals(t, 1, 1); tot.Allocated != 2 {
			t.Fatalf("after the matching allocation: %+v", tot)
		}
	})
}

// TestTokenAllocationBoundToItsReservation: on a SKU of inventory tokens
// the allocation checks the reservation it names, not another of the same
// buyer: a late allocation for a rejected reservation is refused while the
// buyer's new reservation for the same SKU waits, an allocation that
// differs from its reservation in any field is refused naming the field,
// neither takes a token, and the new reservation's allocation then goes
// through.
func TestTokenAllocationBoundToItsReservation(t *testing.T) {
	t.Parallel()
	tokenModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 1, 1, 10, 1)
		old, fresh := tb.newReservation(1, 1, 0), tb.newReservation(1, 1, 0)
		fresh.UserID = old.UserID
		tb.insertReservations(t, []inventory.NewReservation{old, fresh})
		if _, err := tb.store.TransitionReservation(tb.ctx, tb.pool, inventory.Transition{
			ReservationID: old.ReservationID, To: inventory.StatusRejected, FailureCode: "TEST"}); err != nil {
			t.Fatal(err)
		}
		err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(old))
			var me *inventory.Error
			if !errors.As(err, &me) || me.Field != "status" || me.Found != "REJECTED" || me.ReservationID != old.ReservationID {
				t.Errorf("allocation of the rejected reservation: %v; want a status refusal naming it", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Every field of the allocation must match the reservation's; a
		// mismatch is refused naming the field (the bucket: a token
		// SKU's reservation made for another bucket).
		tb.provision(t, 1, 2, 10, 1)
		tb.provision(t, 2, 1, 10, 1)
		otherBucket := tb.newReservation(1, 1, 1)
		tb.insertReservations(t, []inventory.NewReservation{otherBucket})
		wrongBucket := r2ToAlloc(otherBucket)
		wrongBucket.Bucket = 0
		mismatches := map[string]inventory.Allocation{"inventory_bucket": wrongBucket}
		for field, change := range map[string]func(a *inventory.Allocation){
			"activity_id": func(a *inventory.Allocation) { a.ActivityID = 2 },
			"sku_id":      func(a *inventory.Allocation) { a.SKUID = 2 },
			"quantity":    func(a *inventory.Allocation) { a.Quantity = 2 },
			"user_id":     func(a *inventory.Allocation) { a.UserID++ },
		} {
			a := r2ToAlloc(fresh)
			change(&a)
			mismatches[field] = a
		}
		for field, a := range mismatches {
			if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
				_, err := tb.store.AllocateBucket(tb.ctx, tx, a)
				var me *inventory.Error
				if !errors.Is(err, inventory.ErrAllocationMismatch) || !errors.As(err, &me) || me.Field != field {
					t.Errorf("%s mismatch: %v; want ErrAllocationMismatch naming it", field, err)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")+` WHERE ledger_type = 10`); n != 0 {
			t.Fatalf("%d ALLOCATE rows after the refused allocations", n)
		}
		for _, sku := range []struct{ a, s int64 }{{1, 1}, {1, 2}, {2, 1}} {
			if tot := tb.totals(t, sku.a, sku.s); tot.Allocated != 0 || tot.Available != 10 {
				t.Fatalf("activity %d sku %d after the refused allocations: %+v", sku.a, sku.s, tot)
			}
		}
		if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(fresh))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if tot := tb.totals(t, 1, 1); tot.Allocated != 1 || tot.Available != 9 {
			t.Fatalf("after the new reservation's allocation: %+v", tot)
		}
	})
}

// TestTokenAndBucketSKUsSideBySide: a SKU sold by buckets and SKUs sold by
// tokens that share its activity or its SKU id each take their own stock:
// the allocation reads the stock mode, the lanes and the tokens of its own
// (activity, SKU) only.
func TestTokenAndBucketSKUsSideBySide(t *testing.T) {
	t.Parallel()
	tokenModes(t, func(t *testing.T, tb testBundle) {
		tb.tokens = false
		tb.provision(t, 1, 1, 10, 2) // buckets
		tb.tokens = true
		tb.provision(t, 2, 1, 10, 1) // tokens, same SKU id
		tb.provision(t, 1, 2, 10, 1) // tokens, same activity
		for _, sku := range []struct{ a, s int64 }{{1, 1}, {2, 1}, {1, 2}} {
			r := tb.reserved(t, sku.a, sku.s, 0, 1)
			if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
				_, err := tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(r))
				return err
			}); err != nil {
				t.Fatalf("activity %d sku %d: %v", sku.a, sku.s, err)
			}
		}
		for _, sku := range []struct{ a, s int64 }{{1, 1}, {2, 1}, {1, 2}} {
			if tot := tb.totals(t, sku.a, sku.s); tot.Allocated != 1 || tot.Available != 9 {
				t.Fatalf("activity %d sku %d: %+v, want 1 allocated of 10", sku.a, sku.s, tot)
			}
		}
		if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_token")+` WHERE reservation_id IS NOT NULL`); n != 2 {
			t.Fatalf("%d tokens held, want 2 (one per token SKU)", n)
		}
		// A token SKU sharing the activity of one and the SKU id of the
		// other sells its own tokens to the last, then is sold out while
		// theirs are free.
		// 64 tokens: each allocation starts at one of 64 lanes (from its
		// reservation id), so the ones past the last find other SKUs'
		// free tokens both after and before their lane's start.
		tb.provision(t, 2, 2, 64, 1)
		for i := range 67 {
			r := tb.reserved(t, 2, 2, 0, 1)
			err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
				_, err := tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(r))
				return err
			})
			if want := i >= 64; errors.Is(err, inventory.ErrSoldOut) != want || !want && err != nil {
				t.Fatalf("allocation %d of activity 2 sku 2 (stock 64): %v", i+1, err)
			}
		}
		for _, sku := range []struct {
			a, s      int64
			allocated int64
		}{{1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {2, 2, 64}} {
			if tot := tb.totals(t, sku.a, sku.s); tot.Allocated != sku.allocated {
				t.Fatalf("activity %d sku %d: %+v, want %d allocated", sku.a, sku.s, tot, sku.allocated)
			}
		}
	})
}

// TestTokenRedeliveryAppliesOnce: an allocation of a token SKU delivered
// again, after the first committed, is already applied (the ledger row's
// id) and claims no second token.
func TestTokenRedeliveryAppliesOnce(t *testing.T) {
	t.Parallel()
	tokenModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 1, 1, 10, 1)
		// Four reservations: each claims from the lane its id picks, so
		// a redelivery meets free tokens both past and before its lane.
		for range 4 {
			r := tb.reserved(t, 1, 1, 0, 1)
			var first inventory.Allocated
			for i := range 2 {
				err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
					got, err := tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(r))
					if i == 0 {
						first = got
						return err
					}
					var me *inventory.Error
					if !errors.Is(err, inventory.ErrAlreadyApplied) || !errors.As(err, &me) || me.LedgerID != first.LedgerID {
						t.Errorf("redelivery: %v; want ErrAlreadyApplied with ledger %d", err, first.LedgerID)
					}
					return nil
				})
				if err != nil {
					t.Fatalf("delivery %d: %v", i+1, err)
				}
			}
		}
		if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_token")+` WHERE reservation_id IS NOT NULL`); n != 4 {
			t.Fatalf("%d tokens held after redeliveries, want 4", n)
		}
		if tot := tb.totals(t, 1, 1); tot.Allocated != 4 || tot.Available != 6 {
			t.Fatalf("after redeliveries: %+v", tot)
		}
	})
}

// TestTokenAllocationTakesDistinctTokens: an allocation of two units with
// one token left is sold out and takes nothing, whichever lane it starts
// from: the claim never counts one token twice. Eight SKUs of two tokens,
// one held each, so the free one is at, past or before the lane's start.
func TestTokenAllocationTakesDistinctTokens(t *testing.T) {
	t.Parallel()
	tokenModes(t, func(t *testing.T, tb testBundle) {
		allocate := func(r inventory.NewReservation) error {
			return inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
				_, err := tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(r))
				return err
			})
		}
		for sku := int64(1); sku <= 8; sku++ {
			tb.provision(t, 1, sku, 2, 1)
			if err := allocate(tb.reserved(t, 1, sku, 0, 1)); err != nil {
				t.Fatal(err)
			}
			for range 2 { // two buyers of two units, each from its own lane
				if err := allocate(tb.reserved(t, 1, sku, 0, 2)); !errors.Is(err, inventory.ErrSoldOut) {
					t.Fatalf("sku %d: two units with one token left: %v, want ErrSoldOut", sku, err)
				}
			}
			if tot := tb.totals(t, 1, sku); tot.Allocated != 1 || tot.Available != 1 {
				t.Fatalf("sku %d: %+v, want 1 allocated, 1 available", sku, tot)
			}
		}
	})
}
