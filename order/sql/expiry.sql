-- Store.DueForExpiry, Store.CancelExpired and Store.QueueCancelExpired.
-- Both read only the partial index idx_orders_expirable (unpaid orders).

-- name: due_for_expiry
-- Locks up to $1 unpaid orders whose expire_at has passed, oldest first,
-- skipping rows another sweeper holds.
-- $1 = limit (int4)
-- index: idx_orders_expirable
SELECT order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at
FROM {schema}.orders
WHERE status IN (10, 20)
	AND expire_at <= statement_timestamp()
ORDER BY expire_at, order_id
LIMIT $1
FOR NO KEY UPDATE SKIP LOCKED

-- name: cancel_expired
-- Cancels (PAY_TIMEOUT) up to $1 unpaid orders whose expire_at has
-- passed, oldest first, skipping rows another sweeper holds; returns each
-- with its previous status.
-- $1 = limit (int4)
-- index: idx_orders_expirable, orders_pkey
WITH due AS (
	SELECT order_id, status AS prev_status
	FROM {schema}.orders
	WHERE status IN (10, 20)
		AND expire_at <= statement_timestamp()
	ORDER BY expire_at, order_id
	LIMIT $1
	FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE {schema}.orders AS o
SET status = 40,
	cancelled_at = statement_timestamp(),
	cancel_reason = 'PAY_TIMEOUT',
	version = o.version + 1,
	updated_at = statement_timestamp()
FROM due
WHERE o.order_id = due.order_id
RETURNING o.order_id, o.order_no, o.request_id, o.reservation_id, o.source_message_id, o.activity_id, o.sku_id, o.user_id, o.inventory_bucket, o.quantity, o.unit_price, o.total_amount, o.currency, o.status, o.expire_at, o.paid_at, o.cancelled_at, o.cancel_reason, o.version, o.created_at, o.updated_at, due.prev_status
