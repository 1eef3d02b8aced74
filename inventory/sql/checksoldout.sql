-- Store.QueueCheckSoldOut: the sold-out condition of a bucket, as a value
-- (pgtx.Return) or raised (pgtx.Abort). Both share the refusal read (a test
-- checks). Bucket 0 of a token SKU (migration 010) is sold out when fewer
-- than the quantity of its tokens are free (counted up to the quantity, by
-- idx_token_free).

-- name: sold_out_code
-- sold_out_code is sold_out_abort's condition: NULL when the bucket is
-- sold out, else the SQLSTATE of the condition that holds instead.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2)
-- $4 = quantity (int4): the units asked for
-- index: pk_sku_inventory, pk_inventory_sku
SELECT CASE
	               WHEN k.sku_id IS NULL THEN 'SK004'
	               WHEN NOT (k.sale_status = 10
	                         AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                         AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at)) THEN 'SK002'
	               WHEN k.token_stock AND $3 = 0 THEN
	                 CASE WHEN (SELECT count(*) FROM (SELECT 1 FROM {schema}.inventory_token AS t
	                                                   WHERE t.activity_id = $1 AND t.sku_id = $2 AND t.reservation_id IS NULL
	                                                   LIMIT $4::int) AS f) >= $4::int THEN 'SK008' END
	               WHEN b.bucket_no IS NULL THEN 'SK003'
	               WHEN b.available_stock >= $4::int THEN 'SK008'
	             END AS code
	        FROM (SELECT 1) AS o
	        LEFT JOIN {schema}.inventory_sku AS k ON k.activity_id = $1 AND k.sku_id = $2
	        LEFT JOIN {schema}.sku_inventory AS b ON b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3

-- name: sold_out_abort
-- sold_out_abort raises unless the sale of $1/$2 is on (status and
-- window) and bucket $3 holds fewer than $4 available units: exactly when
-- AllocateBucket would answer ErrSoldOut for this bucket now. It calls
-- inventory_refuse with the condition that holds instead: the SKU unknown
-- (SK004), the sale not on (SK002), the bucket unknown (SK003) or the
-- bucket not sold out (SK008). It reads the bucket without locking it. Parameters: $1 activity, $2 SKU, $3 bucket,
-- $4 quantity.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2)
-- $4 = quantity (int4): the units asked for
-- index: pk_sku_inventory, pk_inventory_sku
SELECT CASE WHEN w.code IS NULL THEN 1
            ELSE {schema}.inventory_refuse(w.code, $1, $2, $3, $4::int, NULL) END
  FROM (SELECT CASE
	               WHEN k.sku_id IS NULL THEN 'SK004'
	               WHEN NOT (k.sale_status = 10
	                         AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                         AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at)) THEN 'SK002'
	               WHEN k.token_stock AND $3 = 0 THEN
	                 CASE WHEN (SELECT count(*) FROM (SELECT 1 FROM {schema}.inventory_token AS t
	                                                   WHERE t.activity_id = $1 AND t.sku_id = $2 AND t.reservation_id IS NULL
	                                                   LIMIT $4::int) AS f) >= $4::int THEN 'SK008' END
	               WHEN b.bucket_no IS NULL THEN 'SK003'
	               WHEN b.available_stock >= $4::int THEN 'SK008'
	             END AS code
	        FROM (SELECT 1) AS o
	        LEFT JOIN {schema}.inventory_sku AS k ON k.activity_id = $1 AND k.sku_id = $2
	        LEFT JOIN {schema}.sku_inventory AS b ON b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3) AS w
