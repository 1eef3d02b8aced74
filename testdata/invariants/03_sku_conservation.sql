-- Invariant 2: the buckets of a SKU add up to its planned stock
-- (inventory_sku holds the planned stock; inventory_stock_row has a token
-- SKU as bucket 0 with its token count).
SELECT s.activity_id, s.sku_id, s.planned_stock, sum(i.total_stock) AS bucket_total
  FROM {schema}.inventory_sku AS s
  JOIN {schema}.inventory_stock_row AS i
    ON i.activity_id = s.activity_id
   AND i.sku_id = s.sku_id
 GROUP BY s.activity_id, s.sku_id, s.planned_stock
HAVING s.planned_stock <> sum(i.total_stock);
