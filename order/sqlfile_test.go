package order

import (
	"strings"
	"testing"
)

// cols returns the orders column list, each name prefixed (e.g. "o."), in
// the order scanOrder reads it.
func cols(prefix string) string {
	var b strings.Builder
	for i, c := range orderColumns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(prefix)
		b.WriteString(c)
	}
	return b.String()
}

// TestSharedSQLFragments checks that the statements written out in full
// in sql/*.sql carry identical copies of the parts they share, and that
// every statement returning an order lists its columns as scanOrder reads
// them.
func TestSharedSQLFragments(t *testing.T) {
	t.Parallel()
	const (
		orderInsertFrom = "INSERT INTO {schema}.orders ("
		orderInsertTo   = "$11, $11::bigint * $10::smallint, $12, 10, $13)"
		paymentCols     = "payment_id, payment_request_id, order_id, provider, provider_trade_no, callback_id,\n\t\tamount, currency, status, raw_payload, paid_at)"
	)
	checks := []struct{ a, b, from, to string }{
		{"create", "create_order_abort", orderInsertFrom, orderInsertTo},
		{"create", "create_order_routed", orderInsertFrom, orderInsertTo},
		{"create_order_abort", "create_order_routed", "RETURNING ", "updated_at"},
		{"create", "create_item", "INSERT INTO {schema}.order_items (", "unit_price, line_amount)"},
		{"transition", "transition_abort", "WITH cur AS (", "o.updated_at\n)"},
		{"transition", "transition_abort", "SELECT u.order_id", "WHERE NOT EXISTS (SELECT FROM upd)"},
		{"payment", "payment_abort", "WITH cur AS (", "o.updated_at\n)"},
		{"payment", "payment_abort", "SELECT u.order_id", "WHERE NOT EXISTS (SELECT FROM upd)"},
		{"payment", "payment_insert", "INSERT INTO {schema}.payment_record (", paymentCols},
		{"payment", "payment_insert", "ON CONFLICT DO NOTHING", "RETURNING payment_id, status"},
		{"payment", "payment_mark_paid", "SET status = 30,", "updated_at = statement_timestamp()"},
		{"due_for_expiry", "cancel_expired", "WHERE status IN (10, 20)", "FOR NO KEY UPDATE SKIP LOCKED"},
		{"record_review", "open_reviews", "review_id, provider, provider_trade_no", "resolved_at, created_at"},
		{"record_review", "resolve_review", "review_id, provider, provider_trade_no", "resolved_at, created_at"},
	}
	for _, c := range checks {
		if err := statements.SameFragment(c.a, c.b, c.from, c.to); err != nil {
			t.Error(err)
		}
	}
	// The order columns, as scanOrder reads them.
	for name, prefixes := range map[string][]string{
		"create": {""}, "create_classify": {""}, "create_order_abort": {""}, "create_order_routed": {""},
		"transition": {"o.", "u.", "c."}, "transition_abort": {"o.", "u.", "c."},
		"payment": {"o.", "u.", "c."}, "payment_abort": {"o.", "u.", "c."},
		"payment_lock_order": {""}, "payment_mark_paid": {"o."},
		"due_for_expiry": {""}, "cancel_expired": {"o."},
		"get_by_id": {""}, "get_by_request": {""}, "get_by_buyer": {""},
	} {
		st, ok := statements.Lookup(name)
		if !ok {
			t.Fatalf("no statement %s", name)
		}
		for _, p := range prefixes {
			if !strings.Contains(st.Text, cols(p)) {
				t.Errorf("%s does not list the order columns as scanOrder reads them (prefix %q)", name, p)
			}
		}
	}
}
