-- Store.RecordCompensationFailure: counts a failed compensation of a
-- reservation and moves it to MANUAL_REQUIRED past the limit.

-- name: record_compensation
-- record_compensation locks the reservation in lk (a locking read in
-- Read Committed waits for a concurrent writer and returns the row's
-- latest committed version), counts the failure when that version is
-- RELEASE_PENDING, and otherwise reads the row in cur with a locking read
-- too: the refusal reports the row as the writer left it, never the
-- version of the statement's snapshot (a waiter behind an escalation must
-- see MANUAL_REQUIRED, not RELEASE_PENDING).
-- $1 = reservation_id (uuid)
-- $2 = max_failures (int4): the failures after which the reservation needs a human (MANUAL_REQUIRED)
-- $3 = code (text): the failure code recorded then
-- index: inventory_reservation_pkey
WITH lk AS (
	SELECT status
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $1
	   FOR UPDATE
), upd AS (
	UPDATE {schema}.inventory_reservation AS r
	   SET compensation_failures = r.compensation_failures + 1,
	       status = CASE WHEN r.compensation_failures + 1 >= $2 THEN 60 ELSE r.status END,
	       failure_code = CASE WHEN r.compensation_failures + 1 >= $2 THEN $3 ELSE r.failure_code END,
	       version = r.version + 1,
	       updated_at = statement_timestamp()
	 WHERE r.reservation_id = $1
	   AND (SELECT status FROM lk) = 30
	RETURNING r.reservation_id, r.request_id, r.first_message_id, r.activity_id, r.sku_id, r.user_id,
	r.inventory_bucket, r.quantity, coalesce(r.order_id, 0), r.status, coalesce(r.failure_code, ''),
	r.redis_reserved_at, r.expires_at, r.ordered_at, r.released_at, r.version, r.created_at, r.updated_at, r.compensation_failures
), cur AS (
	SELECT r.reservation_id, r.request_id, r.first_message_id, r.activity_id, r.sku_id, r.user_id,
	r.inventory_bucket, r.quantity, coalesce(r.order_id, 0), r.status, coalesce(r.failure_code, ''),
	r.redis_reserved_at, r.expires_at, r.ordered_at, r.released_at, r.version, r.created_at, r.updated_at, r.compensation_failures
	  FROM {schema}.inventory_reservation AS r
	 WHERE r.reservation_id = $1 AND NOT EXISTS (SELECT 1 FROM upd)
	   FOR UPDATE
)
SELECT true, * FROM upd
UNION ALL
SELECT false, * FROM cur
