-- Store.Audit.

-- name: audit
-- Every invariant violation of the order tables, one row each: duplicate
-- user orders, paid and cancelled, status timestamps, totals, items,
-- payments on unpaid orders, payment amounts.
-- index: none (a consistency check over every row)
-- full scan: orders, order_items, payment_record (a consistency check over every row, run offline)
SELECT 'DUPLICATE_USER_ORDER', min(order_id),
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
ORDER BY 1, 2

-- name: audit_since
-- Store.AuditSince: the checks of audit, over the orders changed at or
-- after $1 (updated_at: every statement that writes an order sets it) and
-- the payments written at or after $1 or made on those orders. A
-- duplicate is reported from any of its orders that changed. Each check
-- reads the changed rows through the BRIN indexes and their neighbours
-- (the key's other orders, the items, the payments) by unique key. The
-- key's other orders come by the one-order-per-user key or by the user's
-- covering index: a user has few orders, and the planner takes either.
-- $1 = since (timestamptz)
-- explain with: now() - interval '3 seconds'
-- index: idx_orders_updated_brin, idx_payment_updated_brin, uq_orders_user_sku | idx_orders_user_created, pk_order_items, idx_payment_order_created, orders_pkey, payment_record_pkey
WITH o AS MATERIALIZED (
	SELECT order_id, activity_id, sku_id, user_id, quantity, unit_price, total_amount, status, paid_at, cancelled_at, cancel_reason
	  FROM {schema}.orders
	 WHERE updated_at >= $1
), p AS MATERIALIZED (
	SELECT payment_id FROM {schema}.payment_record WHERE updated_at >= $1
	UNION
	SELECT pr.payment_id FROM o JOIN {schema}.payment_record AS pr ON pr.order_id = o.order_id
)
SELECT 'DUPLICATE_USER_ORDER', min(x.order_id),
	format('activity %s sku %s user %s has %s orders', k.activity_id, k.sku_id, k.user_id, count(*))
FROM (SELECT DISTINCT activity_id, sku_id, user_id FROM o) AS k
JOIN {schema}.orders AS x ON x.activity_id = k.activity_id AND x.sku_id = k.sku_id AND x.user_id = k.user_id
GROUP BY k.activity_id, k.sku_id, k.user_id
HAVING count(*) > 1
UNION ALL
SELECT 'PAID_AND_CANCELLED', order_id,
	format('status %s paid_at %s cancelled_at %s', status, paid_at, cancelled_at)
FROM o
WHERE paid_at IS NOT NULL AND (cancelled_at IS NOT NULL OR status = 40)
UNION ALL
SELECT 'STATUS_TIMESTAMPS', order_id,
	format('status %s paid_at %s cancelled_at %s cancel_reason %s', status, paid_at, cancelled_at, cancel_reason)
FROM o
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
FROM o
WHERE total_amount <> unit_price * quantity
UNION ALL
SELECT 'ITEMS_TOTAL', o.order_id,
	format('total_amount %s quantity %s; %s lines, amount %s, quantity %s',
		o.total_amount, o.quantity, count(i.line_no), sum(i.line_amount), sum(i.quantity))
FROM o
LEFT JOIN {schema}.order_items AS i ON i.order_id = o.order_id
GROUP BY o.order_id, o.total_amount, o.quantity
HAVING count(i.line_no) = 0 OR sum(i.line_amount) <> o.total_amount OR sum(i.quantity) <> o.quantity
UNION ALL
SELECT 'PAYMENT_ON_UNPAID_ORDER', x.order_id,
	format('payment %s succeeded on order with status %s', pr.payment_id, x.status)
FROM p
JOIN {schema}.payment_record AS pr ON pr.payment_id = p.payment_id
JOIN {schema}.orders AS x ON x.order_id = pr.order_id
WHERE pr.status = 20 AND NOT (x.status IN (30, 60) OR x.status = 50 AND x.paid_at IS NOT NULL)
UNION ALL
SELECT 'PAYMENT_AMOUNT', x.order_id,
	format('payment %s of %s %s on order total %s %s', pr.payment_id, pr.amount, pr.currency, x.total_amount, x.currency)
FROM p
JOIN {schema}.payment_record AS pr ON pr.payment_id = p.payment_id
JOIN {schema}.orders AS x ON x.order_id = pr.order_id
WHERE pr.status = 20 AND (pr.amount <> x.total_amount OR pr.currency <> x.currency)
ORDER BY 1, 2
