package order_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seckillkit/seckill/order"
)

// TestAuditFindsEveryKind breaks each invariant once (after dropping the
// constraints that would refuse the bad rows) and expects exactly the
// matching findings.
func TestAuditFindsEveryKind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if f, err := b.store.Audit(b.ctx, b.pool); err != nil || f != nil {
		t.Fatalf("empty schema: %v, %v", f, err)
	}
	b.create(t, newOrder(1)) // a healthy order
	paid := b.create(t, newOrder(2))
	if res, err := b.pay(newPayment(paid)); err != nil || res.Kind != order.PaymentPaid {
		t.Fatal(res, err)
	}
	if f, err := b.store.Audit(b.ctx, b.pool); err != nil || f != nil {
		t.Fatalf("healthy schema: %v, %v", f, err)
	}

	// Healthy rows the audit must pass over: a paid order later closed,
	// with its payment; a failed payment of another amount.
	closed := b.create(t, newOrder(3))
	if res, err := b.pay(newPayment(closed)); err != nil || res.Kind != order.PaymentPaid {
		t.Fatal(res, err)
	}
	b.exec(t, `UPDATE orders SET status = 50 WHERE order_id = $1`, closed.OrderID)
	failed := newPayment(closed)
	b.exec(t, `INSERT INTO payment_record (payment_id, payment_request_id, order_id, provider, provider_trade_no,
		amount, currency, status) VALUES ($1, gen_random_uuid(), $2, 'x', 'T-failed', 1, 'USD', 30)`, failed.PaymentID, closed.OrderID)
	unpaidFailed := b.create(t, newOrder(4)) // a failed payment on an unpaid order
	b.exec(t, `INSERT INTO payment_record (payment_id, payment_request_id, order_id, provider, provider_trade_no,
		amount, currency, status) VALUES (gen_random_uuid(), gen_random_uuid(), $1, 'x', 'T-failed-2', 9900, 'CNY', 30)`, unpaidFailed.OrderID)
	if f, err := b.store.Audit(b.ctx, b.pool); err != nil || f != nil {
		t.Fatalf("healthy closed order and failed payments: %v, %v", f, err)
	}

	b.exec(t, `ALTER TABLE orders DROP CONSTRAINT uq_orders_user_sku,
		DROP CONSTRAINT ck_orders_not_paid_and_cancelled, DROP CONSTRAINT ck_orders_amount,
		DROP CONSTRAINT ck_orders_cancelled_at, DROP CONSTRAINT ck_orders_status`)
	// Each of these breaks one condition of a finding alone.
	paidCancelledAt := b.create(t, newOrder(16)) // PAID with cancelled_at
	b.exec(t, `UPDATE orders SET status = 30, paid_at = now(), cancelled_at = now() WHERE order_id = $1`, paidCancelledAt.OrderID)
	paid40 := b.create(t, newOrder(17)) // CANCELLED without cancelled_at, paid
	b.exec(t, `UPDATE orders SET status = 40, paid_at = now(), cancel_reason = 'X' WHERE order_id = $1`, paid40.OrderID)
	unknown := b.create(t, newOrder(18)) // a status outside the model
	b.exec(t, `UPDATE orders SET status = 70, paid_at = now() WHERE order_id = $1`, unknown.OrderID)
	itemQty := b.create(t, newOrder(19)) // the line's quantity only
	b.exec(t, `UPDATE order_items SET quantity = 2, unit_price = unit_price / 2 WHERE order_id = $1`, itemQty.OrderID)
	currency := b.create(t, newOrder(20)) // the payment's currency only
	if res, err := b.pay(newPayment(currency)); err != nil || res.Kind != order.PaymentPaid {
		t.Fatal(res, err)
	}
	b.exec(t, `UPDATE payment_record SET currency = 'USD' WHERE order_id = $1`, currency.OrderID)
	closedUnpaid := b.create(t, newOrder(21)) // CLOSED after a cancel, with a succeeded payment
	b.exec(t, `UPDATE orders SET status = 50, cancelled_at = now(), cancel_reason = 'X' WHERE order_id = $1`, closedUnpaid.OrderID)
	b.exec(t, `INSERT INTO payment_record (payment_id, payment_request_id, order_id, provider, provider_trade_no,
		amount, currency, status, paid_at) VALUES (gen_random_uuid(), gen_random_uuid(), $1, 'x', 'T-closed', 9900, 'CNY', 20, now())`, closedUnpaid.OrderID)
	dup1, dup2 := b.create(t, newOrder(10)), b.create(t, newOrder(10))
	both := b.create(t, newOrder(11))
	b.exec(t, `UPDATE orders SET status = 40, cancelled_at = now(), cancel_reason = 'X', paid_at = now() WHERE order_id = $1`, both.OrderID)
	stamps := b.create(t, newOrder(12))
	b.exec(t, `UPDATE orders SET status = 20, paid_at = now() WHERE order_id = $1`, stamps.OrderID)
	total := b.create(t, newOrder(13))
	b.exec(t, `UPDATE orders SET total_amount = total_amount + 1 WHERE order_id = $1`, total.OrderID)
	noItems := b.create(t, newOrder(14))
	b.exec(t, `DELETE FROM order_items WHERE order_id = $1`, noItems.OrderID)
	unpaid := b.create(t, newOrder(15))
	b.exec(t, `INSERT INTO payment_record (payment_id, payment_request_id, order_id, provider, provider_trade_no,
		amount, currency, status, paid_at) VALUES (gen_random_uuid(), gen_random_uuid(), $1, 'x', 'T-unpaid', 9900, 'CNY', 20, now())`, unpaid.OrderID)
	b.exec(t, `UPDATE payment_record SET amount = amount - 1 WHERE order_id = $1`, paid.OrderID)

	got := findingLines(t)(b.store.Audit(b.ctx, b.pool))
	want := []string{
		fmt.Sprintf("DUPLICATE_USER_ORDER %d", min(dup1.OrderID, dup2.OrderID)),
		fmt.Sprintf("ITEMS_TOTAL %d", noItems.OrderID),
		fmt.Sprintf("ITEMS_TOTAL %d", total.OrderID),
		fmt.Sprintf("PAID_AND_CANCELLED %d", both.OrderID),
		fmt.Sprintf("PAYMENT_AMOUNT %d", paid.OrderID),
		fmt.Sprintf("PAYMENT_ON_UNPAID_ORDER %d", unpaid.OrderID),
		fmt.Sprintf("STATUS_TIMESTAMPS %d", both.OrderID),
		fmt.Sprintf("STATUS_TIMESTAMPS %d", stamps.OrderID),
		fmt.Sprintf("TOTAL_AMOUNT %d", total.OrderID),
		fmt.Sprintf("PAID_AND_CANCELLED %d", paidCancelledAt.OrderID),
		fmt.Sprintf("STATUS_TIMESTAMPS %d", paidCancelledAt.OrderID),
		fmt.Sprintf("PAID_AND_CANCELLED %d", paid40.OrderID),
		fmt.Sprintf("STATUS_TIMESTAMPS %d", paid40.OrderID),
		fmt.Sprintf("STATUS_TIMESTAMPS %d", unknown.OrderID),
		fmt.Sprintf("ITEMS_TOTAL %d", itemQty.OrderID),
		fmt.Sprintf("PAYMENT_AMOUNT %d", currency.OrderID),
		fmt.Sprintf("PAYMENT_ON_UNPAID_ORDER %d", closedUnpaid.OrderID),
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("findings\n got %v\nwant %v", got, want)
	}

	// AuditSince from before every row finds the same.
	if got := auditSince(t, b, time.Time{}); !slices.Equal(got, want) {
		t.Fatalf("AuditSince(zero)\n got %v\nwant %v", got, want)
	}
	// Every row changed before since: nothing.
	b.exec(t, `UPDATE orders SET updated_at = updated_at - interval '1 day'`)
	b.exec(t, `UPDATE payment_record SET updated_at = updated_at - interval '1 day'`)
	var since time.Time
	if err := b.pool.QueryRow(b.ctx, `SELECT date_trunc('second', now()) - interval '1 hour'`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	if got := auditSince(t, b, since); got != nil {
		t.Fatalf("AuditSince with every row changed before since: %v", got)
	}
	// Rows changed since, each alone: an order (one of a duplicate pair),
	// a payment whose order did not change, an order whose payment did not
	// change, an order changed at since exactly; one changed a microsecond
	// before since is passed over.
	for _, id := range []int64{dup2.OrderID, stamps.OrderID, noItems.OrderID, both.OrderID, total.OrderID, currency.OrderID} {
		b.exec(t, `UPDATE orders SET updated_at = statement_timestamp() WHERE order_id = $1`, id)
	}
	b.exec(t, `UPDATE payment_record SET updated_at = statement_timestamp() WHERE order_id = $1`, unpaid.OrderID)
	b.exec(t, `UPDATE orders SET updated_at = $2 WHERE order_id = $1`, paid40.OrderID, since)
	b.exec(t, `UPDATE orders SET updated_at = $2::timestamptz - interval '1 microsecond' WHERE order_id = $1`, unknown.OrderID, since)
	want = []string{
		fmt.Sprintf("DUPLICATE_USER_ORDER %d", min(dup1.OrderID, dup2.OrderID)),
		fmt.Sprintf("ITEMS_TOTAL %d", noItems.OrderID),
		fmt.Sprintf("ITEMS_TOTAL %d", total.OrderID),
		fmt.Sprintf("PAID_AND_CANCELLED %d", both.OrderID),
		fmt.Sprintf("PAYMENT_AMOUNT %d", currency.OrderID),
		fmt.Sprintf("PAYMENT_ON_UNPAID_ORDER %d", unpaid.OrderID),
		fmt.Sprintf("STATUS_TIMESTAMPS %d", both.OrderID),
		fmt.Sprintf("STATUS_TIMESTAMPS %d", stamps.OrderID),
		fmt.Sprintf("TOTAL_AMOUNT %d", total.OrderID),
		fmt.Sprintf("PAID_AND_CANCELLED %d", paid40.OrderID),
		fmt.Sprintf("STATUS_TIMESTAMPS %d", paid40.OrderID),
	}
	slices.Sort(want)
	if got := auditSince(t, b, since); !slices.Equal(got, want) {
		t.Fatalf("AuditSince over the rows changed since\n got %v\nwant %v", got, want)
	}
	if _, err := b.store.AuditSince(b.ctx, nil, since); err == nil {
		t.Fatal("AuditSince with a nil Querier: no error")
	}
}

// auditSince runs Store.AuditSince; see findingLines.
func auditSince(t *testing.T, b testBundle, since time.Time) []string {
	t.Helper()
	return findingLines(t)(b.store.AuditSince(b.ctx, b.pool, since))
}

// findingLines returns an audit's findings as sorted "KIND order" lines;
// it fails on an error and on a finding without a detail.
func findingLines(t *testing.T) func([]order.Finding, error) []string {
	return func(findings []order.Finding, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range findings {
			got = append(got, fmt.Sprintf("%s %d", f.Kind, f.OrderID))
			if f.Detail == "" {
				t.Errorf("finding without detail: %v", f)
			}
		}
		slices.Sort(got)
		return got
	}
}
