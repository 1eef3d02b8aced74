-- Claim: Store.ClaimOutboxBatch, Store.QueueClaimOutboxBatch and the
-- relay's claim in lease mode. claim_dead_blocks_key* are the forms of
-- Config.DeadBlocksKey (a DEAD event also blocks its key); claim_after*
-- start after the relay's cursor. All four share the ready-rows part
-- with the InTx relay's lock statements (relay_intx.sql): a test checks.

-- name: claim
-- Claims up to $1 ready events (PENDING or RETRY whose available_at has
-- passed) for owner $2, oldest first, skipping rows other relays hold. An
-- event with an ordering key is claimable only when no earlier event (lower
-- seq) of its key is unfinished, so only the head of each key is claimed.
-- The outer scan is idx_outbox_ready, the probe idx_outbox_ordering, the
-- UPDATE the primary key.
-- $1 = limit (int4): the most events to claim
-- $2 = owner (text): the relay's name, stored in locked_by
-- index: idx_outbox_ready, idx_outbox_ordering, event_outbox_pkey
WITH candidates AS (
	SELECT o.event_id
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
)
UPDATE {schema}.event_outbox AS o
SET status = 10,
    locked_by = $2,
    locked_at = statement_timestamp(),
    updated_at = statement_timestamp()
WHERE o.event_id = ANY(ARRAY(SELECT event_id FROM candidates))
  AND o.status IN (0, 30)
RETURNING o.event_id, o.seq, o.topic, coalesce(o.tag, ''), o.message_key, o.aggregate_type,
          o.aggregate_id, coalesce(o.ordering_key, ''), o.schema_version, o.payload, o.headers,
          o.retry_count, o.max_retry, o.created_at, o.locked_at, o.available_at

-- name: claim_after
-- claim starting after a relay's cursor: a range scan of idx_outbox_ready
-- that skips the dead entries at its head.
-- $1 = limit (int4): the most events to claim
-- $2 = owner (text): the relay's name
-- $3 = after_available_at (timestamptz): the relay's cursor, the key of its last claim
-- $4 = after_created_at (timestamptz)
-- $5 = after_event_id (uuid)
-- index: idx_outbox_ready, idx_outbox_ordering, event_outbox_pkey
WITH candidates AS (
	SELECT o.event_id
	FROM {schema}.event_outbox AS o
	WHERE o.status IN (0, 30)
	  AND o.available_at <= statement_timestamp()
	  AND (o.available_at, o.created_at, o.event_id) > ($3::timestamptz, $4::timestamptz, $5::uuid)
	  AND (o.ordering_key IS NULL OR NOT EXISTS (
		SELECT 1 FROM {schema}.event_outbox AS p
		WHERE p.ordering_key = o.ordering_key
		  AND p.seq < o.seq
		  AND p.status IN (0, 10, 30)))
	ORDER BY o.available_at, o.created_at, o.event_id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED
)
UPDATE {schema}.event_outbox AS o
SET status = 10,
    locked_by = $2,
    locked_at = statement_timestamp(),
    updated_at = statement_timestamp()
WHERE o.event_id = ANY(ARRAY(SELECT event_id FROM candidates))
  AND o.status IN (0, 30)
RETURNING o.event_id, o.seq, o.topic, coalesce(o.tag, ''), o.message_key, o.aggregate_type,
          o.aggregate_id, coalesce(o.ordering_key, ''), o.schema_version, o.payload, o.headers,
          o.retry_count, o.max_retry, o.created_at, o.locked_at, o.available_at

-- name: claim_dead_blocks_key
-- claim with Config.DeadBlocksKey: a DEAD event (status 40) blocks its key too.
-- $1 = limit (int4): the most events to claim
-- $2 = owner (text): the relay's name
-- index: idx_outbox_ready, idx_outbox_ordering, event_outbox_pkey
WITH candidates AS (
	SELECT o.event_id
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
)
UPDATE {schema}.event_outbox AS o
SET status = 10,
    locked_by = $2,
    locked_at = statement_timestamp(),
    updated_at = statement_timestamp()
WHERE o.event_id = ANY(ARRAY(SELECT event_id FROM candidates))
  AND o.status IN (0, 30)
RETURNING o.event_id, o.seq, o.topic, coalesce(o.tag, ''), o.message_key, o.aggregate_type,
          o.aggregate_id, coalesce(o.ordering_key, ''), o.schema_version, o.payload, o.headers,
          o.retry_count, o.max_retry, o.created_at, o.locked_at, o.available_at

-- name: claim_after_dead_blocks_key
-- claim_after with Config.DeadBlocksKey.
-- $1 = limit (int4): the most events to claim
-- $2 = owner (text): the relay's name
-- $3 = after_available_at (timestamptz): the relay's cursor, the key of its last claim
-- $4 = after_created_at (timestamptz)
-- $5 = after_event_id (uuid)
-- index: idx_outbox_ready, idx_outbox_ordering, event_outbox_pkey
WITH candidates AS (
	SELECT o.event_id
	FROM {schema}.event_outbox AS o
	WHERE o.status IN (0, 30)
	  AND o.available_at <= statement_timestamp()
	  AND (o.available_at, o.created_at, o.event_id) > ($3::timestamptz, $4::timestamptz, $5::uuid)
	  AND (o.ordering_key IS NULL OR NOT EXISTS (
		SELECT 1 FROM {schema}.event_outbox AS p
		WHERE p.ordering_key = o.ordering_key
		  AND p.seq < o.seq
		  AND p.status IN (0, 10, 30, 40)))
	ORDER BY o.available_at, o.created_at, o.event_id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED
)
UPDATE {schema}.event_outbox AS o
SET status = 10,
    locked_by = $2,
    locked_at = statement_timestamp(),
    updated_at = statement_timestamp()
WHERE o.event_id = ANY(ARRAY(SELECT event_id FROM candidates))
  AND o.status IN (0, 30)
RETURNING o.event_id, o.seq, o.topic, coalesce(o.tag, ''), o.message_key, o.aggregate_type,
          o.aggregate_id, coalesce(o.ordering_key, ''), o.schema_version, o.payload, o.headers,
          o.retry_count, o.max_retry, o.created_at, o.locked_at, o.available_at
