-- Store.TransitionReservation and its queued form: the one conditional
-- transition of a reservation's status. transition and transition_abort
-- share their CTEs (a test checks).

-- name: transition
-- transition is the conditional transition plus its 0-row
-- classification in the same statement: lock first, then decide.
--
-- lk locks the row FOR UPDATE; being a locking read in Read Committed it
-- waits for a concurrent writer and returns the row's latest committed
-- version. The UPDATE's guard tests lk's status, not the status of the
-- version the statement's snapshot holds: a guard on the snapshot's version
-- would skip a row whose newest version allows the transition (a waiter
-- behind PENDING_DB -> ORDERED asking for RELEASE_PENDING). The UPDATE then
-- scans the older version and PostgreSQL re-applies it to the latest,
-- locked one. When nothing was updated, cur reads that same locked version,
-- so the reported status is the one that made the update fail.
-- $1 = reservation_id (uuid)
-- $2 = to (int2): the target status
-- $3 = order_id (int8): the order, recorded when the target is ORDERED (10)
-- $4 = failure_code (text): NULL for none
-- $5 = from (int2[]): the statuses the transition may leave
-- index: inventory_reservation_pkey
WITH lk AS (
	SELECT status
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $1
	   FOR UPDATE
), upd AS (
	UPDATE {schema}.inventory_reservation
	   SET status = $2::smallint,
	       order_id = CASE WHEN $2::smallint = 10 THEN $3::bigint ELSE order_id END,
	       ordered_at = CASE WHEN $2::smallint = 10 THEN statement_timestamp() ELSE ordered_at END,
	       released_at = CASE WHEN $2::smallint = 40 THEN statement_timestamp() ELSE released_at END,
	       failure_code = coalesce($4::text, failure_code),
	       version = version + 1,
	       updated_at = statement_timestamp()
	 WHERE reservation_id = $1
	   AND (SELECT status FROM lk) = ANY ($5::smallint[])
	RETURNING reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),
	redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at
), cur AS (
	SELECT reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),
	redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $1 AND NOT EXISTS (SELECT 1 FROM upd)
	   FOR UPDATE
)
SELECT true, * FROM upd
UNION ALL
SELECT false, * FROM cur

-- name: transition_abort
-- transition_abort is transition for [pgtx.Abort]: when the UPDATE
-- moves nothing, the SELECT calls inventory_refuse with the condition the
-- locked row shows (SK009 no reservation, SK010 already in the target
-- status, SK011 a status the target may not be entered from), which raises
-- it and aborts the transaction. Parameters as transition.
-- $1 = reservation_id (uuid)
-- $2 = to (int2): the target status
-- $3 = order_id (int8): the order, recorded when the target is ORDERED (10)
-- $4 = failure_code (text): NULL for none
-- $5 = from (int2[]): the statuses the transition may leave
-- index: inventory_reservation_pkey
WITH lk AS (
	SELECT status
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $1
	   FOR UPDATE
), upd AS (
	UPDATE {schema}.inventory_reservation
	   SET status = $2::smallint,
	       order_id = CASE WHEN $2::smallint = 10 THEN $3::bigint ELSE order_id END,
	       ordered_at = CASE WHEN $2::smallint = 10 THEN statement_timestamp() ELSE ordered_at END,
	       released_at = CASE WHEN $2::smallint = 40 THEN statement_timestamp() ELSE released_at END,
	       failure_code = coalesce($4::text, failure_code),
	       version = version + 1,
	       updated_at = statement_timestamp()
	 WHERE reservation_id = $1
	   AND (SELECT status FROM lk) = ANY ($5::smallint[])
	RETURNING reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),
	redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at
)
SELECT u.*, coalesce(u.version, {schema}.inventory_refuse(w.code, NULL, NULL, NULL, NULL, $1::text))
  FROM (SELECT 1) AS one
  LEFT JOIN upd AS u ON true
  LEFT JOIN LATERAL (
	SELECT CASE WHEN l.status IS NULL THEN 'SK009'
	            WHEN l.status = $2::smallint THEN 'SK010'
	            ELSE 'SK011' END AS code
	  FROM (SELECT 1) AS o
	  LEFT JOIN lk AS l ON true
	 WHERE u.version IS NULL) AS w ON true
