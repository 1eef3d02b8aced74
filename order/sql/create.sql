-- Store.Create and Store.QueueCreate (pgtx.Return and pgtx.Abort, plain and
-- Config.Citus). create, create_order_abort and create_order_routed carry
-- identical copies of the order INSERT: a test checks.

-- name: create
-- Inserts the order and, only when it was inserted, its item line, in one
-- statement. ON CONFLICT DO NOTHING without a target covers every unique
-- constraint of orders: the indexes decide; create_classify only explains
-- the decision afterwards.
-- $1 = order_id (int8)
-- $2 = order_no (text)
-- $3 = request_id (uuid)
-- $4 = reservation_id (uuid)
-- $5 = source_message_id (uuid): the embedded Request's MessageID
-- $6 = activity_id (int8)
-- $7 = sku_id (int8)
-- $8 = user_id (int8)
-- $9 = inventory_bucket (int2)
-- $10 = quantity (int2)
-- $11 = unit_price (int8): minor units
-- $12 = currency (text): ISO 4217 code
-- $13 = expire_at (timestamptz): when an unpaid order expires
-- $14 = sku_title (text): the item line's title
-- index: none (ON CONFLICT DO NOTHING without a target: every unique index of orders arbitrates, unseen by EXPLAIN)
WITH ins AS (
	INSERT INTO {schema}.orders (
		order_id, order_no, request_id, reservation_id, source_message_id,
		activity_id, sku_id, user_id, inventory_bucket, quantity,
		unit_price, total_amount, currency, status, expire_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
		$11, $11::bigint * $10::smallint, $12, 10, $13)
	ON CONFLICT DO NOTHING
	RETURNING order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at
), item AS (
	INSERT INTO {schema}.order_items (
		order_id, line_no, activity_id, sku_id, sku_title, quantity, unit_price, line_amount)
	SELECT order_id, 1, activity_id, sku_id, $14, quantity, unit_price, total_amount
	FROM ins
)
SELECT order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at FROM ins

-- name: create_classify
-- The rows that made create insert nothing, each with the keys it shares
-- with the new order: one probe per unique key.
-- $1 = order_id (int8)
-- $2 = order_no (text)
-- $3 = request_id (uuid)
-- $4 = reservation_id (uuid)
-- $5 = source_message_id (uuid)
-- $6 = activity_id (int8)
-- $7 = sku_id (int8)
-- $8 = user_id (int8)
-- index: orders_pkey, uq_orders_order_no, uq_orders_request, uq_orders_reservation, uq_orders_source_message, uq_orders_user_sku
SELECT order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at,
	(request_id = $3 OR reservation_id = $4 OR source_message_id = $5) AS same_request,
	(activity_id = $6 AND sku_id = $7 AND user_id = $8) AS same_user_sku,
	order_id = $1 AS same_id,
	order_no = $2 AS same_no
FROM {schema}.orders
WHERE order_id = $1 OR order_no = $2
	OR request_id = $3 OR reservation_id = $4 OR source_message_id = $5
	OR (activity_id = $6 AND sku_id = $7 AND user_id = $8)

-- name: create_order_abort
-- QueueCreate with pgtx.Abort: create's order INSERT without ON
-- CONFLICT, so a duplicate raises unique_violation and aborts the
-- transaction; returns the new row. create_item follows.
-- $1 = order_id (int8)
-- $2 = order_no (text)
-- $3 = request_id (uuid)
-- $4 = reservation_id (uuid)
-- $5 = source_message_id (uuid): the embedded Request's MessageID
-- $6 = activity_id (int8)
-- $7 = sku_id (int8)
-- $8 = user_id (int8)
-- $9 = inventory_bucket (int2)
-- $10 = quantity (int2)
-- $11 = unit_price (int8): minor units
-- $12 = currency (text): ISO 4217 code
-- $13 = expire_at (timestamptz): when an unpaid order expires
-- index: none (an INSERT without ON CONFLICT: the unique indexes only raise the duplicate)
INSERT INTO {schema}.orders (
	order_id, order_no, request_id, reservation_id, source_message_id,
	activity_id, sku_id, user_id, inventory_bucket, quantity,
	unit_price, total_amount, currency, status, expire_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
	$11, $11::bigint * $10::smallint, $12, 10, $13)
RETURNING order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at

-- name: create_item
-- The item line of create_order_abort and create_order_routed: a plain
-- INSERT (line 1).
-- $1 = order_id (int8)
-- $2 = activity_id (int8)
-- $3 = sku_id (int8)
-- $4 = sku_title (text)
-- $5 = quantity (int2)
-- $6 = unit_price (int8)
-- index: none (an INSERT: pk_order_items only raises a duplicate)
INSERT INTO {schema}.order_items (
	order_id, line_no, activity_id, sku_id, sku_title, quantity, unit_price, line_amount)
VALUES ($1, 1, $2, $3, $4, $5, $6, $6::bigint * $5::smallint)

-- name: create_order_routed
-- The order insert of Create with Config.Citus: create's first insert as
-- a plain statement (what Citus routes whole), returning the new order or
-- nothing; create_item follows in a second round trip when it inserted.
-- $1 = order_id (int8)
-- $2 = order_no (text)
-- $3 = request_id (uuid)
-- $4 = reservation_id (uuid)
-- $5 = source_message_id (uuid): the embedded Request's MessageID
-- $6 = activity_id (int8)
-- $7 = sku_id (int8)
-- $8 = user_id (int8)
-- $9 = inventory_bucket (int2)
-- $10 = quantity (int2)
-- $11 = unit_price (int8): minor units
-- $12 = currency (text): ISO 4217 code
-- $13 = expire_at (timestamptz): when an unpaid order expires
-- index: none (ON CONFLICT DO NOTHING without a target: every unique index of orders arbitrates, unseen by EXPLAIN)
INSERT INTO {schema}.orders (
	order_id, order_no, request_id, reservation_id, source_message_id,
	activity_id, sku_id, user_id, inventory_bucket, quantity,
	unit_price, total_amount, currency, status, expire_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
	$11, $11::bigint * $10::smallint, $12, 10, $13)
ON CONFLICT DO NOTHING
RETURNING order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at
