-- Every paid order has its ORDER_PAID event (in the outbox or its history).
SELECT o.order_id
  FROM {schema}.orders AS o
 WHERE o.paid_at IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM {schema}.event_outbox AS e
                    WHERE e.dedup_key = 'ORDER_PAID:' || o.order_id::text)
   AND NOT EXISTS (SELECT 1 FROM {schema}.event_outbox_history AS e
                    WHERE e.dedup_key = 'ORDER_PAID:' || o.order_id::text);
