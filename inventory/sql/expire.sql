-- Store.ExpireReservations: the sweeper of PENDING_DB reservations whose
-- time ran out, by the partial index idx_reservation_pending_expire.

-- name: expire
-- expire is the reservation sweeper: up to $1 PENDING_DB reservations
-- past expires_at, oldest first, through idx_reservation_pending_expire,
-- locked FOR UPDATE SKIP LOCKED (a reservation whose order message is being
-- processed right now is locked by that transaction and left alone), then
-- moved to EXPIRED with the guard re-checked on the locked row.
-- $1 = limit (int4): the most reservations expired
-- $2 = code (text): the failure code recorded
-- index: idx_reservation_pending_expire, inventory_reservation_pkey
WITH due AS (
	SELECT reservation_id
	  FROM {schema}.inventory_reservation
	 WHERE status = 0 AND expires_at <= statement_timestamp()
	 ORDER BY expires_at, reservation_id
	 LIMIT $1
	   FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.inventory_reservation AS r
   SET status = 50,
       failure_code = coalesce(r.failure_code, $2),
       version = r.version + 1,
       updated_at = statement_timestamp()
  FROM due
 WHERE r.reservation_id = due.reservation_id
   AND r.status = 0
   AND r.expires_at <= statement_timestamp()
RETURNING r.reservation_id, r.request_id, r.first_message_id, r.activity_id, r.sku_id, r.user_id,
	r.inventory_bucket, r.quantity, coalesce(r.order_id, 0), r.status, coalesce(r.failure_code, ''),
	r.redis_reserved_at, r.expires_at, r.ordered_at, r.released_at, r.version, r.created_at, r.updated_at
