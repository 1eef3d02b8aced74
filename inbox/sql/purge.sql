-- Store.Purge.

-- name: purge
-- Deletes at most $2 rows processed before $1. The BRIN index on
-- created_at finds them: processed_at >= created_at (ck_inbox_times), so
-- every such row was also created before $1; SKIP LOCKED steps over rows
-- another purger holds instead of waiting for it.
-- $1 = processed_before (timestamptz)
-- $2 = batch_size (int4)
-- index: idx_inbox_created_brin, pk_consumer_inbox
-- explain with: now() - interval '29 days', 1000
WITH doomed AS (
	SELECT consumer_group, message_id
	FROM {schema}.consumer_inbox
	WHERE created_at < $1 AND processed_at < $1
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.consumer_inbox i
USING doomed d
WHERE i.consumer_group = d.consumer_group AND i.message_id = d.message_id
