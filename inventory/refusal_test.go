package inventory_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// TestQueueTransitionReservationAbort: with pgtx.Abort a transition that
// moves nothing raises its condition (not found, already in the target,
// illegal) and nothing of the batch commits; a legal one fills dst.
func TestQueueTransitionReservationAbort(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 21, 210, 5, 1)
		r := tb.newReservation(21, 210, 0)
		if _, err := tb.acquire(r); err != nil {
			t.Fatal(err)
		}
		run := func(tr inventory.Transition, dst *inventory.Reservation) error {
			var b pgx.Batch
			if err := tb.store.QueueTransitionReservation(&b, tr, dst, pgtx.Abort); err != nil {
				t.Fatal(err)
			}
			return pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{}, &b)
		}
		abortedBy(t, "unknown reservation", run(inventory.Transition{ReservationID: uuid.Must(uuid.NewV7()), To: inventory.StatusRejected}, nil),
			"QueueTransitionReservation", inventory.ErrReservationNotFound, "SK009")
		abortedBy(t, "illegal", run(inventory.Transition{ReservationID: r.ReservationID, To: inventory.StatusReleased}, nil),
			"QueueTransitionReservation", inventory.ErrIllegalTransition, "SK011")

		var got inventory.Reservation
		if err := run(inventory.Transition{ReservationID: r.ReservationID, To: inventory.StatusRejected, FailureCode: "TEST"}, &got); err != nil ||
			got.Status != inventory.StatusRejected || got.FailureCode != "TEST" || got.ReservationID != r.ReservationID {
			t.Fatalf("legal transition: %+v, %v", got, err)
		}
		abortedBy(t, "already there", run(inventory.Transition{ReservationID: r.ReservationID, To: inventory.StatusRejected}, nil),
			"QueueTransitionReservation", inventory.ErrAlreadyInState, "SK010")
		if now, err := tb.store.GetReservation(tb.ctx, tb.pool, r.ReservationID); err != nil || now.Version != got.Version {
			t.Fatalf("after the aborts: %+v, %v; want version %d", now, err, got.Version)
		}
	})
}

// TestQueueAcquireReservationAbortReturnsRow: with pgtx.Abort a non-nil
// dst receives the inserted row (PENDING_DB, ORDERED or REJECTED).
func TestQueueAcquireReservationAbortReturnsRow(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 22, 220, 5, 1)
		for _, c := range []struct {
			name    string
			ordered bool
			code    string
			want    inventory.ReservationStatus
		}{
			{"pending", false, "", inventory.StatusPendingDB},
			{"ordered", true, "", inventory.StatusOrdered},
			{"rejected", false, "SOLD_OUT", inventory.StatusRejected},
		} {
			r := tb.newReservation(22, 220, 0)
			r.OrderID, r.Ordered, r.FailureCode = 4000+int64(c.want), c.ordered, c.code
			var b pgx.Batch
			var got inventory.Acquired
			if err := tb.store.QueueAcquireReservation(&b, r, &got, pgtx.Abort); err != nil {
				t.Fatal(err)
			}
			if err := pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{}, &b); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			stored, err := tb.store.GetReservation(tb.ctx, tb.pool, r.ReservationID)
			if err != nil || !got.Created || got.Reservation != stored || got.Reservation.Status != c.want ||
				got.Reservation.FailureCode != c.code || got.Reservation.FirstMessageID != r.MessageID {
				t.Fatalf("%s: got %+v, stored %+v, %v", c.name, got, stored, err)
			}
			if c.ordered != (got.Reservation.OrderID == r.OrderID) {
				t.Fatalf("%s: order id %d, want it only when ordered", c.name, got.Reservation.OrderID)
			}
		}
	})
}

// TestQueueCheckSoldOutReturn: with pgtx.Return the check reports the
// condition that holds through the batch's result, without raising: the
// transaction stays usable.
func TestQueueCheckSoldOutReturn(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 23, 230, 1, 1)
		r := tb.newReservation(23, 230, 0)
		a := allocationOf(r, 0)
		check := func(a inventory.Allocation) error {
			tx, err := tb.pool.Begin(tb.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(tb.ctx)
			var b pgx.Batch
			if err := tb.store.QueueCheckSoldOut(&b, a, pgtx.Return); err != nil {
				t.Fatal(err)
			}
			err = tx.SendBatch(tb.ctx, &b).Close()
			if _, e := tx.Exec(tb.ctx, `SELECT 1`); e != nil {
				t.Fatalf("transaction not usable after the check: %v", e)
			}
			return err
		}
		if err := check(a); !errors.Is(err, inventory.ErrNotSoldOut) {
			t.Fatalf("one unit left: %v, want ErrNotSoldOut", err)
		}
		other := a
		other.SKUID = 231
		if err := check(other); !errors.Is(err, inventory.ErrUnknownSKU) {
			t.Fatalf("unknown SKU: %v, want ErrUnknownSKU", err)
		}
		if err := tb.buy(tb.ctx, tb.newReservation(23, 230, 0)); err != nil {
			t.Fatal(err)
		}
		if err := check(a); err != nil {
			t.Fatalf("sold out: %v, want nil", err)
		}
	})
}
