-- Every rejected reservation, every reservation released by a cancel and
-- every expired one has its FRONTDOOR_RELEASE event (the front door gets
-- the unit back).
SELECT r.reservation_id, r.status
  FROM {schema}.inventory_reservation AS r
 WHERE r.status IN (20, 40, 50)
   AND NOT EXISTS (SELECT 1 FROM {schema}.event_outbox AS e
                    WHERE e.dedup_key = 'FRONTDOOR_RELEASE:' || r.reservation_id::text)
   AND NOT EXISTS (SELECT 1 FROM {schema}.event_outbox_history AS e
                    WHERE e.dedup_key = 'FRONTDOOR_RELEASE:' || r.reservation_id::text);
