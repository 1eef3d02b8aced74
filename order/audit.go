package order

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// Finding is one broken invariant, found by [Store.Audit].
type Finding struct {
	// Kind names the invariant broken:
	//
	//   - "DUPLICATE_USER_ORDER": more than one order for one (activity,
	//     sku, user); OrderID is the lowest of them;
	//   - "PAID_AND_CANCELLED": an order with both paid_at and
	//     cancelled_at, or CANCELLED with paid_at;
	//   - "STATUS_TIMESTAMPS": the status timestamps do not match the
	//     status (CREATED/PAYING: none; PAID/REFUND_PENDING: paid_at only;
	//     CANCELLED: cancelled_at and cancel_reason only; CLOSED: exactly
	//     one of paid_at, cancelled_at);
	//   - "TOTAL_AMOUNT": total_amount <> unit_price × quantity;
	//   - "ITEMS_TOTAL": the item lines do not add up to the order (no
	//     lines, line amounts ≠ total_amount, or line quantities ≠
	//     quantity);
	//   - "PAYMENT_ON_UNPAID_ORDER": a SUCCEEDED payment on an order that
	//     is not paid (payments after a cancel must be REFUND_PENDING);
	//   - "PAYMENT_AMOUNT": a SUCCEEDED payment whose amount or currency
	//     differs from its order's.
	Kind    string
	OrderID int64  // the order concerned (for DUPLICATE_USER_ORDER the lowest of the duplicates)
	Detail  string // human-readable facts (values found)
}

const auditSQL = `SELECT 'DUPLICATE_USER_ORDER', min(order_id),
	format('activity %s sku %s user %s has %s orders', activity_id, sku_id, user_id, count(*))
FROM {schema}.orders
GROUP BY activity_id, sku_id, user_id
HAVING count(*) > 1
UNION ALL
SELECT 'PAID_AND_CANCELLED', order_id,
	format('status %s paid_at %s cancelled_at %s', status, paid_at, cancelled_at)
FROM {schema}.orders
WHERE paid_at IS NOT NULL AND (cancelled_at IS NOT NULL OR status = 40)
UNION ALL
SELECT 'STATUS_TIMESTAMPS', order_id,
	format('status %s paid_at %s cancelled_at %s cancel_reason %s', status, paid_at, cancelled_at, cancel_reason)
FROM {schema}.orders
WHERE NOT CASE
	WHEN status IN (10, 20) THEN paid_at IS NULL AND cancelled_at IS NULL AND cancel_reason IS NULL
	WHEN status IN (30, 60) THEN paid_at IS NOT NULL AND cancelled_at IS NULL
	WHEN status = 40 THEN cancelled_at IS NOT NULL AND cancel_reason IS NOT NULL AND paid_at IS NULL
	WHEN status = 50 THEN (paid_at IS NULL) <> (cancelled_at IS NULL)
	ELSE false
END
UNION ALL
SELECT 'TOTAL_AMOUNT', order_id,
	format('total_amount %s unit_price %s quantity %s', total_amount, unit_price, quantity)
FROM {schema}.orders
WHERE total_amount <> unit_price * quantity
UNION ALL
SELECT 'ITEMS_TOTAL', o.order_id,
	format('total_amount %s quantity %s; %s lines, amount %s, quantity %s',
		o.total_amount, o.quantity, count(i.line_no), sum(i.line_amount), sum(i.quantity))
FROM {schema}.orders AS o
LEFT JOIN {schema}.order_items AS i ON i.order_id = o.order_id
GROUP BY o.order_id
HAVING count(i.line_no) = 0 OR sum(i.line_amount) <> o.total_amount OR sum(i.quantity) <> o.quantity
UNION ALL
SELECT 'PAYMENT_ON_UNPAID_ORDER', o.order_id,
	format('payment %s succeeded on order with status %s', p.payment_id, o.status)
FROM {schema}.payment_record AS p
JOIN {schema}.orders AS o ON o.order_id = p.order_id
WHERE p.status = 20 AND NOT (o.status IN (30, 60) OR o.status = 50 AND o.paid_at IS NOT NULL)
UNION ALL
SELECT 'PAYMENT_AMOUNT', o.order_id,
	format('payment %s of %s %s on order total %s %s', p.payment_id, p.amount, p.currency, o.total_amount, o.currency)
FROM {schema}.payment_record AS p
JOIN {schema}.orders AS o ON o.order_id = p.order_id
WHERE p.status = 20 AND (p.amount <> o.total_amount OR p.currency <> o.currency)
ORDER BY 1, 2`

// Audit checks the order invariants over the whole schema and returns every
// violation as a Finding, ordered by kind and order id; nil means clean.
// It only reads (full scans: run it off-peak or against a replica that
// has caught up). Every check is part of one statement, hence one
// snapshot, on any Querier: the findings are consistent with each other
// even while orders are created, paid and cancelled (each invariant
// holds in every committed snapshot: none comes from reading two
// moments). To read one snapshot across several audits (this one,
// inventory.Store.Audit, the caller's own counts), pass them all the same
// read-only Repeatable Read transaction (pgx.TxOptions{IsoLevel:
// pgx.RepeatableRead, AccessMode: pgx.ReadOnly}); on a pool or a Read
// Committed transaction each audit reads its own moment.
func (s *Store) Audit(ctx context.Context, q pgtx.Querier) (_ []Finding, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return nil, nilHandle("q")
	}
	rows, err := q.Query(ctx, s.sql.audit)
	if err != nil {
		return nil, fmt.Errorf("order: audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Finding, error) {
		var f Finding
		err := r.Scan(&f.Kind, &f.OrderID, &f.Detail)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("order: audit: %w", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
