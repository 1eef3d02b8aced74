-- Invariant 2: each bucket conserves its stock.
SELECT *
  FROM {schema}.sku_inventory
 WHERE total_stock <> available_stock + allocated_stock
    OR available_stock < 0
    OR allocated_stock < 0;
