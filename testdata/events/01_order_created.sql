-- Every live order has its ORDER_CREATED event (in the outbox or its history).
SELECT o.order_id
  FROM {schema}.orders AS o
 WHERE o.status IN (10, 20, 30, 60)
   AND NOT EXISTS (SELECT 1 FROM {schema}.event_outbox AS e
                    WHERE e.dedup_key = 'ORDER_CREATED:' || o.order_id::text)
   AND NOT EXISTS (SELECT 1 FROM {schema}.event_outbox_history AS e
                    WHERE e.dedup_key = 'ORDER_CREATED:' || o.order_id::text);
