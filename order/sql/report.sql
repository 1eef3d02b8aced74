-- Store.QuantitiesByStatus.

-- name: quantities_by_status
-- Orders, quantities and amounts per SKU and status of one activity (one
-- SKU or all).
-- Either index leading with (activity_id, sku_id) serves: it reads the
-- activity's orders.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8): NULL for every SKU
-- index: idx_orders_activity_status | uq_orders_user_sku
SELECT activity_id, sku_id, status, count(*), coalesce(sum(quantity), 0), coalesce(sum(total_amount), 0)
  FROM {schema}.orders
 WHERE activity_id = $1 AND ($2::bigint IS NULL OR sku_id = $2)
 GROUP BY activity_id, sku_id, status
 ORDER BY sku_id, status
