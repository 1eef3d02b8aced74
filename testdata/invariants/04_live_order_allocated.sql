-- Invariant 3: every live order has its ALLOCATE ledger row.
SELECT o.order_id
  FROM {schema}.orders AS o
  LEFT JOIN {schema}.inventory_ledger AS l
    ON l.order_id = o.order_id
   AND l.idempotency_key = 'ALLOCATE:' || o.reservation_id::text
 WHERE o.status IN (10, 20, 30, 60)
   AND l.ledger_id IS NULL;
