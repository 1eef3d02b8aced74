package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inventory"
)

// Every reservation status is reachable through a helper: PENDING_DB
// (AcquireReservation), ORDERED, REJECTED, RELEASE_PENDING and RELEASED
// (TransitionReservation), EXPIRED (ExpireReservations), and
// MANUAL_REQUIRED after repeated failed compensation
// (RecordCompensationFailure).
func TestEveryReservationStatusReachable(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 1)
	reached := map[inventory.ReservationStatus]bool{}
	move := func(r inventory.NewReservation, to inventory.ReservationStatus, order int64) {
		t.Helper()
		got, err := tb.store.TransitionReservation(tb.ctx, tb.pool, inventory.Transition{ReservationID: r.ReservationID, To: to, OrderID: order, FailureCode: "T"})
		if err != nil || got.Status != to {
			t.Fatalf("to %s: %+v, %v", to, got, err)
		}
		reached[to] = true
	}
	a, err := tb.acquire(tb.newReservation(1, 1, 0))
	if err != nil || a.Reservation.Status != inventory.StatusPendingDB {
		t.Fatalf("acquire: %+v, %v", a, err)
	}
	reached[inventory.StatusPendingDB] = true
	rej := tb.reserved(t, 1, 1, 0, 1)
	move(rej, inventory.StatusRejected, 0)
	rel := tb.reserved(t, 1, 1, 0, 1)
	move(rel, inventory.StatusOrdered, 1)
	move(rel, inventory.StatusReleasePending, 0)
	move(rel, inventory.StatusReleased, 0)
	if got := tb.expire(t, 10); len(got) != 0 {
		t.Fatalf("nothing is due yet: %+v", got)
	}
	tb.pastDue(t)
	if got := tb.expire(t, 10); len(got) != 1 {
		t.Fatalf("expired %d", len(got))
	}
	reached[inventory.StatusExpired] = true

	// Compensation: the front door refuses the release three times.
	man := tb.reserved(t, 1, 1, 0, 1)
	move(man, inventory.StatusOrdered, 2)
	move(man, inventory.StatusReleasePending, 0)
	pending, err := tb.store.GetReservation(tb.ctx, tb.pool, man.ReservationID)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		got, err := tb.store.RecordCompensationFailure(tb.ctx, tb.pool, inventory.CompensationFailure{ReservationID: man.ReservationID, MaxFailures: 3, Code: "FRONTDOOR_DOWN"})
		if err != nil || got.Failures != i || got.Escalated != (i == 3) {
			t.Fatalf("failure %d: %+v, %v", i, got, err)
		}
		if i == 3 {
			if got.Reservation.Status != inventory.StatusManualRequired || got.Reservation.FailureCode != "FRONTDOOR_DOWN" {
				t.Fatalf("escalated row %+v", got.Reservation)
			}
			reached[inventory.StatusManualRequired] = true
		} else if got.Reservation.Status != inventory.StatusReleasePending || got.Reservation.FailureCode != pending.FailureCode {
			// Below the threshold the failure is counted, nothing else.
			t.Fatalf("failure %d: status %s, failure code %q; want RELEASE_PENDING, the code kept (%q)", i, got.Reservation.Status, got.Reservation.FailureCode, pending.FailureCode)
		}
	}
	for _, s := range inventory.ReservationStatuses() {
		if !reached[s] {
			t.Errorf("status %s not reached", s)
		}
	}

	// Zero-row outcomes are classified.
	_, err = tb.store.RecordCompensationFailure(tb.ctx, tb.pool, inventory.CompensationFailure{ReservationID: man.ReservationID, MaxFailures: 3})
	if !errors.Is(err, inventory.ErrAlreadyInState) {
		t.Errorf("after escalation: %v", err)
	}
	var te *inventory.Error
	_, err = tb.store.RecordCompensationFailure(tb.ctx, tb.pool, inventory.CompensationFailure{ReservationID: rej.ReservationID, MaxFailures: 3})
	if !errors.Is(err, inventory.ErrIllegalTransition) || !errors.As(err, &te) || te.Current != inventory.StatusRejected {
		t.Errorf("REJECTED reservation: %v", err)
	}
	for _, max := range []int{1, 3, 1000} { // the threshold's whole range is accepted
		_, err = tb.store.RecordCompensationFailure(tb.ctx, tb.pool, inventory.CompensationFailure{ReservationID: uuid.Must(uuid.NewV7()), MaxFailures: max})
		if !errors.Is(err, inventory.ErrReservationNotFound) {
			t.Errorf("unknown reservation, MaxFailures %d: %v", max, err)
		}
	}
	_, err = tb.store.RecordCompensationFailure(tb.ctx, tb.pool, inventory.CompensationFailure{ReservationID: man.ReservationID})
	if !errors.Is(err, inventory.ErrInvalidArgument) {
		t.Errorf("MaxFailures 0: %v", err)
	}
}

// TestConcurrentCompensationFailures: ten concurrent failures of one
// RELEASE_PENDING reservation with MaxFailures 5 count 1..5 exactly once
// each, the fifth escalates, and every later one, whether it waited behind
// the escalation or started after it, gets ErrAlreadyInState with the
// MANUAL_REQUIRED row: none reports the RELEASE_PENDING row of its
// snapshot as an illegal transition.
func TestConcurrentCompensationFailures(t *testing.T) {
	t.Parallel()
	rb := raceBundle{tb: setup(t)}
	r := rb.reservation(t, 5, inventory.StatusReleasePending)
	const n = 10
	ctx, cancel := context.WithTimeout(rb.tb.ctx, 30*time.Second)
	defer cancel()
	type result struct {
		rec inventory.CompensationRecorded
		err error
	}
	out := make(chan result, n)
	start := make(chan struct{})
	for range n {
		go func() {
			<-start
			var res result
			res.err = inTx(ctx, rb.tb.pool, func(tx pgx.Tx) error {
				var err error
				res.rec, err = rb.tb.store.RecordCompensationFailure(ctx, tx, inventory.CompensationFailure{ReservationID: r.ReservationID, MaxFailures: 5})
				return err
			})
			out <- res
		}()
	}
	close(start)
	counts := map[int]bool{}
	for range n {
		var res result
		select {
		case res = <-out:
		case <-ctx.Done():
			t.Fatalf("%d of %d calls returned before the deadline", len(counts), n)
		}
		var te *inventory.Error
		switch {
		case res.err == nil:
			if counts[res.rec.Failures] || res.rec.Escalated != (res.rec.Failures == 5) {
				t.Fatalf("count %d twice, or escalated wrong: %+v", res.rec.Failures, res.rec)
			}
			counts[res.rec.Failures] = true
		case !errors.Is(res.err, inventory.ErrAlreadyInState) || !errors.As(res.err, &te) ||
			te.Current != inventory.StatusManualRequired || te.Reservation.Status != inventory.StatusManualRequired:
			t.Fatalf("loser: %v, want ErrAlreadyInState with the MANUAL_REQUIRED row", res.err)
		}
	}
	for i := 1; i <= 5; i++ {
		if !counts[i] {
			t.Fatalf("counts %v, want 1..5", counts)
		}
	}
	if got := rb.get(t, r.ReservationID); got.Status != inventory.StatusManualRequired {
		t.Fatalf("row %s, want MANUAL_REQUIRED", got.Status)
	}
}
