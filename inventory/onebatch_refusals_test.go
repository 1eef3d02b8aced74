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
// typed error and taking no stock, an allocation that differs from its
// reservation in buyer, quantity, SKU, activity or bucket, a reservation
// that is not there or no longer pending or ordered, a sale paused, not
// yet open or closed, and more units than the free stock; on tokens each
// from both ends of the lanes, so that both claim paths (from the lane's
// start, and before it) must refuse. An allocation that goes through
// takes exactly its units of its own SKU (on tokens, the reservation
// holds that many): another SKU of the activity, and the same SKU id of
// another activity, keep all of theirs; so with dst (the statements that
// return the ledger row), whose ledger row is the one read back.
func TestQueueAllocateOrAbortRefusalsEveryStock(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		dec, _ := tb.allocationOrder()
		tb.provision(t, 2, 20, 10, 1)
		// With buckets, SKU 21 has a bucket 1, which SKU 20 has not: the
		// unknown-bucket refusal must read its own SKU's buckets.
		sku21Buckets := int16(2)
		if tb.tokens {
			sku21Buckets = 1
		}
		tb.provision(t, 2, 21, 3, sku21Buckets)
		// A third SKU of the activity, never sold: a statement that read
		// "another SKU of the activity" instead of its own would find two.
		tb.provision(t, 2, 22, 2, 1)
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
		// onLane gives r an id whose claim, on tokens, starts at the lane
		// of token lane (of planned tokens): at 0 only the claim from the
		// lane's start can take a token, at the last one the claim before
		// it takes all but that token.
		onLane := func(r inventory.NewReservation, planned, lane int64) inventory.NewReservation {
			t.Helper()
			r.RequestID, r.MessageID = uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
			for got := int64(-1); got != lane; {
				r.ReservationID = uuid.Must(uuid.NewV7())
				got = tb.count(t, `SELECT (abs(hashtext($1::text)::int8) % 64) * $2 / 64`, r.ReservationID, planned)
			}
			return r
		}
		planned := map[int64]int64{20: 10, 21: 3}
		// lanes are the two ends on tokens (each claim path must refuse),
		// one id on buckets.
		lanes := func(r inventory.NewReservation) []inventory.NewReservation {
			if !tb.tokens {
				return []inventory.NewReservation{r}
			}
			n := planned[r.SKUID]
			return []inventory.NewReservation{onLane(r, n, 0), onLane(r, n, n-1)}
		}
		refused := func(name string, r inventory.NewReservation, edit func(*inventory.Allocation), sentinel error, code string) {
			t.Helper()
			for _, r := range lanes(r) {
				a := allocationOf(r, 1)
				if edit != nil {
					edit(&a)
				}
				n0, m0 := claimed(20), claimed(21)
				err := tb.buyOrAbort(t, r, tb.ids.Add(1), a, nil)
				abortedAt(t, name, err, 1+dec) // the decrement, after the reservation
				abortedBy(t, name, err, "QueueAllocateBucket", sentinel, code)
				if n, m := claimed(20), claimed(21); n != n0 || m != m0 {
					t.Fatalf("%s: %d and %d units taken, want %d and %d as before", name, n, m, n0, m0)
				}
			}
		}
		refused("another buyer", tb.newReservation(2, 20, 0), func(a *inventory.Allocation) { a.UserID++ }, inventory.ErrAllocationMismatch, "SK005")
		refused("another quantity", tb.newReservation(2, 20, 0), func(a *inventory.Allocation) { a.Quantity = 2 }, inventory.ErrAllocationMismatch, "SK005")
		refused("the reservation of another SKU", tb.newReservation(2, 21, 0), func(a *inventory.Allocation) { a.SKUID = 20 }, inventory.ErrAllocationMismatch, "SK005")
		refused("the reservation of another activity", tb.newReservation(3, 20, 0), func(a *inventory.Allocation) { a.ActivityID = 2 }, inventory.ErrAllocationMismatch, "SK005")
		// A reservation of bucket 1 allocated as bucket 0, and as bucket 1,
		// which the SKU does not have.
		refused("another bucket than the reservation's", tb.newReservation(2, 20, 1), func(a *inventory.Allocation) { a.Bucket = 0 }, inventory.ErrAllocationMismatch, "SK005")
		refused("a bucket other than 0", tb.newReservation(2, 20, 1), nil, inventory.ErrUnknownBucket, "SK003")
		refused("no such reservation", tb.newReservation(2, 20, 0), func(a *inventory.Allocation) { a.ReservationID = uuid.Must(uuid.NewV7()) }, inventory.ErrReservationNotFound, "SK009")
		// More units than free stock: SKU 21 has 3.
		four := tb.newReservation(2, 21, 0)
		four.Quantity = 4
		refused("4 units of 3", four, nil, inventory.ErrSoldOut, "SK001")

		// The sale paused, then open but its window not yet open, then
		// closed: refused each time; then open within its window.
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
			refused(c.name, tb.newReservation(2, 20, 0), nil, inventory.ErrNotOnSale, "SK002")
		}
		window(inventory.SaleOnSale, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))

		// A reservation rejected before its allocation, while its buyer
		// holds another, pending one of the same SKU: only the allocation
		// is sent, and refused.
		for i, rejected := range lanes(tb.newReservation(2, 20, 0)) {
			tb.insertReservations(t, []inventory.NewReservation{rejected})
			if _, err := tb.store.TransitionReservation(tb.ctx, tb.pool, inventory.Transition{
				ReservationID: rejected.ReservationID, To: inventory.StatusRejected, FailureCode: "TEST"}); err != nil {
				t.Fatal(err)
			}
			pending := tb.newReservation(2, 20, 0)
			pending.UserID = rejected.UserID
			if i == 0 {
				// The pending one's lane starts at token 0: on tokens only
				// the claim from the lane's start can take its unit.
				pending = onLane(pending, 10, 0)
			}
			tb.insertReservations(t, []inventory.NewReservation{pending})
			var b pgx.Batch
			if err := tb.store.QueueAllocateBucket(&b, allocationOf(rejected, 1), nil, pgtx.Abort); err != nil {
				t.Fatal(err)
			}
			n0 := claimed(20)
			err := pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{}, &b)
			abortedBy(t, "a rejected reservation", err, "QueueAllocateBucket", inventory.ErrAllocationMismatch, "SK005")
			if n := claimed(20); n != n0 {
				t.Fatalf("a rejected reservation: %d units taken, want %d as before", n, n0)
			}
			if i > 0 {
				continue
			}
			// The buyer's pending reservation (acquired, not yet ordered)
			// is allocated, in the sale's window.
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
		}

		// Then four lots of two, in the window, each on the last lane but
		// the second (on tokens: the first lot takes the last token from
		// its lane's start and one before it, the second takes its two
		// from the first lane's start, where the other activity's SKU 20
		// has free tokens of lower numbers than this SKU's, the others take
		// theirs before the lane): each takes its own units, none of SKU
		// 21, none of the other activity's SKU 20; one unit is left.
		for i := range 4 {
			r := tb.newReservation(2, 20, 0)
			r.Quantity = 2
			if tb.tokens {
				lane := int64(9)
				if i == 1 {
					lane = 0
				}
				r = onLane(r, 10, lane)
			}
			if err := tb.buyOrAbort(t, r, tb.ids.Add(1), allocationOf(r, 1), nil); err != nil {
				t.Fatalf("lot %d: %v", i, err)
			}
			if n, m := claimed(20), claimed(21); n != int64(1+2*(i+1)) || m != 0 {
				t.Fatalf("after lot %d: %d and %d units taken, want %d and 0", i, n, m, 1+2*(i+1))
			}
			if tb.tokens {
				if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_token")+` WHERE reservation_id = $1`, r.ReservationID); n != 2 {
					t.Fatalf("lot %d: the reservation holds %d tokens, want 2", i, n)
				}
			}
		}

		// With dst (the statements that return the ledger row): the last
		// unit of SKU 20, then one of SKU 21's bucket 0 (on buckets SKU
		// 21 has a bucket 1 too); each ledger row is read back.
		// Then without dst, one more of SKU 21's bucket 0. On buckets the
		// ALLOCATE row's counters are the bucket's around the decrement.
		for _, c := range []struct {
			sku        int64
			dst        bool
			n20, n21   int64
			wantBefore int32
		}{{20, true, 10, 0, 1}, {21, true, 10, 1, -1}, {21, false, 10, 2, -1}} {
			r := tb.newReservation(2, c.sku, 0)
			var got inventory.Allocated
			dst := &got
			if !c.dst {
				dst = nil
			}
			if err := tb.buyOrAbort(t, r, tb.ids.Add(1), allocationOf(r, 1), dst); err != nil {
				t.Fatalf("SKU %d (dst %v): %v", c.sku, c.dst, err)
			}
			if n, m := claimed(20), claimed(21); n != c.n20 || m != c.n21 {
				t.Fatalf("after SKU %d (dst %v): %d and %d units taken, want %d and %d", c.sku, c.dst, n, m, c.n20, c.n21)
			}
			ledger, err := tb.store.ReservationLedger(tb.ctx, tb.pool, r.ReservationID)
			if err != nil || len(ledger) != 1 || ledger[0].AllocatedDelta != 1 || ledger[0].SKUID != c.sku || ledger[0].ActivityID != 2 {
				t.Fatalf("SKU %d (dst %v): ledger %+v, %v; want its one ALLOCATE row", c.sku, c.dst, ledger, err)
			}
			if !tb.tokens {
				bk, err := tb.store.GetBucket(tb.ctx, tb.pool, 2, c.sku, 0)
				if err != nil || ledger[0].AfterAvailable != bk.Available || ledger[0].BeforeAvailable != bk.Available+1 ||
					ledger[0].AfterAllocated != bk.Allocated {
					t.Fatalf("SKU %d (dst %v): ALLOCATE row %+v, bucket %+v, %v: want the bucket's counters", c.sku, c.dst, ledger[0], bk, err)
				}
			}
			if c.dst && (got.LedgerID != ledger[0].LedgerID || got.Quantity != 1 || got.SKUID != c.sku ||
				got.AfterAllocated != got.BeforeAllocated+1 || got.AfterAvailable != got.BeforeAvailable-1 ||
				(c.wantBefore >= 0 && got.BeforeAvailable != c.wantBefore)) {
				t.Fatalf("SKU %d with dst: %+v, ledger %+v", c.sku, got, ledger)
			}
		}
	})
}
