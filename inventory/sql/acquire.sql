-- Store.AcquireReservation and its queued form: record a reservation
-- (PENDING_DB, or ORDERED with an order id) or a rejected one. acquire is
-- the default one statement; with Config.Citus, acquire_insert and
-- acquire_existing are sent together as one batch; the insert_*_abort
-- statements are the pgtx.Abort forms (plain INSERTs: a conflict raises).
-- The statements that insert a reservation share the reservation insert
-- (a test checks).

-- name: acquire
-- acquire is one statement: insert PENDING_DB (or ORDERED
-- for order $11 when $11 > 0) unless the reservation, its request id or the
-- order id exists; otherwise lock the existing row FOR UPDATE (or report
-- the reservation holding the request id or the order id).
-- $1 = reservation_id (uuid)
-- $2 = request_id (uuid): the purchase request
-- $3 = message_id (uuid): the first message of the request
-- $4 = activity_id (int8)
-- $5 = sku_id (int8)
-- $6 = user_id (int8): the buyer
-- $7 = bucket (int2): the bucket the reservation draws on
-- $8 = quantity (int2)
-- $9 = reserved_at (timestamptz)
-- $10 = expires_at (timestamptz)
-- $11 = order_id (int8): the order of a reservation recorded ORDERED, else 0
-- index: inventory_reservation_pkey, uq_reservation_request, uq_reservation_order
WITH ins AS (
	INSERT INTO {schema}.inventory_reservation (
		reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
		inventory_bucket, quantity, status, redis_reserved_at, expires_at, order_id, ordered_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $11::int8 > 0 THEN 10 ELSE 0 END, $9, $10,
	        nullif($11::int8, 0), CASE WHEN $11::int8 > 0 THEN statement_timestamp() END)
	ON CONFLICT DO NOTHING
	RETURNING reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),
	redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at
), cur AS (
	SELECT reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),
	redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $1 AND NOT EXISTS (SELECT 1 FROM ins)
	   FOR UPDATE
), other AS (
	SELECT CASE WHEN request_id = $2 THEN 'request_conflict' ELSE 'order_conflict' END AS kind,
	       reservation_id, request_id, order_id
	  FROM {schema}.inventory_reservation
	 WHERE (request_id = $2 OR (order_id = $11::int8 AND $11::int8 > 0)) AND reservation_id <> $1
	   AND NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM cur)
	 ORDER BY 1 DESC
	 LIMIT 1
)
SELECT 'new', * FROM ins
UNION ALL
SELECT 'existing', * FROM cur
UNION ALL
SELECT kind, reservation_id, request_id, NULL, NULL, NULL, NULL, NULL, NULL, order_id,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
  FROM other

-- name: acquire_existing
-- acquire_existing follows acquire_insert in the same batch: the
-- reservation locked FOR UPDATE, or the reservation holding the request id
-- or the order id. A new statement: under Read Committed its snapshot sees
-- a concurrent insert that committed while the insert waited for it.
-- After a successful insert it locks (again) the row just inserted.
-- Parameters: $1 reservation, $2 request, $3 order id (0: none).
-- $1 = reservation_id (uuid)
-- $2 = request_id (uuid)
-- $3 = order_id (int8): the order of a reservation recorded ORDERED, else 0
-- index: inventory_reservation_pkey, uq_reservation_request, uq_reservation_order
WITH cur AS (
	SELECT reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),
	redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $1
	   FOR UPDATE
), other AS (
	SELECT CASE WHEN request_id = $2 THEN 'request_conflict' ELSE 'order_conflict' END AS kind,
	       reservation_id, request_id, order_id
	  FROM {schema}.inventory_reservation
	 WHERE (request_id = $2 OR (order_id = $3::int8 AND $3::int8 > 0)) AND reservation_id <> $1
	   AND NOT EXISTS (SELECT 1 FROM cur)
	 ORDER BY 1 DESC
	 LIMIT 1
)
SELECT 'existing', * FROM cur
UNION ALL
SELECT kind, reservation_id, request_id, NULL, NULL, NULL, NULL, NULL, NULL, order_id,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
  FROM other

-- name: acquire_insert
-- acquire_insert is acquire's insert alone: the new row, or nothing
-- when the reservation, its request id or the order id exists.
-- Parameters as acquire.
-- $1 = reservation_id (uuid)
-- $2 = request_id (uuid): the purchase request
-- $3 = message_id (uuid): the first message of the request
-- $4 = activity_id (int8)
-- $5 = sku_id (int8)
-- $6 = user_id (int8): the buyer
-- $7 = bucket (int2): the bucket the reservation draws on
-- $8 = quantity (int2)
-- $9 = reserved_at (timestamptz)
-- $10 = expires_at (timestamptz)
-- $11 = order_id (int8): the order of a reservation recorded ORDERED, else 0
-- index: none (one INSERT … VALUES: it reads no table; the unique indexes check it as it inserts)
INSERT INTO {schema}.inventory_reservation (
		reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
		inventory_bucket, quantity, status, redis_reserved_at, expires_at, order_id, ordered_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $11::int8 > 0 THEN 10 ELSE 0 END, $9, $10,
	        nullif($11::int8, 0), CASE WHEN $11::int8 > 0 THEN statement_timestamp() END)
ON CONFLICT DO NOTHING
RETURNING 'new', reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),
	redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at

-- name: insert_rejected_abort
-- insert_rejected_abort is insert_reservation_abort for a
-- reservation decided at once as REJECTED with failure code $11: the row a
-- PENDING_DB insert followed by the transition to REJECTED leaves. An
-- existing reservation, request id raises unique_violation.
-- $1 = reservation_id (uuid)
-- $2 = request_id (uuid): the purchase request
-- $3 = message_id (uuid): the first message of the request
-- $4 = activity_id (int8)
-- $5 = sku_id (int8)
-- $6 = user_id (int8): the buyer
-- $7 = bucket (int2): the bucket the reservation draws on
-- $8 = quantity (int2)
-- $9 = reserved_at (timestamptz)
-- $10 = expires_at (timestamptz)
-- $11 = failure_code (text): why the request is rejected
-- index: none (one INSERT … VALUES: it reads no table; the unique indexes check it as it inserts)
INSERT INTO {schema}.inventory_reservation (
	reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, status, redis_reserved_at, expires_at, failure_code)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 20, $9, $10, $11)

-- name: insert_rejected_abort_returning
-- insert_rejected_abort is insert_reservation_abort for a
-- reservation decided at once as REJECTED with failure code $11: the row a
-- PENDING_DB insert followed by the transition to REJECTED leaves. An
-- existing reservation, request id raises unique_violation.
-- $1 = reservation_id (uuid)
-- $2 = request_id (uuid): the purchase request
-- $3 = message_id (uuid): the first message of the request
-- $4 = activity_id (int8)
-- $5 = sku_id (int8)
-- $6 = user_id (int8): the buyer
-- $7 = bucket (int2): the bucket the reservation draws on
-- $8 = quantity (int2)
-- $9 = reserved_at (timestamptz)
-- $10 = expires_at (timestamptz)
-- $11 = failure_code (text): why the request is rejected
-- index: none (one INSERT … VALUES: it reads no table; the unique indexes check it as it inserts)
INSERT INTO {schema}.inventory_reservation (
	reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, status, redis_reserved_at, expires_at, failure_code)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 20, $9, $10, $11)
RETURNING reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),
	redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at

-- name: insert_reservation_abort
-- insert_reservation_abort is acquire's insert without its ON
-- CONFLICT: an existing reservation, request id or order id raises
-- unique_violation. Parameters as acquire.
-- $1 = reservation_id (uuid)
-- $2 = request_id (uuid): the purchase request
-- $3 = message_id (uuid): the first message of the request
-- $4 = activity_id (int8)
-- $5 = sku_id (int8)
-- $6 = user_id (int8): the buyer
-- $7 = bucket (int2): the bucket the reservation draws on
-- $8 = quantity (int2)
-- $9 = reserved_at (timestamptz)
-- $10 = expires_at (timestamptz)
-- $11 = order_id (int8): the order of a reservation recorded ORDERED, else 0
-- index: none (one INSERT … VALUES: it reads no table; the unique indexes check it as it inserts)
INSERT INTO {schema}.inventory_reservation (
		reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
		inventory_bucket, quantity, status, redis_reserved_at, expires_at, order_id, ordered_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $11::int8 > 0 THEN 10 ELSE 0 END, $9, $10,
	        nullif($11::int8, 0), CASE WHEN $11::int8 > 0 THEN statement_timestamp() END)

-- name: insert_reservation_abort_returning
-- insert_reservation_abort is acquire's insert without its ON
-- CONFLICT: an existing reservation, request id or order id raises
-- unique_violation. Parameters as acquire.
-- $1 = reservation_id (uuid)
-- $2 = request_id (uuid): the purchase request
-- $3 = message_id (uuid): the first message of the request
-- $4 = activity_id (int8)
-- $5 = sku_id (int8)
-- $6 = user_id (int8): the buyer
-- $7 = bucket (int2): the bucket the reservation draws on
-- $8 = quantity (int2)
-- $9 = reserved_at (timestamptz)
-- $10 = expires_at (timestamptz)
-- $11 = order_id (int8): the order of a reservation recorded ORDERED, else 0
-- index: none (one INSERT … VALUES: it reads no table; the unique indexes check it as it inserts)
INSERT INTO {schema}.inventory_reservation (
		reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
		inventory_bucket, quantity, status, redis_reserved_at, expires_at, order_id, ordered_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $11::int8 > 0 THEN 10 ELSE 0 END, $9, $10,
	        nullif($11::int8, 0), CASE WHEN $11::int8 > 0 THEN statement_timestamp() END)
RETURNING reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),
	redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at
