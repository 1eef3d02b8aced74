package inventory_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// TestQueueSoldOutAndRejectedOrAbort: the sold-out guard passes exactly
// when AllocateBucket would answer sold out (the sale on, the bucket short
// of the quantity) and raises otherwise (stock left, the sale paused, an
// unknown bucket), writing nothing; the rejected reservation is the row a
// PENDING_DB insert and the transition to REJECTED leave, and a second
// insert of it raises.
func TestQueueSoldOutAndRejectedOrAbort(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 13, 130, 2, 2) // one unit per bucket
		reject := func(r inventory.NewReservation, a inventory.Allocation) error {
			t.Helper()
			var b pgx.Batch
			if err := tb.store.QueueCheckSoldOut(&b, a, pgtx.Abort); err != nil {
				t.Fatal(err)
			}
			r.FailureCode = "SOLD_OUT"
			if err := tb.store.QueueAcquireReservation(&b, r, nil, pgtx.Abort); err != nil {
				t.Fatal(err)
			}
			return pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{}, &b)
		}

		// Stock left in bucket 0: the guard raises.
		r := tb.newReservation(13, 130, 0)
		err := reject(r, allocationOf(r, 0))
		abortedAt(t, "stock left", err, 0)
		abortedBy(t, "stock left", err, "QueueCheckSoldOut", inventory.ErrNotSoldOut, "SK008")
		// Take the unit; now the same reservation's rejection commits.
		taken := tb.newReservation(13, 130, 0)
		if err := tb.buyOrAbort(t, taken, 1300, allocationOf(taken, 1300), nil); err != nil {
			t.Fatal(err)
		}
		if err := reject(r, allocationOf(r, 0)); err != nil {
			t.Fatalf("sold out: %v", err)
		}
		got, err := tb.store.GetReservation(tb.ctx, tb.pool, r.ReservationID)
		if err != nil || got.Status != inventory.StatusRejected || got.FailureCode != "SOLD_OUT" || got.OrderID != 0 ||
			got.Bucket != 0 || got.Quantity != 1 || got.UserID != r.UserID {
			t.Fatalf("rejected reservation = %+v, %v", got, err)
		}
		// Its general-path twin: acquired PENDING_DB, then REJECTED.
		twin := tb.newReservation(13, 130, 0)
		if err := pgx.BeginFunc(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			if _, err := tb.store.AcquireReservation(tb.ctx, tx, twin); err != nil {
				return err
			}
			_, err := tb.store.TransitionReservation(tb.ctx, tx, inventory.Transition{ReservationID: twin.ReservationID,
				To: inventory.StatusRejected, FailureCode: "SOLD_OUT"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		tw, err := tb.store.GetReservation(tb.ctx, tb.pool, twin.ReservationID)
		if err != nil || tw.Status != got.Status || tw.FailureCode != got.FailureCode || tw.OrderID != got.OrderID ||
			tw.OrderedAt.IsZero() != got.OrderedAt.IsZero() || tw.ReleasedAt.IsZero() != got.ReleasedAt.IsZero() {
			t.Fatalf("general path row %+v differs from the one-batch row %+v (%v)", tw, got, err)
		}
		// The same reservation again: its primary key raises.
		err = reject(r, allocationOf(r, 0))
		abortedAt(t, "rejected twice", err, 1)
		abortedBy(t, "rejected twice", err, "QueueAcquireReservation", inventory.ErrReservationConflict, "23505")
		if c, ok := pgtx.UniqueViolationOf(err); !ok || c != "inventory_reservation_pkey" {
			t.Fatalf("rejected twice: %v", err)
		}

		// An unknown bucket, and the sale paused: the guard raises.
		r2 := tb.newReservation(13, 130, 1)
		unknown := allocationOf(r2, 0)
		unknown.SKUID = 131
		err = reject(r2, unknown)
		abortedAt(t, "unknown SKU", err, 0)
		abortedBy(t, "unknown SKU", err, "QueueCheckSoldOut", inventory.ErrUnknownSKU, "SK004")
		unknownBucket := allocationOf(r2, 0)
		unknownBucket.Bucket = 7
		abortedBy(t, "unknown bucket", reject(r2, unknownBucket), "QueueCheckSoldOut", inventory.ErrUnknownBucket, "SK003")
		if err := pgx.BeginFunc(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.SetSaleStatus(tb.ctx, tx, inventory.SaleChange{ActivityID: 13, SKUID: 130, To: inventory.SalePaused, Operator: "test", Reason: "pause"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		err = reject(r2, allocationOf(r2, 0))
		abortedAt(t, "sale paused", err, 0)
		abortedBy(t, "sale paused", err, "QueueCheckSoldOut", inventory.ErrNotOnSale, "SK002")
		if _, err := tb.store.GetReservation(tb.ctx, tb.pool, r2.ReservationID); !errors.Is(err, inventory.ErrReservationNotFound) {
			t.Fatalf("refused rejection wrote the reservation: %v", err)
		}

		// Bad input queues nothing.
		var b pgx.Batch
		bad := tb.newReservation(13, 130, 0)
		bad.OrderID, bad.Ordered, bad.FailureCode = 7, true, "SOLD_OUT"
		if err := tb.store.QueueAcquireReservation(&b, bad, nil, pgtx.Abort); !errors.Is(err, inventory.ErrInvalidArgument) || b.Len() != 0 {
			t.Fatalf("rejected with an order id: %v, %d queued", err, b.Len())
		}
		long := tb.newReservation(13, 130, 0)
		long.FailureCode = strings.Repeat("X", inventory.MaxCodeLength+1)
		if err := tb.store.QueueAcquireReservation(&b, long, nil, pgtx.Abort); !errors.Is(err, inventory.ErrInvalidArgument) || b.Len() != 0 {
			t.Fatalf("failure code too long: %v, %d queued", err, b.Len())
		}
		// A failure code is for the insert that aborts only.
		if err := tb.store.QueueAcquireReservation(&b, long, nil, pgtx.Return); !errors.Is(err, inventory.ErrInvalidArgument) || b.Len() != 0 {
			t.Fatalf("failure code with pgtx.Return: %v, %d queued", err, b.Len())
		}
		zero := allocationOf(r2, 0)
		zero.Quantity = 0
		if err := tb.store.QueueCheckSoldOut(&b, zero, pgtx.Abort); !errors.Is(err, inventory.ErrInvalidArgument) || b.Len() != 0 {
			t.Fatalf("zero quantity: %v, %d queued", err, b.Len())
		}
		tb.auditClean(t, 13, 130)
	})
}
