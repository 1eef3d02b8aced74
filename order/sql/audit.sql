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
