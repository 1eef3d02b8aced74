package flow_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inventory"
)

// A paused sale is refused by the database itself: the order message is
// rejected (NOT_ON_SALE) and compensated in its transaction; the change is
// announced with a SALE_STATUS_CHANGED event; after resuming, orders go
// through again.
func TestPausedSaleRejectsOrders(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 10, 2)
	if _, err := b.s.SetSaleStatus(b.ctx, inventory.SalePaused, time.Time{}, time.Time{}, "ops:bob", "payment provider down"); err != nil {
		t.Fatal(err)
	}
	m := b.msg(1, 0)
	out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, m))
	if err != nil || out.Code != flow.CodeNotOnSale || out.OrderID != 0 {
		t.Fatalf("order while paused = %+v, %v; want %s", out, err, flow.CodeNotOnSale)
	}
	r, err := b.s.Inventory.GetReservation(b.ctx, b.pool, m.ReservationID)
	if err != nil || r.Status != inventory.StatusRejected || r.FailureCode != flow.CodeNotOnSale {
		t.Fatalf("reservation = %+v, %v", r, err)
	}
	if n := b.count(t, "event_outbox", "tag = $1", flow.TagFrontDoorRelease); n != 1 {
		t.Fatalf("%d compensation events, want 1", n)
	}
	if b.allocated(t) != 0 || b.count(t, "orders", "true") != 0 {
		t.Fatal("a paused sale sold")
	}
	now := time.Now()
	if _, err := b.s.SetSaleStatus(b.ctx, inventory.SaleOnSale, now.Add(-time.Minute), now.Add(time.Hour), "ops:bob", "provider back"); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, "event_outbox", "tag = $1", flow.TagSaleStatus); n != 2 {
		t.Fatalf("%d sale events, want 2", n)
	}
	if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, b.msg(2, 1))); err != nil || out.Code != flow.CodeOrderCreated {
		t.Fatalf("order after resuming = %+v, %v", out, err)
	}
	b.auditClean(t)
}

// A reservation recorded ahead of its order message and never ordered is
// expired by the sweeper with its front-door release in the same
// transaction; the late message is answered RESERVATION_EXPIRED and
// creates nothing.
func TestExpiredReservationSweptAndLateMessageAnswered(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 5, 1)
	m := b.msg(1, 0)
	m.ReservedAt, m.ReservationTo = time.Now().Add(-time.Hour), time.Now().Add(-time.Minute)
	err := pgx.BeginTxFunc(b.ctx, b.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		_, err := b.s.Inventory.AcquireReservation(b.ctx, tx, inventory.NewReservation{
			Request:    seckill.Request{ReservationID: m.ReservationID, RequestID: m.RequestID, MessageID: uuid.Must(uuid.NewV7()), ActivityID: m.ActivityID, SKUID: m.SKUID, UserID: m.UserID, Bucket: m.Bucket, Quantity: 1},
			ReservedAt: m.ReservedAt,
			ExpiresAt:  m.ReservationTo,
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := b.s.ExpireReservations(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("sweep = %d, %v", n, err)
	}
	if n, err := b.s.ExpireReservations(b.ctx, 100); err != nil || n != 0 {
		t.Fatalf("second sweep = %d, %v", n, err)
	}
	if n := b.count(t, "event_outbox", "dedup_key = $1", flow.TagFrontDoorRelease+":"+m.ReservationID.String()); n != 1 {
		t.Fatalf("%d front-door release events, want 1", n)
	}
	out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, m))
	if err != nil || out.Code != "RESERVATION_EXPIRED" || out.OrderID != 0 {
		t.Fatalf("late message = %+v, %v", out, err)
	}
	if b.count(t, "orders", "true") != 0 || b.allocated(t) != 0 {
		t.Fatal("an expired reservation was ordered")
	}
	b.auditClean(t)
}
