-- Store.Archive.

-- name: archive
-- Moves at most $2 rows processed before $1 from consumer_inbox to
-- consumer_inbox_history in one atomic statement, walking the primary key
-- from ($3, $4) on (keyset), so that a run reads each row about once. The
-- rows are locked (SKIP LOCKED), deleted, and inserted into the history from
-- what the DELETE returned. Returns the rows moved, the rows selected and
-- the key of the last one selected (the next batch's cursor).
-- $1 = processed_before (timestamptz)
-- $2 = batch_size (int4)
-- $3 = after_group (text): the keyset cursor's consumer group ('' to start)
-- $4 = after_message_id (uuid): the keyset cursor's message id
-- index: pk_consumer_inbox
-- explain with: now() - interval '29 days', 1000, '', '00000000-0000-0000-0000-000000000000'
WITH doomed AS (
	SELECT consumer_group, message_id
	FROM {schema}.consumer_inbox
	WHERE (consumer_group, message_id) > ($3::text, $4::uuid)
	  AND processed_at < $1
	ORDER BY consumer_group, message_id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), moved AS (
	DELETE FROM {schema}.consumer_inbox AS i
	USING doomed AS d
	WHERE i.consumer_group = d.consumer_group AND i.message_id = d.message_id
	RETURNING i.consumer_group, i.message_id, i.topic, i.tag, i.message_key, i.ref, i.payload_hash,
	          i.status, i.result_code, i.result_payload, i.created_at, i.processed_at
), kept AS (
	INSERT INTO {schema}.consumer_inbox_history (
		consumer_group, message_id, topic, tag, message_key, ref, payload_hash,
		status, result_code, result_payload, created_at, processed_at)
	SELECT consumer_group, message_id, topic, tag, message_key, ref, payload_hash,
	       status, result_code, result_payload, created_at, processed_at
	FROM moved
	RETURNING 1
), last AS (
	SELECT consumer_group, message_id FROM doomed ORDER BY consumer_group DESC, message_id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM kept), (SELECT count(*) FROM doomed),
       (SELECT consumer_group FROM last), (SELECT message_id FROM last)
