package flow_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
)

// ReconcileWindow over the whole history gives Reconcile's reports and
// differences; two windows split at a moment between two batches of
// orders add up to it, each reporting only its own orders; and damage is
// named in the window of the order it belongs to, and only there.
func TestReconcileWindowMatchesTheWholeAndSplits(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 5, 1)
	place := func(m flow.OrderMessage) {
		t.Helper()
		if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, m)); err != nil || out.Code != flow.CodeOrderCreated {
			t.Fatalf("order %d: %+v, %v", m.OrderID, out, err)
		}
	}
	pay := func(m flow.OrderMessage, trade string) {
		t.Helper()
		if _, err := b.s.Pay(b.ctx, flow.Payment{OrderID: m.OrderID, ProviderTradeNo: trade, Amount: m.UnitPrice, Currency: "CNY"}); err != nil {
			t.Fatal(err)
		}
	}

	// The first batch: paid, cancelled (with its release applied and a
	// payment after the cancel: a refund), created.
	paid, cancelled, created := b.msg(1, 0), b.msg(2, 0), b.msg(3, 0)
	cancelled.OrderExpireAt = time.Now().Add(-time.Second)
	for _, m := range []flow.OrderMessage{paid, cancelled, created} {
		place(m)
	}
	if n, err := b.s.CancelExpired(b.ctx, 10); err != nil || n != 1 {
		t.Fatalf("cancel: %d, %v", n, err)
	}
	releaseApplied(t, b, cancelled.ReservationID)
	pay(paid, "T1")
	pay(cancelled, "T2")
	split := dbNow(t, b)
	// The second batch: one paid, one created.
	fourth, fifth := b.msg(4, 0), b.msg(5, 0)
	place(fourth)
	place(fifth)
	pay(fourth, "T4")
	far := dbNow(t, b).Add(time.Hour)

	whole, err := b.s.Reconcile(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	all := reconcileWindow(t, b, time.Time{}, far)
	t.Logf("whole:\n%s\nwindow over all of it:\n%s", whole, all)
	if !reflect.DeepEqual(all.Orders, whole.Orders) {
		t.Errorf("orders: window %+v, whole %+v", all.Orders, whole.Orders)
	}
	if got, want := stockMoves(all), stockMoves(whole); !reflect.DeepEqual(got, want) || len(got) != 2 {
		t.Errorf("ALLOCATE and RELEASE rows: window %v, whole %v", got, want)
	}
	if got, want := checkedEvents(all), checkedEvents(whole); !reflect.DeepEqual(got, want) || len(got) != 4 {
		t.Errorf("events: window %v, whole %v", got, want)
	}
	if !reflect.DeepEqual(all.Differences, whole.Differences) || all.ReleasePending != whole.ReleasePending || all.ManualRequired != whole.ManualRequired {
		t.Errorf("differences: window %+v, whole %+v", all.Differences, whole.Differences)
	}
	allMatch(t, "whole", whole)

	first, second := reconcileWindow(t, b, time.Time{}, split), reconcileWindow(t, b, split, far)
	allMatch(t, "first window", first)
	allMatch(t, "second window", second)
	if got, want := statusCounts(first), map[order.Status]int64{order.StatusPaid: 1, order.StatusCancelled: 1, order.StatusCreated: 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("first window's orders: %v, want %v", got, want)
	}
	if got, want := statusCounts(second), map[order.Status]int64{order.StatusPaid: 1, order.StatusCreated: 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("second window's orders: %v, want %v", got, want)
	}
	if got := stockMoves(second); !reflect.DeepEqual(got, map[string][2]int64{"ALLOCATE": {2, 2}}) {
		t.Errorf("second window's ledger: %v", got)
	}
	if got := checkedEvents(second); !reflect.DeepEqual(got, map[string]int64{
		flow.TagOrderCreated + " " + outbox.StatusPending.String(): 2, flow.TagOrderPaid + " " + outbox.StatusPending.String(): 1}) {
		t.Errorf("second window's events: %v", got)
	}
	if _, err := b.s.ReconcileWindow(b.ctx, split, split); err == nil {
		t.Error("an empty window was accepted")
	}
	// In the caller's transaction: the same reports in Repeatable Read,
	// refused in Read Committed (two snapshots would not add up).
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.ReadCommitted} {
		err := pgx.BeginTxFunc(b.ctx, b.pool, pgx.TxOptions{IsoLevel: iso, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			got, err := b.s.ReconcileWindowTx(b.ctx, tx, split, far)
			if err == nil && !reflect.DeepEqual(got, second) {
				t.Errorf("ReconcileWindowTx in %s:\n%s\nwant\n%s", iso, got, second)
			}
			return err
		})
		if want := iso == pgx.ReadCommitted; errors.Is(err, flow.ErrAuditSnapshot) != want || (err != nil && !want) {
			t.Errorf("ReconcileWindowTx in %s: %v", iso, err)
		}
	}
	if err := pgx.BeginTxFunc(b.ctx, b.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		_, err := b.s.ReconcileWindowTx(b.ctx, tx, far, split)
		return err
	}); err == nil {
		t.Error("ReconcileWindowTx accepted a window that ends before it starts")
	}

	// The third order deleted: its ALLOCATE row is left without an order,
	// and its ORDER_CREATED event without its state change, which only the
	// whole reconciliation sees.
	for _, sql := range []string{`DELETE FROM %s.order_items WHERE order_id = $1`, `DELETE FROM %s.orders WHERE order_id = $1`} {
		if tag, err := b.pool.Exec(b.ctx, fmtSchema(sql, b.s.Schema), created.OrderID); err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("%s: %v, %d rows", sql, err, tag.RowsAffected())
		}
	}
	stock := "allocated stock (ALLOCATE - RELEASE) vs live orders"
	createdEvents := flow.TagOrderCreated + " events vs the state changes that imply them"
	whole, err = b.s.Reconcile(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := find(whole, createdEvents); d.Class != flow.ClassEventsWithoutState {
		t.Errorf("whole: the deleted order's event is one without its state change: %+v", d)
	}
	if d := find(whole, stock); d.Class != flow.ClassStockWithoutOrder {
		t.Errorf("whole: the deleted order's stock: %+v", d)
	}
	// And a lost ORDER_CREATED event of the second batch.
	if tag, err := b.pool.Exec(b.ctx, fmtSchema(`DELETE FROM %s.event_outbox WHERE dedup_key = 'ORDER_CREATED:' || $1`, b.s.Schema),
		itoa(fourth.OrderID)); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("delete the event: %v, %d rows", err, tag.RowsAffected())
	}
	first, second = reconcileWindow(t, b, time.Time{}, split), reconcileWindow(t, b, split, far)
	if d := find(first, stock); d.Class != flow.ClassStockWithoutOrder || d.Have != 2 || d.Expected != 1 {
		t.Errorf("first window, the deleted order's stock: %+v", d)
	}
	if d := find(first, createdEvents); d.Class != flow.ClassMatch || d.Have != 2 {
		t.Errorf("first window, the ORDER_CREATED events of its two orders: %+v", d)
	}
	if d := find(second, createdEvents); d.Class != flow.ClassEventsMissing || d.Have != 1 || d.Expected != 2 {
		t.Errorf("second window, the lost event: %+v", d)
	}
	if d := find(second, stock); d.Class != flow.ClassMatch {
		t.Errorf("second window, its stock: %+v", d)
	}
}

func reconcileWindow(t *testing.T, b bundle, from, to time.Time) flow.Reconciliation {
	t.Helper()
	rec, err := b.s.ReconcileWindow(b.ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.From.Equal(from) || !rec.To.Equal(to) {
		t.Fatalf("window %v to %v reported as %v to %v", from, to, rec.From, rec.To)
	}
	return rec
}

func allMatch(t *testing.T, what string, rec flow.Reconciliation) {
	t.Helper()
	if len(rec.Differences) == 0 {
		t.Errorf("%s: no differences computed", what)
	}
	for _, d := range rec.Differences {
		if d.Class != flow.ClassMatch {
			t.Errorf("%s: %s: %d vs %d, %s", what, d.Name, d.Have, d.Expected, d.Class)
		}
	}
}

// stockMoves is the ALLOCATE and RELEASE rows of a reconciliation: rows
// and units per type.
func stockMoves(rec flow.Reconciliation) map[string][2]int64 {
	m := map[string][2]int64{}
	for _, l := range rec.Ledger {
		if l.Type == "ALLOCATE" || l.Type == "RELEASE" {
			m[l.Type] = [2]int64{l.Rows, l.Quantity}
		}
	}
	return m
}

// checkedEvents is the events of the four tags the reconciliation checks,
// per tag and status.
func checkedEvents(rec flow.Reconciliation) map[string]int64 {
	m := map[string]int64{}
	for _, e := range rec.Events {
		switch e.Tag {
		case flow.TagOrderCreated, flow.TagOrderPaid, flow.TagFrontDoorRelease, flow.TagRefundRequested:
			m[e.Tag+" "+e.Status.String()] += e.Events
		}
	}
	return m
}

func statusCounts(rec flow.Reconciliation) map[order.Status]int64 {
	m := map[order.Status]int64{}
	for _, o := range rec.Orders {
		m[o.Status] = o.Orders
	}
	return m
}
