package flow_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inventory"
)

// releaseApplied plays the FRONTDOOR_RELEASE consumer after the front door
// applied the release: RELEASE_PENDING → RELEASED; a duplicate changes
// nothing.
func releaseApplied(t *testing.T, b bundle, id uuid.UUID) {
	t.Helper()
	for i, want := range []string{flow.ReleaseApplied, flow.ReleaseAlreadyApplied} {
		var got string
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			got, err = b.s.FrontDoorReleased(b.ctx, tx, id)
			return err
		})
		if err != nil || got != want {
			t.Fatalf("release %d of %s: %q, %v; want %q", i+1, id, got, err, want)
		}
	}
	r, err := b.s.Inventory.GetReservation(b.ctx, b.pool, id)
	if err != nil || r.Status != inventory.StatusReleased {
		t.Fatalf("after the front door's release: %+v, %v; want RELEASED", r, err)
	}
}

// TestFrontDoorReleaseFailuresEscalate: a cancelled order's reservation
// waits in RELEASE_PENDING; each failed front-door release is counted,
// and the max-th moves it to MANUAL_REQUIRED, which the reconciliation
// names. A later success or failure changes nothing. A rejected
// reservation (final) is left alone by both.
func TestFrontDoorReleaseFailuresEscalate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 1, 1)
	m, sold := b.msg(1, 0), b.msg(2, 0)
	m.OrderExpireAt = time.Now().Add(-time.Second)
	if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, m)); err != nil || out.Code != flow.CodeOrderCreated {
		t.Fatalf("order: %+v, %v", out, err)
	}
	if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, sold)); err != nil || out.Code == flow.CodeOrderCreated {
		t.Fatalf("second order on one unit: %+v, %v; want a rejection", out, err)
	}
	if n, err := b.s.CancelExpired(b.ctx, 10); err != nil || n != 1 {
		t.Fatalf("cancel: %d, %v", n, err)
	}
	const max = 3
	for i := 1; i <= max; i++ {
		esc, err := b.s.FrontDoorReleaseFailed(b.ctx, b.pool, m.ReservationID, max)
		if err != nil || esc != (i == max) {
			t.Fatalf("failure %d: escalated %v, %v; want %v", i, esc, err, i == max)
		}
		r, err := b.s.Inventory.GetReservation(b.ctx, b.pool, m.ReservationID)
		want := inventory.StatusReleasePending
		if i == max {
			want = inventory.StatusManualRequired
		}
		if err != nil || r.Status != want {
			t.Fatalf("after failure %d: %+v, %v; want %s", i, r, err, want)
		}
	}
	if esc, err := b.s.FrontDoorReleaseFailed(b.ctx, b.pool, m.ReservationID, max); err != nil || !esc {
		t.Fatalf("failure after the escalation: %v, %v; want escalated, nothing written", esc, err)
	}
	var got string
	if err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		got, err = b.s.FrontDoorReleased(b.ctx, tx, m.ReservationID)
		return err
	}); err != nil || got != flow.ReleaseManualRequired {
		t.Fatalf("a late success on MANUAL_REQUIRED: %q, %v", got, err)
	}
	r, err := b.s.Inventory.GetReservation(b.ctx, b.pool, m.ReservationID)
	if err != nil || r.Status != inventory.StatusManualRequired || r.FailureCode != "FRONTDOOR_RELEASE_FAILED" {
		t.Fatalf("final: %+v, %v; want MANUAL_REQUIRED, FRONTDOOR_RELEASE_FAILED", r, err)
	}

	// The rejected reservation: nothing to count, nothing to move.
	if esc, err := b.s.FrontDoorReleaseFailed(b.ctx, b.pool, sold.ReservationID, max); err != nil || esc {
		t.Fatalf("failure on a rejected reservation: %v, %v", esc, err)
	}
	if err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		got, err = b.s.FrontDoorReleased(b.ctx, tx, sold.ReservationID)
		return err
	}); err != nil || got != flow.ReleaseNothingToMove {
		t.Fatalf("release of a rejected reservation: %q, %v", got, err)
	}
	if r, err := b.s.Inventory.GetReservation(b.ctx, b.pool, sold.ReservationID); err != nil || r.Status != inventory.StatusRejected {
		t.Fatalf("rejected reservation: %+v, %v", r, err)
	}

	rec, err := b.s.Reconcile(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := find(rec, "reservations MANUAL_REQUIRED"); d.Have != 1 || d.Class != flow.ClassManualRequired {
		t.Fatalf("reconciliation: %+v\n%s", d, rec)
	}
	checks, err := b.s.Audit(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		if !c.Pass && c.Invariant != "5" { // 5: the events are not published here (no relay)
			t.Errorf("audit FAIL [%s] %s: %s", c.Invariant, c.Name, c.Detail)
		}
	}
}
