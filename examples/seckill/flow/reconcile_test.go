package flow_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/order"
)

// The three reconciliation reports agree after a run with every kind of
// change, and each kind of gap gets its name: a lost release (cancelled
// order whose stock is still held) and a lost event.
func TestReconcileClassifiesDifferences(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 3, 1)
	paid, cancelled, created, fourth := b.msg(1, 0), b.msg(2, 0), b.msg(3, 0), b.msg(4, 0)
	cancelled.OrderExpireAt = time.Now().Add(-time.Second)
	for i, m := range []flow.OrderMessage{paid, cancelled, created} {
		if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, m)); err != nil || out.Code != flow.CodeOrderCreated {
			t.Fatalf("order %d: %+v, %v", i, out, err)
		}
	}
	if n, err := b.s.CancelExpired(b.ctx, 10); err != nil || n != 1 {
		t.Fatalf("cancel: %d, %v", n, err)
	}
	rec, err := b.s.Reconcile(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := find(rec, "reservations RELEASE_PENDING"); d.Have != 1 || d.Class != flow.ClassReleaseInFlight {
		t.Fatalf("before the front door applied the release: %+v", d)
	}
	releaseApplied(t, b, cancelled.ReservationID)
	if _, err := b.s.Pay(b.ctx, flow.Payment{OrderID: paid.OrderID, ProviderTradeNo: "T1", Amount: paid.UnitPrice, Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.s.Pay(b.ctx, flow.Payment{OrderID: cancelled.OrderID, ProviderTradeNo: "T2", Amount: cancelled.UnitPrice, Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, fourth)); err != nil || out.Code != flow.CodeOrderCreated {
		t.Fatalf("fourth order takes the released unit: %+v, %v", out, err)
	}

	rec, err = b.s.Reconcile(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rec)
	byStatus := map[order.Status]int64{}
	for _, o := range rec.Orders {
		byStatus[o.Status] = o.Quantity
	}
	byType := map[string]int64{}
	for _, l := range rec.Ledger {
		byType[l.Type] = l.Quantity
	}
	if byStatus[order.StatusPaid] != 1 || byStatus[order.StatusCreated] != 2 || byStatus[order.StatusCancelled] != 1 ||
		byType["ALLOCATE"] != 4 || byType["RELEASE"] != 1 || byType["PROVISION"] != 3 {
		t.Fatalf("reports: orders %v, ledger %v", byStatus, byType)
	}
	classes := func(rec flow.Reconciliation) map[string]string {
		m := map[string]string{}
		for _, d := range rec.Differences {
			m[d.Name] = d.Class
		}
		return m
	}
	for name, class := range classes(rec) {
		if class != flow.ClassMatch {
			t.Errorf("clean run: %s: %s", name, class)
		}
	}

	// A lost release and a lost ORDER_PAID event.
	for sql, arg := range map[string]string{
		`DELETE FROM %s.inventory_ledger WHERE idempotency_key = 'RELEASE:' || $1`: cancelled.ReservationID.String(),
		`DELETE FROM %s.event_outbox WHERE dedup_key = 'ORDER_PAID:' || $1`:        itoa(paid.OrderID),
	} {
		if tag, err := b.pool.Exec(b.ctx, fmtSchema(sql, b.s.Schema), arg); err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("%s: %v, %d rows", sql, err, tag.RowsAffected())
		}
	}
	rec, err = b.s.Reconcile(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"allocated stock (ALLOCATE - RELEASE) vs live orders":                     flow.ClassStockWithoutOrder,
		"released stock (RELEASE) vs cancelled orders":                            flow.ClassCancelNoRelease,
		flow.TagOrderCreated + " events vs the state changes that imply them":     flow.ClassMatch,
		flow.TagOrderPaid + " events vs the state changes that imply them":        flow.ClassEventsMissing,
		flow.TagFrontDoorRelease + " events vs the state changes that imply them": flow.ClassMatch,
		flow.TagRefundRequested + " events vs the state changes that imply them":  flow.ClassMatch,
	}
	got := classes(rec)
	for name, class := range want {
		if got[name] != class {
			t.Errorf("after the losses: %s: %q, want %q", name, got[name], class)
		}
	}
}

func fmtSchema(sql, schema string) string {
	return fmt.Sprintf(sql, pgx.Identifier{schema}.Sanitize())
}

func find(rec flow.Reconciliation, name string) flow.Difference {
	for _, d := range rec.Differences {
		if d.Name == name {
			return d
		}
	}
	return flow.Difference{}
}
