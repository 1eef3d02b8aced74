-- Store.AdjustStock and Store.Adjustments: manual adjustments of a bucket,
-- each with an ADJUST ledger row carrying its evidence.

-- name: adjust
-- adjust changes the bucket (available and total; never below zero),
-- the SKU's planned stock (so the buckets still add up to it) and writes
-- the ADJUST row with its evidence, in one statement. No ledger row with
-- the key may exist yet, nor one of the same SKU with the key the
-- adjustment had before migration 013 ($9, without the SKU); the unique
-- index is the final guard.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2)
-- $4 = delta (int4): units added (negative: removed)
-- $5 = ledger_key (text): the idempotency key
-- $6 = reason (text)
-- $7 = operator (text)
-- $8 = approval_ref (text)
-- $9 = legacy_key (text): the key before migration 013
-- index: pk_sku_inventory, pk_inventory_sku, uq_inventory_ledger_idempotency
WITH upd AS (
	UPDATE {schema}.sku_inventory
	   SET available_stock = available_stock + $4,
	       total_stock = total_stock + $4,
	       version = version + 1,
	       updated_at = statement_timestamp()
	 WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3
	   AND available_stock + $4 >= 0
	   AND NOT EXISTS (SELECT 1 FROM {schema}.inventory_ledger WHERE idempotency_key = $5)
	   AND NOT EXISTS (SELECT 1 FROM {schema}.inventory_ledger
	                    WHERE idempotency_key = $9 AND activity_id = $1 AND sku_id = $2)
	RETURNING available_stock - $4 AS before_available, available_stock AS after_available, allocated_stock
), sku AS (
	UPDATE {schema}.inventory_sku AS k
	   SET planned_stock = k.planned_stock + $4
	  FROM upd
	 WHERE k.activity_id = $1 AND k.sku_id = $2
	RETURNING k.planned_stock
), led AS (
	INSERT INTO {schema}.inventory_ledger (
		idempotency_key, activity_id, sku_id, inventory_bucket, ledger_type,
		total_delta, available_delta, allocated_delta,
		before_available, after_available, before_allocated, after_allocated, reason, operator, approval_ref)
	SELECT $5, $1, $2, $3, 30, $4, $4, 0,
	       u.before_available, u.after_available, u.allocated_stock, u.allocated_stock, $6, $7, $8
	  FROM upd AS u
	RETURNING ledger_id, created_at
)
SELECT l.ledger_id, l.created_at, u.before_available, u.after_available, s.planned_stock, u.allocated_stock,
       CASE WHEN l.ledger_id IS NULL THEN coalesce({schema}.inventory_ledger_id_now($5),
         (SELECT x.ledger_id FROM {schema}.inventory_ledger AS x
           WHERE x.idempotency_key = $9 AND x.activity_id = $1 AND x.sku_id = $2)) END,
       CASE WHEN l.ledger_id IS NULL THEN
         {schema}.inventory_available_now($1, $2, $3::smallint) END
  FROM (VALUES (1)) AS one (x)
  LEFT JOIN upd AS u ON true
  LEFT JOIN sku AS s ON true
  LEFT JOIN led AS l ON true

-- name: adjustments
-- Store.Adjustments: a SKU's ADJUST ledger rows (manual adjustments and
-- rebalance moves), oldest first.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- index: none (the ledger has no index on its SKU: an operator's read of the rare ADJUST rows, off the sale path)
-- full scan: inventory_ledger (no index on the ledger's SKU: an operator's read, off the sale path)
SELECT ledger_id, idempotency_key, activity_id, sku_id, inventory_bucket, total_delta, available_delta,
       allocated_delta, before_available, after_available, before_allocated, after_allocated,
       coalesce(operator, ''), coalesce(approval_ref, ''), reason, created_at
  FROM {schema}.inventory_ledger
 WHERE ledger_type = 30 AND activity_id = $1 AND sku_id = $2
 ORDER BY ledger_id
