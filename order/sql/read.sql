-- Store.Get, Store.Items and Store.Payments.

-- name: get_by_id
-- $1 = order_id (int8)
-- index: orders_pkey
SELECT order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at FROM {schema}.orders WHERE order_id = $1

-- name: get_by_request
-- $1 = request_id (uuid)
-- index: uq_orders_request
SELECT order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at FROM {schema}.orders WHERE request_id = $1

-- name: get_by_buyer
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = user_id (int8)
-- index: uq_orders_user_sku
SELECT order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at FROM {schema}.orders WHERE activity_id = $1 AND sku_id = $2 AND user_id = $3

-- name: items
-- $1 = order_id (int8)
-- index: pk_order_items
SELECT order_id, line_no, activity_id, sku_id, sku_title, quantity, unit_price, line_amount, created_at
FROM {schema}.order_items WHERE order_id = $1 ORDER BY line_no

-- name: payments
-- $1 = order_id (int8)
-- index: idx_payment_order_created
SELECT payment_id, payment_request_id, order_id, provider, coalesce(provider_trade_no, ''),
	coalesce(callback_id, ''), amount, currency, status, paid_at, created_at
FROM {schema}.payment_record WHERE order_id = $1 ORDER BY created_at, payment_id
