-- Store.GetBucket and Store.Stock: the buckets' counters, read from
-- inventory_stock_row (migration 010): the bucket rows, and for a token SKU
-- bucket 0 with its token counts.

-- name: bucket
-- Store.GetBucket: one bucket's counters.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2)
-- index: pk_sku_inventory
SELECT activity_id, sku_id, bucket_no, total_stock, available_stock, allocated_stock, version, updated_at FROM {schema}.inventory_stock_row
WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3

-- name: stock
-- Store.Stock: the SKU's planned stock and bucket count with every
-- bucket's counters, in bucket order (no bucket row: never provisioned).
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- index: pk_inventory_sku, pk_sku_inventory
SELECT k.planned_stock, k.bucket_count, i.activity_id, i.sku_id, i.bucket_no, i.total_stock, i.available_stock,
       i.allocated_stock, i.version, i.updated_at
  FROM {schema}.inventory_sku AS k
  LEFT JOIN {schema}.inventory_stock_row AS i ON i.activity_id = k.activity_id AND i.sku_id = k.sku_id
 WHERE k.activity_id = $1 AND k.sku_id = $2
 ORDER BY i.bucket_no
