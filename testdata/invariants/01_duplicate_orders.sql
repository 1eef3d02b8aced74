-- Invariant 1: no duplicate order per (activity, sku, user).
SELECT activity_id, sku_id, user_id, count(*)
  FROM {schema}.orders
 GROUP BY activity_id, sku_id, user_id
HAVING count(*) > 1;
