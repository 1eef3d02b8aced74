-- Every payment that arrived after its order was cancelled (recorded as
-- REFUND_PENDING or REFUNDED) has its REFUND_REQUESTED event (in the
-- outbox or its history).
SELECT p.payment_id, p.order_id
  FROM {schema}.payment_record AS p
  JOIN {schema}.orders AS o ON o.order_id = p.order_id
 WHERE o.status = 40
   AND p.status IN (40, 50)
   AND NOT EXISTS (SELECT 1 FROM {schema}.event_outbox AS e
                    WHERE e.dedup_key = 'REFUND_REQUESTED:' || p.payment_id::text)
   AND NOT EXISTS (SELECT 1 FROM {schema}.event_outbox_history AS e
                    WHERE e.dedup_key = 'REFUND_REQUESTED:' || p.payment_id::text);
