-- Invariant 4: a paid order is never cancelled (a refund has its own
-- status).
SELECT *
  FROM {schema}.orders
 WHERE status = 40
   AND paid_at IS NOT NULL;
