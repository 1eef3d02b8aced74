-- Every paid order has its ORDER_PAID event.
SELECT o.order_id
  FROM {schema}.orders AS o
 WHERE o.paid_at IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM {schema}.event_outbox AS e
                    WHERE e.dedup_key = 'ORDER_PAID:' || o.order_id::text);
