-- Store.EventsByStatus.

-- name: events_by_status
-- The events per topic, tag and status, the SENT history included: the
-- outbox side of a reconciliation.
-- $1 = topic (text): NULL for every topic
-- index: none (a report: it reads every row)
-- full scan: event_outbox, event_outbox_history (a report over every row; Store.Stats is the cheap gauge)
SELECT topic, coalesce(tag, ''), status, count(*)
  FROM (SELECT topic, tag, status FROM {schema}.event_outbox
        UNION ALL
        SELECT topic, tag, status FROM {schema}.event_outbox_history) AS e
 WHERE ($1::text IS NULL OR topic = $1)
 GROUP BY topic, coalesce(tag, ''), status
 ORDER BY 1, 2, 3
