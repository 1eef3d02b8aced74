-- Store.Rebalance: lock a SKU's buckets, then move available stock between
-- them with an ADJUST ledger row per bucket changed.

-- name: apply_moves
-- apply_moves applies the computed deltas to the locked buckets and writes
-- one ADJUST ledger row per bucket. The expected_available guard re-checks
-- that each bucket is what was read under the lock (it always is; a
-- mismatch means the lock was not held and fails the call).
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket_nos (int2[]): the buckets changed
-- $4 = deltas (int4[]): the change of each
-- $5 = expect (int4[]): the available stock each must still hold
-- $6 = move_id (text): the move's id, in the ledger keys ADJUST:<move_id>:<bucket>
-- $7 = reason (text)
-- $8 = operator (text)
-- $9 = approval_ref (text)
-- index: pk_sku_inventory
WITH m AS (
	SELECT * FROM unnest($3::smallint[], $4::int[], $5::int[]) AS m (bucket_no, delta, expected_available)
), upd AS (
	UPDATE {schema}.sku_inventory AS s
	   SET available_stock = s.available_stock + m.delta,
	       total_stock = s.total_stock + m.delta,
	       version = s.version + 1,
	       updated_at = statement_timestamp()
	  FROM m
	 WHERE s.activity_id = $1 AND s.sku_id = $2 AND s.bucket_no = m.bucket_no
	   AND s.available_stock = m.expected_available
	   AND s.available_stock + m.delta >= 0
	RETURNING s.bucket_no, m.delta, s.available_stock - m.delta AS before_available,
	          s.available_stock AS after_available, s.allocated_stock
), led AS (
	INSERT INTO {schema}.inventory_ledger (
		idempotency_key, activity_id, sku_id, inventory_bucket, ledger_type,
		total_delta, available_delta, allocated_delta,
		before_available, after_available, before_allocated, after_allocated, reason, operator, approval_ref)
	SELECT 'ADJUST:' || $6::text || ':' || u.bucket_no, $1, $2, u.bucket_no, 30,
	       u.delta, u.delta, 0,
	       u.before_available, u.after_available, u.allocated_stock, u.allocated_stock, $7, $8, $9
	  FROM upd AS u
	RETURNING inventory_bucket, ledger_id, idempotency_key, created_at
)
SELECT u.bucket_no, u.delta, u.before_available, u.after_available, l.ledger_id,
       l.idempotency_key, u.allocated_stock, l.created_at
  FROM upd AS u
  JOIN led AS l ON l.inventory_bucket = u.bucket_no
 ORDER BY u.bucket_no

-- name: lock_buckets
-- Store.Rebalance: locks every bucket of the SKU (FOR UPDATE, in bucket
-- order) and returns their available stock, from which the moves are
-- computed.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- index: pk_sku_inventory
SELECT bucket_no, available_stock
  FROM {schema}.sku_inventory
 WHERE activity_id = $1 AND sku_id = $2
 ORDER BY bucket_no
   FOR UPDATE
