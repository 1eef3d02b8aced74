-- Store.TransitionOrder and Store.QueueTransitionOrder. transition and
-- transition_abort share their CTEs: a test checks.

-- name: transition
-- Locks the order (FOR NO KEY UPDATE, so the decision uses its latest
-- version), moves it to $2 when its status is one of $3 (and, with $5, it
-- has expired), and returns the order with whether it changed, its
-- previous status and whether it had expired.
-- $1 = order_id (int8)
-- $2 = to (int2): the target status
-- $3 = from (int2[]): the statuses the transition may leave
-- $4 = cancel_reason (text): NULL unless the target is CANCELLED (40)
-- $5 = only_expired (bool): true to move only an order whose expire_at has passed
-- index: orders_pkey
WITH cur AS (
	SELECT order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at, expire_at <= statement_timestamp() AS expired
	FROM {schema}.orders
	WHERE order_id = $1
	FOR NO KEY UPDATE
), upd AS (
	UPDATE {schema}.orders AS o
	SET status = $2::smallint,
		paid_at = CASE WHEN $2::smallint = 30 THEN statement_timestamp() ELSE o.paid_at END,
		cancelled_at = CASE WHEN $2::smallint = 40 THEN statement_timestamp() ELSE o.cancelled_at END,
		cancel_reason = CASE WHEN $2::smallint = 40 THEN $4::text ELSE o.cancel_reason END,
		version = o.version + 1,
		updated_at = statement_timestamp()
	FROM cur AS c
	WHERE o.order_id = c.order_id
		AND c.status = ANY ($3::smallint[])
		AND (NOT $5::boolean OR c.expired)
	RETURNING o.order_id, o.order_no, o.request_id, o.reservation_id, o.source_message_id, o.activity_id, o.sku_id, o.user_id, o.inventory_bucket, o.quantity, o.unit_price, o.total_amount, o.currency, o.status, o.expire_at, o.paid_at, o.cancelled_at, o.cancel_reason, o.version, o.created_at, o.updated_at
)
SELECT u.order_id, u.order_no, u.request_id, u.reservation_id, u.source_message_id, u.activity_id, u.sku_id, u.user_id, u.inventory_bucket, u.quantity, u.unit_price, u.total_amount, u.currency, u.status, u.expire_at, u.paid_at, u.cancelled_at, u.cancel_reason, u.version, u.created_at, u.updated_at, true AS changed, c.status AS prev, c.expired AS expired FROM upd AS u, cur AS c
UNION ALL
SELECT c.order_id, c.order_no, c.request_id, c.reservation_id, c.source_message_id, c.activity_id, c.sku_id, c.user_id, c.inventory_bucket, c.quantity, c.unit_price, c.total_amount, c.currency, c.status, c.expire_at, c.paid_at, c.cancelled_at, c.cancel_reason, c.version, c.created_at, c.updated_at, false, c.status, c.expired FROM cur AS c WHERE NOT EXISTS (SELECT FROM upd)

-- name: transition_abort
-- transition with pgtx.Abort: a refusal calls order_refuse, which raises
-- SK101 (no order), SK102 (not allowed from its status) or SK103 (not
-- expired yet) and aborts the transaction.
-- $1 = order_id (int8)
-- $2 = to (int2): the target status
-- $3 = from (int2[]): the statuses the transition may leave
-- $4 = cancel_reason (text): NULL unless the target is CANCELLED (40)
-- $5 = only_expired (bool): true to move only an order whose expire_at has passed
-- index: orders_pkey
WITH cur AS (
	SELECT order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at, expire_at <= statement_timestamp() AS expired
	FROM {schema}.orders
	WHERE order_id = $1
	FOR NO KEY UPDATE
), upd AS (
	UPDATE {schema}.orders AS o
	SET status = $2::smallint,
		paid_at = CASE WHEN $2::smallint = 30 THEN statement_timestamp() ELSE o.paid_at END,
		cancelled_at = CASE WHEN $2::smallint = 40 THEN statement_timestamp() ELSE o.cancelled_at END,
		cancel_reason = CASE WHEN $2::smallint = 40 THEN $4::text ELSE o.cancel_reason END,
		version = o.version + 1,
		updated_at = statement_timestamp()
	FROM cur AS c
	WHERE o.order_id = c.order_id
		AND c.status = ANY ($3::smallint[])
		AND (NOT $5::boolean OR c.expired)
	RETURNING o.order_id, o.order_no, o.request_id, o.reservation_id, o.source_message_id, o.activity_id, o.sku_id, o.user_id, o.inventory_bucket, o.quantity, o.unit_price, o.total_amount, o.currency, o.status, o.expire_at, o.paid_at, o.cancelled_at, o.cancel_reason, o.version, o.created_at, o.updated_at
)
, res AS (
SELECT u.order_id, u.order_no, u.request_id, u.reservation_id, u.source_message_id, u.activity_id, u.sku_id, u.user_id, u.inventory_bucket, u.quantity, u.unit_price, u.total_amount, u.currency, u.status, u.expire_at, u.paid_at, u.cancelled_at, u.cancel_reason, u.version, u.created_at, u.updated_at, true AS changed, c.status AS prev, c.expired AS expired FROM upd AS u, cur AS c
UNION ALL
SELECT c.order_id, c.order_no, c.request_id, c.reservation_id, c.source_message_id, c.activity_id, c.sku_id, c.user_id, c.inventory_bucket, c.quantity, c.unit_price, c.total_amount, c.currency, c.status, c.expire_at, c.paid_at, c.cancelled_at, c.cancel_reason, c.version, c.created_at, c.updated_at, false, c.status, c.expired FROM cur AS c WHERE NOT EXISTS (SELECT FROM upd)
)
SELECT r.*, CASE
	WHEN r.order_id IS NULL THEN {schema}.order_refuse('SK101', $1, r.prev, NULL)
	WHEN r.changed OR r.prev = $2::smallint THEN NULL
	WHEN r.prev = ANY ($3::smallint[]) THEN {schema}.order_refuse('SK103', $1, r.prev, NULL)
	ELSE {schema}.order_refuse('SK102', $1, r.prev, ($2::smallint)::text)
END
FROM (SELECT 1) AS one LEFT JOIN res AS r ON true
