-- Enqueue: Store.Enqueue, Store.QueueEnqueue (pgtx.Return and pgtx.Abort)
-- and their Config.Citus forms. Statements sharing the single-event INSERT
-- (enqueue_one_notify, enqueue_insert, enqueue_abort) carry
-- identical copies of it: a test checks.

-- name: enqueue
-- Inserts a batch of events with one statement. The uncorrelated
-- sub-select in the INSERT's WHERE is an InitPlan that runs once, before the
-- first row: it takes a transaction advisory lock per distinct ordering key,
-- in key order (no deadlock between two enqueues). The rows get their seq
-- (identity default) only after that, so for one ordering key seq order is
-- commit order. The final SELECT returns one row per inserted event (kind 1)
-- and one per input event whose dedup key already belonged to a row this
-- statement's snapshot sees (kind 2, with that row's id). Both parts are
-- index probes, linear in the batch.
-- $1 = event_ids (text[] of uuid): one element per event, as the next twelve arrays
-- $2 = dedup_keys (text[])
-- $3 = aggregate_types (text[])
-- $4 = aggregate_ids (text[])
-- $5 = topics (text[])
-- $6 = tags (text[]): NULL elements for none
-- $7 = message_keys (text[])
-- $8 = ordering_keys (text[]): NULL elements for none
-- $9 = schema_versions (int4[])
-- $10 = payloads (text[]): JSON, cast to jsonb
-- $11 = headers (text[]): JSON objects, cast to jsonb
-- $12 = delays (int8[]): microseconds before each event is ready
-- $13 = max_retries (int4[])
-- $14 = namespace (text): the advisory-lock namespace, the schema name
-- index: uq_outbox_dedup
WITH input AS MATERIALIZED (
	SELECT *
	FROM unnest($1::text[]::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
	            $8::text[], $9::int4[], $10::text[], $11::text[], $12::int8[], $13::int4[])
	     WITH ORDINALITY AS u(event_id, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key,
	                          ordering_key, schema_version, payload, headers, delay_us, max_retry, ord)
), ins AS (
	INSERT INTO {schema}.event_outbox AS o (
		event_id, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key,
		ordering_key, schema_version, payload, headers, available_at, max_retry)
	SELECT event_id, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key,
	       ordering_key, schema_version, payload::jsonb, headers::jsonb,
	       statement_timestamp() + delay_us * interval '1 microsecond', max_retry
	FROM input
	WHERE (SELECT count(pg_advisory_xact_lock(hashtextextended('seckill.outbox:' || $14::text || ':' || k, 0)))
	       FROM (SELECT DISTINCT ordering_key AS k FROM input WHERE ordering_key IS NOT NULL ORDER BY 1) AS keys) >= 0
	ORDER BY ord
	ON CONFLICT (dedup_key) DO NOTHING
	RETURNING o.event_id
)
SELECT 1, event_id, NULL::uuid FROM ins
UNION ALL
SELECT 2, i.event_id, e.event_id
FROM input AS i
JOIN {schema}.event_outbox AS e ON e.dedup_key = i.dedup_key

-- name: enqueue_notify
-- enqueue with Config.Notify: one pg_notify per statement, none when
-- nothing was inserted.
-- $1 = event_ids (text[] of uuid): one element per event, as the next twelve arrays
-- $2 = dedup_keys (text[])
-- $3 = aggregate_types (text[])
-- $4 = aggregate_ids (text[])
-- $5 = topics (text[])
-- $6 = tags (text[]): NULL elements for none
-- $7 = message_keys (text[])
-- $8 = ordering_keys (text[]): NULL elements for none
-- $9 = schema_versions (int4[])
-- $10 = payloads (text[]): JSON, cast to jsonb
-- $11 = headers (text[]): JSON objects, cast to jsonb
-- $12 = delays (int8[]): microseconds before each event is ready
-- $13 = max_retries (int4[])
-- $14 = namespace (text): the advisory-lock namespace, the schema name
-- $15 = channel (text): the NOTIFY channel
-- index: uq_outbox_dedup
WITH input AS MATERIALIZED (
	SELECT *
	FROM unnest($1::text[]::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
	            $8::text[], $9::int4[], $10::text[], $11::text[], $12::int8[], $13::int4[])
	     WITH ORDINALITY AS u(event_id, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key,
	                          ordering_key, schema_version, payload, headers, delay_us, max_retry, ord)
), ins AS (
	INSERT INTO {schema}.event_outbox AS o (
		event_id, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key,
		ordering_key, schema_version, payload, headers, available_at, max_retry)
	SELECT event_id, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key,
	       ordering_key, schema_version, payload::jsonb, headers::jsonb,
	       statement_timestamp() + delay_us * interval '1 microsecond', max_retry
	FROM input
	WHERE (SELECT count(pg_advisory_xact_lock(hashtextextended('seckill.outbox:' || $14::text || ':' || k, 0)))
	       FROM (SELECT DISTINCT ordering_key AS k FROM input WHERE ordering_key IS NOT NULL ORDER BY 1) AS keys) >= 0
	ORDER BY ord
	ON CONFLICT (dedup_key) DO NOTHING
	RETURNING o.event_id
), notified AS (
	SELECT 1 AS one FROM pg_notify($15, '') WHERE EXISTS (SELECT 1 FROM ins)
)
SELECT 1, event_id, NULL::uuid FROM ins
UNION ALL
SELECT 2, i.event_id, e.event_id
FROM input AS i
JOIN {schema}.event_outbox AS e ON e.dedup_key = i.dedup_key
UNION ALL
SELECT 0, NULL::uuid, NULL::uuid FROM notified

-- name: enqueue_one_notify
-- The enqueue of ONE event without an ordering key with Config.Notify:
-- enqueue_insert's INSERT, one NOTIFY on the channel when it inserted,
-- and, only when it inserted nothing (a one-time filter), one probe for
-- the row holding the dedup key (kind 2). Returns the rows of enqueue
-- (kind 1 inserted, kind 2 already there, kind 0 the notify).
-- $1 = event_id (uuid): the new event's id
-- $2 = dedup_key (text): the event's deduplication key
-- $3 = aggregate_type (text)
-- $4 = aggregate_id (text)
-- $5 = topic (text)
-- $6 = tag (text): NULL for none
-- $7 = message_key (text)
-- $8 = schema_version (int4)
-- $9 = payload (text): JSON, cast to jsonb
-- $10 = headers (text): JSON object, cast to jsonb
-- $11 = delay (int8): microseconds before the event is ready
-- $12 = max_retry (int4): publish attempts allowed
-- $13 = ordering_key (text): NULL (events with one take the enqueue statement)
-- $14 = channel (text): the NOTIFY channel
-- index: uq_outbox_dedup
WITH ins AS (
	INSERT INTO {schema}.event_outbox AS o (
		event_id, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key,
		schema_version, payload, headers, available_at, max_retry, ordering_key)
	VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text,
	        $8::int4, $9::text::jsonb, $10::text::jsonb, statement_timestamp() + $11::int8 * interval '1 microsecond', $12::int4,
	        $13::text)
	ON CONFLICT (dedup_key) DO NOTHING
	RETURNING o.event_id
), notified AS (
	SELECT 1 AS one FROM pg_notify($14::text, '') WHERE EXISTS (SELECT 1 FROM ins)
)
SELECT 1, event_id, NULL::uuid FROM ins
UNION ALL
SELECT 2, $1::uuid, e.event_id
FROM {schema}.event_outbox AS e
WHERE e.dedup_key = $2::text AND NOT EXISTS (SELECT 1 FROM ins)
UNION ALL
SELECT 0, NULL::uuid, NULL::uuid FROM notified

-- name: enqueue_insert
-- The enqueue of ONE event without an ordering key (without Config.Notify),
-- and of Config.Citus once per event: a plain INSERT (nothing when the
-- dedup key exists) returning enqueue's kind 1 rows; enqueue_holders then
-- reads the key's holder. A plain statement is what Citus routes whole to
-- the node holding the schema.
-- $1 = event_id (uuid): the new event's id
-- $2 = dedup_key (text): the event's deduplication key
-- $3 = aggregate_type (text)
-- $4 = aggregate_id (text)
-- $5 = topic (text)
-- $6 = tag (text): NULL for none
-- $7 = message_key (text)
-- $8 = schema_version (int4)
-- $9 = payload (text): JSON, cast to jsonb
-- $10 = headers (text): JSON object, cast to jsonb
-- $11 = delay (int8): microseconds before the event is ready
-- $12 = max_retry (int4): publish attempts allowed
-- $13 = ordering_key (text): NULL (events with one take the enqueue statement)
-- index: uq_outbox_dedup
INSERT INTO {schema}.event_outbox AS o (
		event_id, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key,
		schema_version, payload, headers, available_at, max_retry, ordering_key)
	VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text,
	        $8::int4, $9::text::jsonb, $10::text::jsonb, statement_timestamp() + $11::int8 * interval '1 microsecond', $12::int4,
	        $13::text)
	ON CONFLICT (dedup_key) DO NOTHING
	RETURNING 1, o.event_id, NULL::uuid

-- name: enqueue_locks
-- The ordering keys' advisory locks of the Config.Citus enqueue, one per
-- distinct key, in key order. It reads no table: Citus runs it on the
-- coordinator.
-- $1 = namespace (text): the schema name
-- $2 = ordering_keys (text[]): NULL elements are skipped
-- index: none (reads no table)
SELECT count(pg_advisory_xact_lock(hashtextextended('seckill.outbox:' || $1::text || ':' || k, 0)))
	FROM (SELECT DISTINCT k FROM unnest($2::text[]) AS u(k) WHERE k IS NOT NULL ORDER BY 1) AS keys

-- name: enqueue_send_notify
-- The NOTIFY of an enqueue whose statements cannot tell whether they
-- inserted (Config.Citus, pgtx.Abort).
-- $1 = channel (text): the NOTIFY channel
-- index: none (reads no table)
SELECT pg_notify($1::text, '')

-- name: enqueue_holders
-- Follows every enqueue statement in the same batch: the event holding
-- each dedup key, read with a new snapshot, so that it also finds a row a
-- concurrent transaction committed while the insert waited for it.
-- $1 = dedup_keys (text[])
-- index: uq_outbox_dedup
SELECT dedup_key, event_id FROM {schema}.event_outbox WHERE dedup_key = ANY($1::text[])

-- name: enqueue_abort
-- QueueEnqueue with pgtx.Abort, once per event: enqueue_insert's INSERT
-- without ON CONFLICT, so a duplicate dedup key raises unique_violation on
-- uq_outbox_dedup and aborts the transaction.
-- $1 = event_id (uuid): the new event's id
-- $2 = dedup_key (text): the event's deduplication key
-- $3 = aggregate_type (text)
-- $4 = aggregate_id (text)
-- $5 = topic (text)
-- $6 = tag (text): NULL for none
-- $7 = message_key (text)
-- $8 = schema_version (int4)
-- $9 = payload (text): JSON, cast to jsonb
-- $10 = headers (text): JSON object, cast to jsonb
-- $11 = delay (int8): microseconds before the event is ready
-- $12 = max_retry (int4): publish attempts allowed
-- $13 = ordering_key (text): NULL (events with one take the enqueue statement)
-- index: none (an INSERT without ON CONFLICT: uq_outbox_dedup only raises the duplicate)
INSERT INTO {schema}.event_outbox AS o (
		event_id, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key,
		schema_version, payload, headers, available_at, max_retry, ordering_key)
	VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text,
	        $8::int4, $9::text::jsonb, $10::text::jsonb, statement_timestamp() + $11::int8 * interval '1 microsecond', $12::int4,
	        $13::text)
RETURNING o.event_id
