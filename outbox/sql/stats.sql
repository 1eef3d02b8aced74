-- Store.Stats.

-- name: stats
-- Counts the events per status but SENT exactly, each count through the
-- partial index holding only that status, plus the age of the oldest
-- ready event. SENT is counted exactly only while the table has at most
-- $2 pages; otherwise the caller estimates it from reltuples and relpages.
-- $1 = table (text): the table's qualified name, cast to regclass
-- $2 = exact_sent_pages (int8): the largest table whose SENT rows are counted
-- index: idx_outbox_ready, idx_outbox_stale_sending, idx_outbox_dead
-- full scan: event_outbox (the exact SENT count, run only while the table has at most $2 pages)
SELECT
	(SELECT count(*) FROM {schema}.event_outbox WHERE status = 0),
	(SELECT count(*) FROM {schema}.event_outbox WHERE status = 10),
	(SELECT count(*) FROM {schema}.event_outbox WHERE status = 30),
	(SELECT count(*) FROM {schema}.event_outbox WHERE status = 40),
	(SELECT coalesce((extract(epoch FROM statement_timestamp() - min(created_at)) * 1000000)::int8, 0)
	   FROM {schema}.event_outbox WHERE status IN (0, 30)),
	CASE WHEN pg_relation_size(c.oid) <= $2::int8 * current_setting('block_size')::int8
	     THEN (SELECT count(*) FROM {schema}.event_outbox WHERE status = 20) END,
	c.reltuples::float8, c.relpages::int8,
	pg_relation_size(c.oid) / current_setting('block_size')::int8
FROM pg_class AS c
WHERE c.oid = $1::regclass

-- name: backlog
-- Store.Backlog: the stats statement without SENT. Counts the events
-- waiting (PENDING, SENDING, RETRY) and DEAD, each through the partial
-- index holding only that status, and the age of the oldest ready event:
-- its cost follows the events in flight and dead, never the table's size.
-- index: idx_outbox_ready, idx_outbox_stale_sending, idx_outbox_dead
SELECT
	(SELECT count(*) FROM {schema}.event_outbox WHERE status = 0),
	(SELECT count(*) FROM {schema}.event_outbox WHERE status = 10),
	(SELECT count(*) FROM {schema}.event_outbox WHERE status = 30),
	(SELECT count(*) FROM {schema}.event_outbox WHERE status = 40),
	(SELECT coalesce((extract(epoch FROM statement_timestamp() - min(created_at)) * 1000000)::int8, 0)
	   FROM {schema}.event_outbox WHERE status IN (0, 30))
