package inventory

import "testing"

// TestSharedSQLFragments checks that the statements written out in full
// in sql/*.sql carry identical copies of the parts they share: the
// decrement of one bucket and its guards in the plain and Citus
// allocations and the one-batch forms, the refusal reads, the ledger
// insert, the reservation insert and the reservation columns the scans
// read.
func TestSharedSQLFragments(t *testing.T) {
	t.Parallel()
	checks := []struct{ a, b, from, to string }{
		// the token claim (pick and claim) of the one-batch allocations
		{"decrement_abort", "decrement_then_raise", "), pick_from AS (", "RETURNING t.version"},
		// the token claim of the plain and Citus allocations
		{"allocate", "allocate_routed", "), rlk AS (", "AND quantity = $4::int AND user_id = $9 AND status IN (0, 10)"},
		{"allocate", "allocate_routed", "), pick_from AS (", "FROM {schema}.inventory_token AS t"},
		{"allocate", "allocate_routed", "), pick AS (", "SELECT $4::int, 0, 0, $4::int, max(version) FROM claim HAVING count(*) > 0"},
		// the decrement's guard on the reservation and the sale, and its RETURNING (plain and Citus allocation)
		{"allocate", "allocate_routed", "AND EXISTS (SELECT 1 FROM r", "allocated_stock - $4::int AS before_allocated, allocated_stock AS after_allocated, version"},
		// what explains a refusal: the reservation and the sale (plain and Citus allocation)
		{"allocate", "allocate_routed", "coalesce(rlk.activity_id, r.activity_id), coalesce(rlk.sku_id, r.sku_id),", "sk.sale_status, sk.sale_starts_at, sk.sale_ends_at, sk.selling, sk.at"},
		// the guards of the one-batch decrements
		{"decrement_abort", "decrement_then_raise", "AND EXISTS (SELECT 1 FROM {schema}.inventory_reservation AS r", "AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at))"},
		// the reads r and sk of the allocation (plain and Citus)
		{"allocate", "allocate_routed", "WITH r AS (", "WHERE activity_id = $1 AND sku_id = $2\n)"},
		// the refusal read of the one-batch decrements
		{"decrement_abort", "decrement_then_raise", "LEFT JOIN LATERAL (", "WHERE u.version IS NULL) AS w ON true"},
		// the end of the one-batch stock changes
		{"decrement_abort", "release_abort", ")),", "FROM (SELECT 1) AS one LEFT JOIN took AS u ON true"},
		// the ledger CTE of the one-batch stock changes
		{"decrement_abort", "release_abort", ", led AS (", "WHERE l.idempotency_key ="},
		// the decrement of one bucket
		{"allocate", "allocate_routed", "UPDATE {schema}.sku_inventory", "AND available_stock >= $4::int"},
		{"allocate", "decrement_abort", "UPDATE {schema}.sku_inventory", "AND available_stock >= $4::int"},
		{"allocate", "decrement_then_raise", "UPDATE {schema}.sku_inventory", "AND available_stock >= $4::int"},
		// the increment of one bucket (release)
		{"release_abort", "release_routed", "UPDATE {schema}.sku_inventory", "AND allocated_stock >= $4::int"},
		// the ledger insert's columns
		{"allocation_ledger", "allocation_ledger_from_bucket", "INSERT INTO {schema}.inventory_ledger (", "before_available, after_available, before_allocated, after_allocated, reason)"},
		{"allocation_ledger", "allocation_ledger_from_bucket_returning", "INSERT INTO {schema}.inventory_ledger (", "before_available, after_available, before_allocated, after_allocated, reason)"},
		{"allocation_ledger", "allocation_ledger_returning", "INSERT INTO {schema}.inventory_ledger (", "before_available, after_available, before_allocated, after_allocated, reason)"},
		{"allocation_ledger", "allocation_placeholder", "INSERT INTO {schema}.inventory_ledger (", "before_available, after_available, before_allocated, after_allocated, reason)"},
		{"allocation_ledger", "release_ledger", "INSERT INTO {schema}.inventory_ledger (", "before_available, after_available, before_allocated, after_allocated, reason)"},
		{"allocation_ledger", "release_ledger_returning", "INSERT INTO {schema}.inventory_ledger (", "before_available, after_available, before_allocated, after_allocated, reason)"},
		{"allocation_ledger", "release_placeholder", "INSERT INTO {schema}.inventory_ledger (", "before_available, after_available, before_allocated, after_allocated, reason)"},
		// the reservation insert
		{"acquire", "acquire_insert", "INSERT INTO {schema}.inventory_reservation (", "nullif($11::int8, 0), CASE WHEN $11::int8 > 0 THEN statement_timestamp() END)"},
		{"acquire", "insert_reservation_abort", "INSERT INTO {schema}.inventory_reservation (", "nullif($11::int8, 0), CASE WHEN $11::int8 > 0 THEN statement_timestamp() END)"},
		{"acquire", "insert_reservation_abort_returning", "INSERT INTO {schema}.inventory_reservation (", "nullif($11::int8, 0), CASE WHEN $11::int8 > 0 THEN statement_timestamp() END)"},
		// the Citus statements filling (or deleting) the ledger placeholder
		{"allocate_routed", "release_routed", ", led AS (", "SELECT l.ledger_id, l.created_at"},
		// the reservation columns, qualified
		{"expire", "record_compensation", "r.reservation_id, r.request_id, r.first_message_id, r.activity_id, r.sku_id, r.user_id,", "r.redis_reserved_at, r.expires_at, r.ordered_at, r.released_at, r.version, r.created_at, r.updated_at"},
		// the reservation columns as scanReservationInto reads them
		{"acquire", "acquire_existing", "reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,\n\tinventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),", "redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at"},
		{"acquire", "acquire_insert", "reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,\n\tinventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),", "redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at"},
		{"acquire", "get_reservation", "reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,\n\tinventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),", "redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at"},
		{"acquire", "insert_rejected_abort_returning", "reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,\n\tinventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),", "redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at"},
		{"acquire", "insert_reservation_abort_returning", "reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,\n\tinventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),", "redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at"},
		{"acquire", "transition", "reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,\n\tinventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),", "redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at"},
		{"acquire", "transition_abort", "reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,\n\tinventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),", "redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at"},
		// the RETURNING of a reservation
		{"acquire", "insert_rejected_abort_returning", "RETURNING reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,", "redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at"},
		{"acquire", "insert_reservation_abort_returning", "RETURNING reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,", "redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at"},
		{"acquire", "transition", "RETURNING reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,", "redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at"},
		{"acquire", "transition_abort", "RETURNING reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,", "redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at"},
		// the sold-out condition
		{"sold_out_abort", "sold_out_code", "SELECT CASE\n\t               WHEN k.sku_id IS NULL THEN 'SK004'", "LEFT JOIN {schema}.sku_inventory AS b ON b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3"},
		// the CTEs of the transition
		{"transition", "transition_abort", "WITH lk AS (", "redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at\n)"},
		// the findings of the audit, whole and from the checkpoint (the replay CTEs differ)
		{"audit", "audit_incremental", "SELECT 'bucket_conservation'", "ORDER BY 1, 2, 3, 4, 5"},
	}
	for _, c := range checks {
		if err := sqlFiles.SameFragment(c.a, c.b, c.from, c.to); err != nil {
			t.Error(err)
		}
	}
}
