package inventory_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// releaseForm is one way to release an allocation.
type releaseForm struct {
	name string
	// release gives back a; a full allocation for the one-batch form,
	// only its reservation id for the others.
	release func(t *testing.T, tb testBundle, a inventory.Allocation) error
}

// commitAnyway runs release in a transaction and commits it whatever the
// release returned (its refusals leave the transaction usable, and a
// caller may go on and commit), then returns the release's error.
func commitAnyway(t *testing.T, tb testBundle, release func(tx pgx.Tx) error) error {
	t.Helper()
	tx, err := tb.pool.Begin(tb.ctx)
	if err != nil {
		t.Fatal(err)
	}
	relErr := release(tx)
	if err := tx.Commit(tb.ctx); err != nil {
		t.Fatalf("commit after the release (%v): %v", relErr, err)
	}
	return relErr
}

// refusedAs checks that form f refused a release (what) with sentinel:
// the one-batch form aborts its batch with the SQLSTATE code, the others
// return the classified error.
func refusedAs(t *testing.T, f releaseForm, what string, err, sentinel error, code string) {
	t.Helper()
	if f.name == "QueueReleaseStock/Abort" {
		abortedBy(t, f.name+": "+what, err, "QueueReleaseStock", sentinel, code)
	} else if !errors.Is(err, sentinel) {
		t.Fatalf("%s: %s: %v, want %v", f.name, what, err, sentinel)
	}
}

// releaseForms: ReleaseStock and QueueReleaseStock with pgtx.Return, each
// in a transaction committed whatever the release answered, and the
// one-batch form.
var releaseForms = []releaseForm{
	{"ReleaseStock", func(t *testing.T, tb testBundle, a inventory.Allocation) error {
		return commitAnyway(t, tb, func(tx pgx.Tx) error {
			_, err := tb.store.ReleaseStock(tb.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: a.ReservationID}})
			return err
		})
	}},
	{"QueueReleaseStock/Return", func(t *testing.T, tb testBundle, a inventory.Allocation) error {
		return commitAnyway(t, tb, func(tx pgx.Tx) error {
			var b pgx.Batch
			if err := tb.store.QueueReleaseStock(&b, inventory.StockRelease{Request: seckill.Request{ReservationID: a.ReservationID}}, nil, pgtx.Return); err != nil {
				t.Fatal(err)
			}
			return tx.SendBatch(tb.ctx, &b).Close()
		})
	}},
	{"QueueReleaseStock/Abort", func(t *testing.T, tb testBundle, a inventory.Allocation) error {
		return tb.releaseOrAbort(t, a, nil)
	}},
}

// TestReleaseTouchesOnlyItsOwnStock: on buckets and on inventory tokens,
// with the plain and the Citus statements, each form of release gives
// back exactly its allocation: the bucket's counters move by its
// quantity (on tokens, exactly its tokens become free), and nothing else
// changes — not the other bucket of its SKU, not the same bucket of
// another SKU of its activity, not the same SKU id and bucket of another
// activity, all holding allocated stock of the same quantity, nor the
// allocation its own buyer holds beside it. Refused, a release changes
// nothing, neither stock nor ledger, even when its transaction commits:
// sent again (already applied); never allocated (by a buyer who holds another allocation of
// the same bucket and quantity); with the one-batch form, a release that
// differs from its ALLOCATE row in buyer, quantity, bucket, SKU or
// activity; and a bucket that holds less allocated stock than the
// release (on tokens, an allocation of which one token was freed behind
// the store's back), refused as inconsistent.
func TestReleaseTouchesOnlyItsOwnStock(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		buckets, bucket := int16(2), int16(1) // the bucket the releases are of
		if tb.tokens {
			buckets, bucket = 1, 0
		}
		tb.provision(t, 2, 20, 200, buckets)
		tb.provision(t, 2, 21, 40, buckets)
		tb.provision(t, 3, 20, 40, buckets)
		orderID := int64(5000)
		allocate := func(activity, sku int64, bucket int16, user int64) inventory.Allocation {
			t.Helper()
			r := tb.newReservation(activity, sku, bucket)
			r.Quantity = 2
			if user != 0 {
				r.UserID = user
			}
			orderID++
			a := allocationOf(r, orderID)
			if err := tb.buyOrAbort(t, r, orderID, a, nil); err != nil {
				t.Fatalf("allocate %d/%d bucket %d: %v", activity, sku, bucket, err)
			}
			return a
		}
		// Allocated stock of the release's quantity everywhere a broken
		// filter could reach.
		for b := range buckets {
			allocate(2, 21, b, 0)
			allocate(3, 20, b, 0)
			if b != bucket {
				allocate(2, 20, b, 0)
			}
		}
		// state is every bucket's counters but skip's of SKU 2/20 (-1: none)
		// and every token's holder, the tokens of target written as free.
		state := func(target uuid.UUID, skip int16) string {
			t.Helper()
			var s string
			err := tb.pool.QueryRow(tb.ctx, `SELECT coalesce((SELECT string_agg(format('%s/%s/%s:%s/%s/%s', activity_id, sku_id, bucket_no,
					available_stock, allocated_stock, version), ' ' ORDER BY activity_id, sku_id, bucket_no) FROM `+tb.table("sku_inventory")+`
					WHERE NOT (activity_id = 2 AND sku_id = 20 AND bucket_no = $2)), '')
				|| ' | ' || coalesce((SELECT string_agg(format('%s/%s/%s:%s', activity_id, sku_id, token_no,
					CASE WHEN reservation_id = $1 THEN '-' ELSE coalesce(reservation_id::text, '-') END), ' ' ORDER BY activity_id, sku_id, token_no)
					FROM `+tb.table("inventory_token")+`), '')`, target, skip).Scan(&s)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		bucketOf := func() inventory.Bucket {
			t.Helper()
			bk, err := tb.store.GetBucket(tb.ctx, tb.pool, 2, 20, bucket)
			if err != nil {
				t.Fatal(err)
			}
			return bk
		}
		// ledger is every ledger row's id and counters.
		ledger := func() string {
			t.Helper()
			var s string
			if err := tb.pool.QueryRow(tb.ctx, `SELECT coalesce(string_agg(format('%s:%s/%s/%s/%s/%s', ledger_id, ledger_type, before_available,
				after_available, before_allocated, after_allocated), ' ' ORDER BY ledger_id), '') FROM `+tb.table("inventory_ledger")).Scan(&s); err != nil {
				t.Fatal(err)
			}
			return s
		}
		var ledgerBefore string
		unchanged := func(what string, before string, target uuid.UUID) {
			t.Helper()
			if after := state(target, -1); after != before {
				t.Fatalf("%s: the stock changed:\n before %s\n after  %s", what, before, after)
			}
			if after := ledger(); after != ledgerBefore {
				t.Fatalf("%s: the ledger changed:\n before %s\n after  %s", what, ledgerBefore, after)
			}
		}
		for _, f := range releaseForms {
			sibling := allocate(2, 20, bucket, 0)
			a := allocate(2, 20, bucket, sibling.UserID)

			// Never allocated, by the buyer who holds a and sibling.
			never := tb.newReservation(2, 20, bucket)
			never.Quantity, never.UserID = 2, a.UserID
			before := state(a.ReservationID, -1)
			ledgerBefore = ledger()
			others := state(a.ReservationID, bucket)
			err := f.release(t, tb, allocationOf(never, 1))
			refusedAs(t, f, "never allocated", err, inventory.ErrNotAllocated, "SK006")
			unchanged(f.name+": never allocated", before, a.ReservationID)

			if f.name == "QueueReleaseStock/Abort" {
				for _, c := range []struct {
					name string
					edit func(*inventory.Allocation)
				}{
					{"another buyer", func(x *inventory.Allocation) { x.UserID++ }},
					{"another quantity", func(x *inventory.Allocation) { x.Quantity = 1 }},
					{"another bucket", func(x *inventory.Allocation) { x.Bucket = (bucket + 1) % buckets }},
					{"another SKU", func(x *inventory.Allocation) { x.SKUID = 21 }},
					{"another activity", func(x *inventory.Allocation) { x.ActivityID = 3 }},
				} {
					if c.name == "another bucket" && buckets == 1 {
						continue
					}
					bad := a
					c.edit(&bad)
					err := tb.releaseOrAbort(t, bad, nil)
					abortedBy(t, f.name+": "+c.name, err, "QueueReleaseStock", inventory.ErrAllocationMismatch, "SK005")
					unchanged(f.name+": "+c.name, before, a.ReservationID)
				}
			}

			// The release: its bucket gives back 2 units (its tokens are
			// free), nothing else moves.
			b0 := bucketOf()
			if err := f.release(t, tb, a); err != nil {
				t.Fatalf("%s: release: %v", f.name, err)
			}
			if b1 := bucketOf(); b1.Available != b0.Available+2 || b1.Allocated != b0.Allocated-2 {
				t.Fatalf("%s: bucket %+v after the release, was %+v: want 2 units given back", f.name, b1, b0)
			}
			if tb.tokens {
				if n := tb.tokensHeld(t, 2, 20, &a.ReservationID); n != 0 {
					t.Fatalf("%s: the released reservation still holds %d tokens", f.name, n)
				}
				if n := tb.tokensHeld(t, 2, 20, &sibling.ReservationID); n != 2 {
					t.Fatalf("%s: the buyer's other reservation holds %d tokens, want 2", f.name, n)
				}
			}
			if after := state(a.ReservationID, bucket); after != others {
				t.Fatalf("%s: the release changed more than its own bucket and tokens:\n before %s\n after  %s", f.name, others, after)
			}

			// Again: already applied, nothing written.
			before, ledgerBefore = state(a.ReservationID, -1), ledger()
			err = f.release(t, tb, a)
			refusedAs(t, f, "again", err, inventory.ErrAlreadyApplied, "23505")
			unchanged(f.name+": again", before, a.ReservationID)

			// The sibling, short of its stock: its bucket holds less
			// allocated stock than it (on tokens, one of its two tokens
			// was freed); refused as inconsistent, nothing written.
			if tb.tokens {
				tb.exec(t, `UPDATE `+tb.table("inventory_token")+` SET reservation_id = NULL
					WHERE ctid = (SELECT ctid FROM `+tb.table("inventory_token")+` WHERE reservation_id = $1 LIMIT 1)`, sibling.ReservationID)
			} else {
				tb.exec(t, `UPDATE `+tb.table("sku_inventory")+` SET available_stock = available_stock + allocated_stock - 1, allocated_stock = 1
					WHERE activity_id = 2 AND sku_id = 20 AND bucket_no = $1`, bucket)
			}
			before, ledgerBefore = state(uuid.Nil, -1), ledger()
			err = f.release(t, tb, sibling)
			refusedAs(t, f, "short", err, inventory.ErrInconsistent, "SK007")
			unchanged(f.name+": short", before, uuid.Nil)
			if ledger, err := tb.store.ReservationLedger(tb.ctx, tb.pool, sibling.ReservationID); err != nil || len(ledger) != 1 {
				t.Fatalf("%s: short: ledger %+v, %v; want the ALLOCATE row only", f.name, ledger, err)
			}
			// Put the stock back as it was, for the next form.
			if tb.tokens {
				tb.exec(t, `UPDATE `+tb.table("inventory_token")+` SET reservation_id = $1
					WHERE ctid = (SELECT ctid FROM `+tb.table("inventory_token")+` WHERE activity_id = 2 AND sku_id = 20 AND reservation_id IS NULL ORDER BY token_no LIMIT 1)`,
					sibling.ReservationID)
			} else {
				tb.exec(t, `UPDATE `+tb.table("sku_inventory")+` SET available_stock = available_stock - $2, allocated_stock = allocated_stock + $2
					WHERE activity_id = 2 AND sku_id = 20 AND bucket_no = $1`, bucket, b0.Allocated-2-1)
			}
		}
		tb.auditClean(t, 2, 20)
		tb.auditClean(t, 2, 21)
		tb.auditClean(t, 3, 20)
	})
}
