package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/inventory"
)

func (tb testBundle) expire(t *testing.T, limit int) []inventory.Reservation {
	t.Helper()
	var out []inventory.Reservation
	if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		var err error
		out, err = tb.store.ExpireReservations(tb.ctx, tx, limit)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// pastDue returns a recorded PENDING_DB reservation that expired a minute
// ago.
func (tb testBundle) pastDue(t *testing.T) inventory.NewReservation {
	t.Helper()
	r := tb.newReservation(1, 1, 0)
	r.ReservedAt, r.ExpiresAt = time.Now().Add(-time.Hour), time.Now().Add(-time.Minute)
	tb.insertReservations(t, []inventory.NewReservation{r})
	return r
}

// The sweeper expires PENDING_DB reservations past their expiry, oldest
// first and in batches, and nothing else: not one still valid, not an
// ORDERED one past its expiry.
func TestExpireReservations(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 1)
	var due []inventory.NewReservation
	for range 3 {
		due = append(due, tb.pastDue(t))
	}
	valid := tb.reserved(t, 1, 1, 0, 1)
	ordered := tb.pastDue(t)
	if _, err := tb.store.TransitionReservation(tb.ctx, tb.pool, inventory.Transition{ReservationID: ordered.ReservationID, To: inventory.StatusOrdered, OrderID: 5}); err != nil {
		t.Fatal(err)
	}

	first := tb.expire(t, 2)
	second := tb.expire(t, 2)
	if len(first) != 2 || len(second) != 1 || len(tb.expire(t, 2)) != 0 {
		t.Fatalf("sweeps expired %d, %d; want 2, 1, then none", len(first), len(second))
	}
	got := map[any]bool{}
	for _, r := range append(first, second...) {
		if r.Status != inventory.StatusExpired || r.FailureCode != inventory.DefaultExpireCode || r.Version != 1 {
			t.Errorf("expired %+v", r)
		}
		got[r.ReservationID] = true
	}
	for _, r := range due {
		if !got[r.ReservationID] {
			t.Errorf("due reservation %s not expired", r.ReservationID)
		}
	}
	for id, want := range map[any]inventory.ReservationStatus{valid.ReservationID: inventory.StatusPendingDB, ordered.ReservationID: inventory.StatusOrdered} {
		var st int16
		if err := tb.pool.QueryRow(tb.ctx, `SELECT status FROM `+tb.table("inventory_reservation")+` WHERE reservation_id = $1`, id).Scan(&st); err != nil || inventory.ReservationStatus(st) != want {
			t.Errorf("reservation %v: %d, %v; want %s", id, st, err, want)
		}
	}
	if _, err := tb.store.ExpireReservations(tb.ctx, nil, 1); !errors.Is(err, inventory.ErrInvalidArgument) {
		t.Errorf("nil tx: %v", err)
	}
	for limit, ok := range map[int]bool{0: false, 1: true, 10_000: true, 10_001: false} {
		err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error { _, err := tb.store.ExpireReservations(tb.ctx, tx, limit); return err })
		if ok && err != nil || !ok && !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Errorf("limit %d: %v; want it accepted: %v", limit, err, ok)
		}
	}
}

// The sweeper and a late order message race for one expired reservation.
// The order transaction holding the reservation lock wins: the sweeper
// skips the row, and once it is ORDERED never expires it. The sweeper
// holding it wins: the order transaction waits, then finds EXPIRED — the
// transition to ORDERED is illegal and the allocation refused.
func TestExpireRacesLateOrderMessage(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 1)

	// The order first.
	r := tb.pastDue(t)
	order, err := tb.pool.BeginTx(tb.ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer order.Rollback(context.WithoutCancel(tb.ctx))
	acq, err := tb.store.AcquireReservation(tb.ctx, order, r)
	if err != nil || acq.Created || acq.Reservation.Status != inventory.StatusPendingDB {
		t.Fatalf("late message acquire: %+v, %v", acq, err)
	}
	// The sweeper must pass over the locked row, not wait for it.
	var skipped []inventory.Reservation
	stepCtx := testwait.Context(t, tb.ctx, testwait.Step)
	if err := inTx(stepCtx, tb.pool, func(tx pgx.Tx) error {
		var err error
		skipped, err = tb.store.ExpireReservations(stepCtx, tx, 10)
		return err
	}); err != nil {
		t.Fatalf("the sweep beside the order transaction holding the reservation (it must skip the row, not wait for it): %v", err)
	}
	if len(skipped) != 0 {
		t.Fatalf("the sweeper expired a reservation being ordered: %+v", skipped)
	}
	if _, err := tb.store.AllocateBucket(tb.ctx, order, acq.Reservation.Allocation(9, r.MessageID)); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.store.TransitionReservation(tb.ctx, order, inventory.Transition{ReservationID: r.ReservationID, To: inventory.StatusOrdered, OrderID: 9}); err != nil {
		t.Fatal(err)
	}
	if err := order.Commit(tb.ctx); err != nil {
		t.Fatal(err)
	}
	if got := tb.expire(t, 10); len(got) != 0 {
		t.Fatalf("the sweeper expired an ORDERED reservation: %+v", got)
	}

	// The sweeper first.
	r2 := tb.pastDue(t)
	sweep, err := tb.pool.BeginTx(tb.ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer sweep.Rollback(context.WithoutCancel(tb.ctx))
	if got, err := tb.store.ExpireReservations(tb.ctx, sweep, 10); err != nil || len(got) != 1 || got[0].ReservationID != r2.ReservationID {
		t.Fatalf("sweep: %+v, %v", got, err)
	}
	type result struct {
		acq       inventory.Acquired
		move, all error
	}
	done := make(chan result, 1)
	go func() {
		var res result
		_ = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			var err error
			if res.acq, err = tb.store.AcquireReservation(tb.ctx, tx, r2); err != nil {
				return err
			}
			_, res.move = tb.store.TransitionReservation(tb.ctx, tx, inventory.Transition{ReservationID: r2.ReservationID, To: inventory.StatusOrdered, OrderID: 10})
			_, res.all = tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(r2))
			return nil
		})
		done <- res
	}()
	tb.waitLockWaiters(t, 1)
	if err := sweep.Commit(tb.ctx); err != nil {
		t.Fatal(err)
	}
	res := testwait.Recv(t, done, "the blocked call to return")
	var te *inventory.Error
	var me *inventory.Error
	if res.acq.Reservation.Status != inventory.StatusExpired || !errors.As(res.move, &te) || te.Current != inventory.StatusExpired ||
		!errors.As(res.all, &me) || me.Field != "status" {
		t.Fatalf("late message after the sweep: %+v, %v, %v", res.acq.Reservation.Status, res.move, res.all)
	}
	if tot := tb.totals(t, 1, 1); tot.Allocated != 1 {
		t.Fatalf("totals %+v: only the first order holds stock", tot)
	}
	tb.auditClean(t, 1, 1)
}

// The sweeper takes and locks only the reservations it expires: an ORDERED
// reservation past its expiry neither takes a place of the batch nor is
// locked, and neither is a PENDING_DB one still valid (an order message for
// it must not wait for a sweep).
func TestExpireTakesOnlyDueReservations(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 1)
	ordered := tb.newReservation(1, 1, 0)
	ordered.ReservedAt, ordered.ExpiresAt = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	tb.insertReservations(t, []inventory.NewReservation{ordered})
	if _, err := tb.store.TransitionReservation(tb.ctx, tb.pool, inventory.Transition{ReservationID: ordered.ReservationID, To: inventory.StatusOrdered, OrderID: 5}); err != nil {
		t.Fatal(err)
	}
	first := tb.pastDue(t)
	if got := tb.expire(t, 1); len(got) != 1 || got[0].ReservationID != first.ReservationID {
		t.Fatalf("sweep of one: %+v; want the due reservation %s, not the older ORDERED one", got, first.ReservationID)
	}

	second := tb.pastDue(t)
	valid := tb.reserved(t, 1, 1, 0, 1)
	sweep, err := tb.pool.BeginTx(tb.ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer sweep.Rollback(context.WithoutCancel(tb.ctx))
	if got, err := tb.store.ExpireReservations(tb.ctx, sweep, 10); err != nil || len(got) != 1 || got[0].ReservationID != second.ReservationID {
		t.Fatalf("sweep: %+v, %v; want the due reservation %s", got, err, second.ReservationID)
	}
	for name, id := range map[string]any{"ORDERED past its expiry": ordered.ReservationID, "still valid": valid.ReservationID} {
		var one int
		err := tb.pool.QueryRow(tb.ctx, `SELECT 1 FROM `+tb.table("inventory_reservation")+
			` WHERE reservation_id = $1 FOR UPDATE NOWAIT`, id).Scan(&one)
		if err != nil {
			t.Errorf("the reservation %s is locked by the open sweep: %v", name, err)
		}
	}
	if err := sweep.Commit(tb.ctx); err != nil {
		t.Fatal(err)
	}
}
