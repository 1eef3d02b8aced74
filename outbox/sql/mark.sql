-- Marks under a lease: Store.MarkSent, Store.MarkFailed, Store.Release and
-- their queued forms. mark_sent and release share everything but the SET
-- list.

-- name: mark_sent
-- Marks SENT the events held under one lease. The WHERE is the compare-and-set: a row no longer SENDING under exactly
-- this lease is not touched. The SELECT reports those rows as they are now,
-- through a locking read (FOR SHARE); it costs nothing when every row was
-- updated (a one-time filter on the count).
-- $1 = event_ids (text[] of uuid): distinct, non-NULL
-- $2 = owner (text): the lease's owner (locked_by)
-- $3 = locked_at (timestamptz): the lease's claim time
-- index: event_outbox_pkey
WITH upd AS (
	UPDATE {schema}.event_outbox
	SET status = 20,
	    sent_at = statement_timestamp(),
	    locked_by = NULL,
	    locked_at = NULL,
	    last_error = NULL,
	    updated_at = statement_timestamp()
	WHERE event_id = ANY((SELECT $1::text[]::uuid[])::uuid[])
	  AND status = 10
	  AND locked_by = $2
	  AND locked_at = $3
	RETURNING event_id
)
SELECT i.id, e.event_id IS NOT NULL, coalesce(e.status, 0), coalesce(e.locked_by, '')
FROM unnest($1::text[]::uuid[]) AS i(id)
LEFT JOIN LATERAL (
	SELECT event_id, status, locked_by FROM {schema}.event_outbox WHERE event_id = i.id FOR SHARE
) AS e ON true
WHERE (SELECT count(*) FROM upd) < cardinality($1::text[])
  AND i.id NOT IN (SELECT event_id FROM upd)

-- name: release
-- Hands claimed events back (RETRY, ready at once) without counting an
-- attempt. The WHERE is the compare-and-set: a row no longer SENDING under exactly
-- this lease is not touched. The SELECT reports those rows as they are now,
-- through a locking read (FOR SHARE); it costs nothing when every row was
-- updated (a one-time filter on the count).
-- $1 = event_ids (text[] of uuid): distinct, non-NULL
-- $2 = owner (text): the lease's owner (locked_by)
-- $3 = locked_at (timestamptz): the lease's claim time
-- index: event_outbox_pkey
WITH upd AS (
	UPDATE {schema}.event_outbox
	SET status = 30,
	    available_at = statement_timestamp(),
	    locked_by = NULL,
	    locked_at = NULL,
	    updated_at = statement_timestamp()
	WHERE event_id = ANY((SELECT $1::text[]::uuid[])::uuid[])
	  AND status = 10
	  AND locked_by = $2
	  AND locked_at = $3
	RETURNING event_id
)
SELECT i.id, e.event_id IS NOT NULL, coalesce(e.status, 0), coalesce(e.locked_by, '')
FROM unnest($1::text[]::uuid[]) AS i(id)
LEFT JOIN LATERAL (
	SELECT event_id, status, locked_by FROM {schema}.event_outbox WHERE event_id = i.id FOR SHARE
) AS e ON true
WHERE (SELECT count(*) FROM upd) < cardinality($1::text[])
  AND i.id NOT IN (SELECT event_id FROM upd)

-- name: mark_failed
-- Records failed publishes under one lease: RETRY after the backoff, or
-- DEAD when this was the last allowed attempt. The new time is summed in
-- UTC on timestamp without time zone (immutable: Citus accepts it in an
-- UPDATE). Returns one row per id: the new status when marked, else the
-- row's current state (a locking read, as in mark_sent).
-- $1 = event_ids (text[] of uuid)
-- $2 = errors (text[]): last_error of each
-- $3 = backoffs (int8[]): microseconds until each is ready again
-- $4 = owner (text): the lease's owner
-- $5 = locked_at (timestamptz): the lease's claim time
-- index: event_outbox_pkey
WITH f AS (
	SELECT * FROM unnest($1::text[]::uuid[], $2::text[], $3::int8[]) AS f(id, err, backoff_us)
), upd AS (
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
	  AND o.status = 10
	  AND o.locked_by = $4
	  AND o.locked_at = $5
	RETURNING o.event_id, o.status
)
SELECT f.id, upd.status IS NOT NULL, coalesce(upd.status, e.status, 0), e.event_id IS NOT NULL OR upd.status IS NOT NULL,
       coalesce(e.locked_by, '')
FROM f
LEFT JOIN upd ON upd.event_id = f.id
LEFT JOIN LATERAL (
	SELECT event_id, status, locked_by FROM {schema}.event_outbox
	WHERE event_id = f.id AND upd.event_id IS NULL
	FOR SHARE
) AS e ON true
