-- Store.GetReservation.

-- name: get_reservation
-- Store.GetReservation: one reservation by its id.
-- $1 = reservation_id (uuid)
-- index: inventory_reservation_pkey
SELECT reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),
	redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at FROM {schema}.inventory_reservation WHERE reservation_id = $1
