-- Store.ArchiveSent.

-- name: archive_sent
-- Moves up to $3 SENT events sent before $2 whose id is greater than $1
-- from event_outbox to event_outbox_history in one statement (one atomic
-- step): locked (SKIP LOCKED), deleted with their status re-checked,
-- inserted from what the DELETE returned. Returns the rows moved, the rows
-- examined and the last id examined.
-- $1 = after (uuid): the keyset cursor
-- $2 = sent_before (timestamptz)
-- $3 = batch_size (int4)
-- index: event_outbox_pkey
-- explain with: '00000000-0000-0000-0000-000000000000', now() - interval '1 day', 1000
WITH victims AS (
	SELECT event_id
	FROM {schema}.event_outbox
	WHERE event_id > $1
	  AND status = 20
	  AND sent_at < $2
	ORDER BY event_id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), moved AS (
	DELETE FROM {schema}.event_outbox AS o
	USING victims AS v
	WHERE o.event_id = v.event_id
	  AND o.status = 20
	RETURNING o.event_id, o.seq, o.dedup_key, o.aggregate_type, o.aggregate_id, o.topic, o.tag,
	          o.message_key, o.ordering_key, o.schema_version, o.payload, o.headers, o.status,
	          o.available_at, o.retry_count, o.max_retry, o.locked_by, o.locked_at, o.sent_at,
	          o.last_error, o.created_at, o.updated_at
), kept AS (
	INSERT INTO {schema}.event_outbox_history (
		event_id, seq, dedup_key, aggregate_type, aggregate_id, topic, tag,
		message_key, ordering_key, schema_version, payload, headers, status,
		available_at, retry_count, max_retry, locked_by, locked_at, sent_at,
		last_error, created_at, updated_at)
	SELECT event_id, seq, dedup_key, aggregate_type, aggregate_id, topic, tag,
	       message_key, ordering_key, schema_version, payload, headers, status,
	       available_at, retry_count, max_retry, locked_by, locked_at, sent_at,
	       last_error, created_at, updated_at
	FROM moved
	RETURNING event_id
)
SELECT (SELECT count(*) FROM kept),
       (SELECT count(*) FROM victims),
       (SELECT event_id FROM victims ORDER BY event_id DESC LIMIT 1)
