-- Invariant 2: each bucket conserves its stock (inventory_stock_row: the
-- bucket rows, and a token SKU as bucket 0 with its token counts).
SELECT *
  FROM {schema}.inventory_stock_row
 WHERE total_stock <> available_stock + allocated_stock
    OR available_stock < 0
    OR allocated_stock < 0;
