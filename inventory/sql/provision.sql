-- Store.Provision: a SKU, its buckets and their PROVISION ledger rows.

-- name: provision
-- provision inserts the SKU, its buckets and one PROVISION ledger row per
-- bucket in one statement, or, when the SKU exists, returns the existing
-- split. The remainder goes to the first buckets. With tokens ($5) the SKU
-- has one bucket (bucket 0, $4 = 1) and no sku_inventory row: its stock is
-- one inventory_token row per unit (token_no 0 .. stock - 1), free, and
-- its PROVISION row is bucket 0's.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = stock (int4): the total stock
-- $4 = buckets (int2): the number of buckets
-- $5 = tokens (bool): one token row per unit instead of bucket rows
-- index: pk_inventory_sku
WITH sku AS (
	INSERT INTO {schema}.inventory_sku (activity_id, sku_id, planned_stock, bucket_count, token_stock)
	VALUES ($1, $2, $3, $4, $5)
	ON CONFLICT DO NOTHING
	RETURNING activity_id, sku_id, planned_stock, bucket_count, token_stock
), split AS (
	SELECT s.activity_id, s.sku_id, g.n::smallint AS bucket_no,
	       s.planned_stock / s.bucket_count
	         + CASE WHEN g.n < s.planned_stock % s.bucket_count THEN 1 ELSE 0 END AS stock
	  FROM sku AS s
	 CROSS JOIN LATERAL generate_series(0, s.bucket_count - 1) AS g(n)
), buckets AS (
	INSERT INTO {schema}.sku_inventory (activity_id, sku_id, bucket_no, total_stock, available_stock, allocated_stock)
	SELECT activity_id, sku_id, bucket_no, stock, stock, 0 FROM split
	 WHERE NOT $5
	RETURNING bucket_no
), tokens AS (
	INSERT INTO {schema}.inventory_token (activity_id, sku_id, token_no)
	SELECT s.activity_id, s.sku_id, g.n
	  FROM sku AS s
	 CROSS JOIN LATERAL generate_series(0, s.planned_stock - 1) AS g(n)
	 WHERE s.token_stock
	RETURNING token_no
), ledger AS (
	INSERT INTO {schema}.inventory_ledger (
		idempotency_key, activity_id, sku_id, inventory_bucket, ledger_type,
		total_delta, available_delta, allocated_delta,
		before_available, after_available, before_allocated, after_allocated, reason)
	SELECT 'PROVISION:' || activity_id || ':' || sku_id || ':' || bucket_no,
	       activity_id, sku_id, bucket_no, 40,
	       stock, stock, 0,
	       0, stock, 0, 0, 'PROVISION'
	  FROM split
	RETURNING ledger_id
)
SELECT true, planned_stock, bucket_count, token_stock,
       (SELECT count(*) FROM buckets)::int + 0 * (SELECT count(*) FROM ledger)::int
         + 0 * (SELECT count(*) FROM tokens)::int
  FROM sku
UNION ALL
SELECT false, planned_stock, bucket_count, token_stock, 0
  FROM {schema}.inventory_sku
 WHERE activity_id = $1 AND sku_id = $2
   AND NOT EXISTS (SELECT 1 FROM sku)
