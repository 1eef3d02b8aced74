-- The relay in InTx mode (RelayConfig.InTx): it locks ready events, publishes
-- them and marks them in the same transaction.

-- name: lock
-- The claim of a relay in InTx mode (RelayConfig.InTx): the candidates of
-- claim, locked (FOR UPDATE SKIP LOCKED), not updated; locked_at is the
-- statement's time. Shares its ready-rows part with claim (a test checks).
-- $1 = limit (int4): the most events to lock
-- index: idx_outbox_ready, idx_outbox_ordering
SELECT o.event_id, o.seq, o.topic, coalesce(o.tag, ''), o.message_key, o.aggregate_type,
       o.aggregate_id, coalesce(o.ordering_key, ''), o.schema_version, o.payload, o.headers,
       o.retry_count, o.max_retry, o.created_at, statement_timestamp(), o.available_at
FROM {schema}.event_outbox AS o
	WHERE o.status IN (0, 30)
	  AND o.available_at <= statement_timestamp()
	  AND (o.ordering_key IS NULL OR NOT EXISTS (
		SELECT 1 FROM {schema}.event_outbox AS p
		WHERE p.ordering_key = o.ordering_key
		  AND p.seq < o.seq
		  AND p.status IN (0, 10, 30)))
	ORDER BY o.available_at, o.created_at, o.event_id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED

-- name: lock_after
-- lock starting after the relay's cursor.
-- $1 = limit (int4): the most events to lock
-- $2 = after_available_at (timestamptz): the relay's cursor
-- $3 = after_created_at (timestamptz)
-- $4 = after_event_id (uuid)
-- index: idx_outbox_ready, idx_outbox_ordering
SELECT o.event_id, o.seq, o.topic, coalesce(o.tag, ''), o.message_key, o.aggregate_type,
       o.aggregate_id, coalesce(o.ordering_key, ''), o.schema_version, o.payload, o.headers,
       o.retry_count, o.max_retry, o.created_at, statement_timestamp(), o.available_at
FROM {schema}.event_outbox AS o
	WHERE o.status IN (0, 30)
	  AND o.available_at <= statement_timestamp()
	  AND (o.available_at, o.created_at, o.event_id) > ($2::timestamptz, $3::timestamptz, $4::uuid)
	  AND (o.ordering_key IS NULL OR NOT EXISTS (
		SELECT 1 FROM {schema}.event_outbox AS p
		WHERE p.ordering_key = o.ordering_key
		  AND p.seq < o.seq
		  AND p.status IN (0, 10, 30)))
	ORDER BY o.available_at, o.created_at, o.event_id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED

-- name: lock_dead_blocks_key
-- lock with Config.DeadBlocksKey.
-- $1 = limit (int4): the most events to lock
-- index: idx_outbox_ready, idx_outbox_ordering
SELECT o.event_id, o.seq, o.topic, coalesce(o.tag, ''), o.message_key, o.aggregate_type,
       o.aggregate_id, coalesce(o.ordering_key, ''), o.schema_version, o.payload, o.headers,
       o.retry_count, o.max_retry, o.created_at, statement_timestamp(), o.available_at
FROM {schema}.event_outbox AS o
	WHERE o.status IN (0, 30)
	  AND o.available_at <= statement_timestamp()
	  AND (o.ordering_key IS NULL OR NOT EXISTS (
		SELECT 1 FROM {schema}.event_outbox AS p
		WHERE p.ordering_key = o.ordering_key
		  AND p.seq < o.seq
		  AND p.status IN (0, 10, 30, 40)))
	ORDER BY o.available_at, o.created_at, o.event_id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED

-- name: lock_after_dead_blocks_key
-- lock_after with Config.DeadBlocksKey.
-- $1 = limit (int4): the most events to lock
-- $2 = after_available_at (timestamptz): the relay's cursor
-- $3 = after_created_at (timestamptz)
-- $4 = after_event_id (uuid)
-- index: idx_outbox_ready, idx_outbox_ordering
SELECT o.event_id, o.seq, o.topic, coalesce(o.tag, ''), o.message_key, o.aggregate_type,
       o.aggregate_id, coalesce(o.ordering_key, ''), o.schema_version, o.payload, o.headers,
       o.retry_count, o.max_retry, o.created_at, statement_timestamp(), o.available_at
FROM {schema}.event_outbox AS o
	WHERE o.status IN (0, 30)
	  AND o.available_at <= statement_timestamp()
	  AND (o.available_at, o.created_at, o.event_id) > ($2::timestamptz, $3::timestamptz, $4::uuid)
	  AND (o.ordering_key IS NULL OR NOT EXISTS (
		SELECT 1 FROM {schema}.event_outbox AS p
		WHERE p.ordering_key = o.ordering_key
		  AND p.seq < o.seq
		  AND p.status IN (0, 10, 30, 40)))
	ORDER BY o.available_at, o.created_at, o.event_id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED

-- name: mark_sent_locked
-- Marks SENT the events the transaction holds locked.
-- $1 = event_ids (text[] of uuid)
-- index: event_outbox_pkey
UPDATE {schema}.event_outbox
SET status = 20,
	    sent_at = statement_timestamp(),
	    locked_by = NULL,
	    locked_at = NULL,
	    last_error = NULL,
	    updated_at = statement_timestamp()
WHERE event_id = ANY((SELECT $1::text[]::uuid[])::uuid[])
  AND status IN (0, 30)

-- name: mark_failed_locked
-- Records failed publishes of events the transaction holds locked:
-- RETRY after the backoff, or DEAD after the last allowed attempt. Returns
-- the new status of each.
-- $1 = event_ids (text[] of uuid)
-- $2 = errors (text[]): last_error of each
-- $3 = backoffs (int8[]): microseconds until each is ready again
-- index: event_outbox_pkey
WITH f AS (
	SELECT * FROM unnest($1::text[]::uuid[], $2::text[], $3::int8[]) AS f(id, err, backoff_us)
)
UPDATE {schema}.event_outbox AS o
SET status = CASE WHEN o.retry_count + 1 >= o.max_retry THEN 40 ELSE 30 END,
    retry_count = o.retry_count + 1,
    available_at = (statement_timestamp() AT TIME ZONE 'UTC' + f.backoff_us * interval '1 microsecond') AT TIME ZONE 'UTC',
    locked_by = NULL,
    locked_at = NULL,
    last_error = f.err,
    updated_at = statement_timestamp()
FROM f
WHERE o.event_id = f.id
  AND o.status IN (0, 30)
RETURNING o.status
