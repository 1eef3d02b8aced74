-- Store.RecordPayment and Store.QueueRecordPayment (pgtx.Return and
-- pgtx.Abort, plain and Config.Citus). payment and payment_abort share
-- their CTEs: a test checks.

-- name: payment
-- One round trip: lock the order, check amount and currency, insert the
-- payment (SUCCEEDED when the order is payable, REFUND_PENDING otherwise)
-- with ON CONFLICT DO NOTHING deduplicating on every unique key, then move
-- a payable order to PAID only if the payment row was inserted.
-- $1 = payment_id (uuid)
-- $2 = payment_request_id (uuid)
-- $3 = order_id (int8)
-- $4 = provider (text)
-- $5 = provider_trade_no (text)
-- $6 = callback_id (text): '' for none (stored as NULL)
-- $7 = amount (int8): minor units
-- $8 = currency (text)
-- $9 = raw_payload (text): JSON, cast to jsonb
-- index: orders_pkey
WITH cur AS (
	SELECT order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at, total_amount = $7 AS amount_ok, currency = $8 AS currency_ok
	FROM {schema}.orders
	WHERE order_id = $3
	FOR NO KEY UPDATE
), pay AS (
	INSERT INTO {schema}.payment_record (
		payment_id, payment_request_id, order_id, provider, provider_trade_no, callback_id,
		amount, currency, status, raw_payload, paid_at)
	SELECT $1, $2, c.order_id, $4, $5, NULLIF($6::text, ''), $7, $8,
		CASE WHEN c.status IN (10, 20) THEN 20 ELSE 40 END, $9::jsonb, statement_timestamp()
	FROM cur AS c
	WHERE c.amount_ok AND c.currency_ok
	ON CONFLICT DO NOTHING
	RETURNING payment_id, status
), upd AS (
	UPDATE {schema}.orders AS o
	SET status = 30,
		paid_at = statement_timestamp(),
		version = o.version + 1,
		updated_at = statement_timestamp()
	FROM cur AS c, pay AS p
	WHERE o.order_id = c.order_id AND p.status = 20 AND c.status IN (10, 20)
	RETURNING o.order_id, o.order_no, o.request_id, o.reservation_id, o.source_message_id, o.activity_id, o.sku_id, o.user_id, o.inventory_bucket, o.quantity, o.unit_price, o.total_amount, o.currency, o.status, o.expire_at, o.paid_at, o.cancelled_at, o.cancel_reason, o.version, o.created_at, o.updated_at
)
SELECT u.order_id, u.order_no, u.request_id, u.reservation_id, u.source_message_id, u.activity_id, u.sku_id, u.user_id, u.inventory_bucket, u.quantity, u.unit_price, u.total_amount, u.currency, u.status, u.expire_at, u.paid_at, u.cancelled_at, u.cancel_reason, u.version, u.created_at, u.updated_at, true AS changed, c.status AS prev, c.amount_ok AS amount_ok, c.currency_ok AS currency_ok,
	p.payment_id AS payment_id, p.status AS payment_status
FROM upd AS u, cur AS c, pay AS p
UNION ALL
SELECT c.order_id, c.order_no, c.request_id, c.reservation_id, c.source_message_id, c.activity_id, c.sku_id, c.user_id, c.inventory_bucket, c.quantity, c.unit_price, c.total_amount, c.currency, c.status, c.expire_at, c.paid_at, c.cancelled_at, c.cancel_reason, c.version, c.created_at, c.updated_at, false, c.status, c.amount_ok, c.currency_ok, p.payment_id, p.status
FROM cur AS c LEFT JOIN pay AS p ON true
WHERE NOT EXISTS (SELECT FROM upd)

-- name: payment_abort
-- payment with pgtx.Abort: a refusal calls order_refuse, which raises
-- SK101 (no order), SK104 (amount), SK105 (currency) or SK106 (payment
-- already recorded) and aborts the transaction.
-- $1 = payment_id (uuid)
-- $2 = payment_request_id (uuid)
-- $3 = order_id (int8)
-- $4 = provider (text)
-- $5 = provider_trade_no (text)
-- $6 = callback_id (text): '' for none (stored as NULL)
-- $7 = amount (int8): minor units
-- $8 = currency (text)
-- $9 = raw_payload (text): JSON, cast to jsonb
-- index: orders_pkey
WITH cur AS (
	SELECT order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at, total_amount = $7 AS amount_ok, currency = $8 AS currency_ok
	FROM {schema}.orders
	WHERE order_id = $3
	FOR NO KEY UPDATE
), pay AS (
	INSERT INTO {schema}.payment_record (
		payment_id, payment_request_id, order_id, provider, provider_trade_no, callback_id,
		amount, currency, status, raw_payload, paid_at)
	SELECT $1, $2, c.order_id, $4, $5, NULLIF($6::text, ''), $7, $8,
		CASE WHEN c.status IN (10, 20) THEN 20 ELSE 40 END, $9::jsonb, statement_timestamp()
	FROM cur AS c
	WHERE c.amount_ok AND c.currency_ok
	ON CONFLICT DO NOTHING
	RETURNING payment_id, status
), upd AS (
	UPDATE {schema}.orders AS o
	SET status = 30,
		paid_at = statement_timestamp(),
		version = o.version + 1,
		updated_at = statement_timestamp()
	FROM cur AS c, pay AS p
	WHERE o.order_id = c.order_id AND p.status = 20 AND c.status IN (10, 20)
	RETURNING o.order_id, o.order_no, o.request_id, o.reservation_id, o.source_message_id, o.activity_id, o.sku_id, o.user_id, o.inventory_bucket, o.quantity, o.unit_price, o.total_amount, o.currency, o.status, o.expire_at, o.paid_at, o.cancelled_at, o.cancel_reason, o.version, o.created_at, o.updated_at
)
, res AS (
SELECT u.order_id, u.order_no, u.request_id, u.reservation_id, u.source_message_id, u.activity_id, u.sku_id, u.user_id, u.inventory_bucket, u.quantity, u.unit_price, u.total_amount, u.currency, u.status, u.expire_at, u.paid_at, u.cancelled_at, u.cancel_reason, u.version, u.created_at, u.updated_at, true AS changed, c.status AS prev, c.amount_ok AS amount_ok, c.currency_ok AS currency_ok,
	p.payment_id AS payment_id, p.status AS payment_status
FROM upd AS u, cur AS c, pay AS p
UNION ALL
SELECT c.order_id, c.order_no, c.request_id, c.reservation_id, c.source_message_id, c.activity_id, c.sku_id, c.user_id, c.inventory_bucket, c.quantity, c.unit_price, c.total_amount, c.currency, c.status, c.expire_at, c.paid_at, c.cancelled_at, c.cancel_reason, c.version, c.created_at, c.updated_at, false, c.status, c.amount_ok, c.currency_ok, p.payment_id, p.status
FROM cur AS c LEFT JOIN pay AS p ON true
WHERE NOT EXISTS (SELECT FROM upd)
)
SELECT r.*, CASE
	WHEN r.order_id IS NULL THEN {schema}.order_refuse('SK101', $3, r.prev, NULL)
	WHEN NOT r.amount_ok THEN {schema}.order_refuse('SK104', $3, r.prev, ($7::bigint)::text)
	WHEN NOT r.currency_ok THEN {schema}.order_refuse('SK105', $3, r.prev, $8::text)
	WHEN r.payment_id IS NULL THEN {schema}.order_refuse('SK106', $3, r.prev, ($1::uuid)::text)
END
FROM (SELECT 1) AS one LEFT JOIN res AS r ON true

-- name: payment_classify
-- The payments that made payment insert nothing, each with the keys it
-- shares with the new one.
-- $1 = payment_id (uuid)
-- $2 = payment_request_id (uuid)
-- $3 = provider (text)
-- $4 = provider_trade_no (text)
-- $5 = callback_id (text): '' for none
-- index: payment_record_pkey, uq_payment_request, uq_payment_provider_trade, uq_payment_callback
SELECT p.payment_id, p.order_id, p.status,
	p.payment_id = $1 AS same_id,
	p.payment_request_id = $2 AS same_request,
	(p.provider = $3 AND (p.provider_trade_no = $4 OR p.callback_id = NULLIF($5::text, ''))) AS same_provider_ref
FROM {schema}.payment_record AS p
WHERE p.payment_id = $1 OR p.payment_request_id = $2
	OR (p.provider = $3 AND (p.provider_trade_no = $4 OR p.callback_id = NULLIF($5::text, '')))

-- name: payment_lock_order
-- The first statement of RecordPayment with Config.Citus: lock the order.
-- $1 = order_id (int8)
-- index: orders_pkey
SELECT order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, paid_at, cancelled_at, cancel_reason, version, created_at, updated_at FROM {schema}.orders WHERE order_id = $1 FOR NO KEY UPDATE

-- name: payment_insert
-- RecordPayment with Config.Citus: insert the payment with the status
-- decided from the locked order.
-- $1 = payment_id (uuid)
-- $2 = payment_request_id (uuid)
-- $3 = order_id (int8)
-- $4 = provider (text)
-- $5 = provider_trade_no (text)
-- $6 = callback_id (text): '' for none (stored as NULL)
-- $7 = amount (int8): minor units
-- $8 = currency (text)
-- $9 = raw_payload (text): JSON, cast to jsonb
-- $10 = status (int2): the payment status decided from the locked order
-- index: none (ON CONFLICT DO NOTHING without a target: every unique index of payment_record arbitrates, unseen by EXPLAIN)
INSERT INTO {schema}.payment_record (
		payment_id, payment_request_id, order_id, provider, provider_trade_no, callback_id,
		amount, currency, status, raw_payload, paid_at)
	VALUES ($1, $2, $3, $4, $5, NULLIF($6::text, ''), $7, $8, $10, $9::jsonb, statement_timestamp())
	ON CONFLICT DO NOTHING
	RETURNING payment_id, status

-- name: payment_mark_paid
-- RecordPayment with Config.Citus: the order becomes PAID only through the
-- SUCCEEDED payment $2 this transaction just inserted (a SUCCEEDED payment
-- is only ever inserted for a CREATED or PAYING order, together with this
-- update, so an older one never finds its order still unpaid).
-- The payment is found by its id or among its order's payments (both
-- are index probes of a row or two).
-- $1 = order_id (int8)
-- $2 = payment_id (uuid)
-- index: orders_pkey, payment_record_pkey | idx_payment_order_created
UPDATE {schema}.orders AS o
	SET status = 30,
		paid_at = statement_timestamp(),
		version = o.version + 1,
		updated_at = statement_timestamp()
	FROM {schema}.payment_record AS p
	WHERE o.order_id = $1 AND p.payment_id = $2 AND p.order_id = o.order_id
	  AND p.status = 20 AND o.status IN (10, 20)
	RETURNING o.order_id, o.order_no, o.request_id, o.reservation_id, o.source_message_id, o.activity_id, o.sku_id, o.user_id, o.inventory_bucket, o.quantity, o.unit_price, o.total_amount, o.currency, o.status, o.expire_at, o.paid_at, o.cancelled_at, o.cancel_reason, o.version, o.created_at, o.updated_at
