-- Lease recovery: Store.RecoverExpired and the relay's sweep.

-- name: recover
-- Returns expired leases to RETRY (DEAD when the lost attempt was the
-- last): the candidates are locked (SKIP LOCKED) and the UPDATE re-checks
-- status, owner, claim time and expiry on the latest row version.
-- $1 = lease (int8): the lease duration, microseconds
-- $2 = limit (int4): the most leases to recover
-- index: idx_outbox_stale_sending
WITH stale AS (
	SELECT event_id, locked_by, locked_at
	FROM {schema}.event_outbox
	WHERE status = 10
	  AND locked_at < statement_timestamp() - $1::int8 * interval '1 microsecond'
	ORDER BY locked_at, event_id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.event_outbox AS o
SET status = CASE WHEN o.retry_count + 1 >= o.max_retry THEN 40 ELSE 30 END,
    retry_count = o.retry_count + 1,
    available_at = statement_timestamp(),
    locked_by = NULL,
    locked_at = NULL,
    last_error = 'SEND_LEASE_EXPIRED: lease of ' || s.locked_by || ' expired',
    updated_at = statement_timestamp()
FROM stale AS s
WHERE o.event_id = s.event_id
  AND o.status = 10
  AND o.locked_by = s.locked_by
  AND o.locked_at = s.locked_at
  AND o.locked_at < statement_timestamp() - $1::int8 * interval '1 microsecond'
RETURNING o.event_id, s.locked_by, o.status

-- name: recover_lease
-- recover for the events of one claim only.
-- $1 = lease (int8): the lease duration, microseconds
-- $2 = limit (int4): the most leases to recover
-- $3 = owner (text): the claim's owner
-- $4 = locked_at (timestamptz): the claim's time
-- index: idx_outbox_stale_sending
WITH stale AS (
	SELECT event_id, locked_by, locked_at
	FROM {schema}.event_outbox
	WHERE status = 10
	  AND locked_at < statement_timestamp() - $1::int8 * interval '1 microsecond'
	  AND locked_by = $3 AND locked_at = $4
	ORDER BY locked_at, event_id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.event_outbox AS o
SET status = CASE WHEN o.retry_count + 1 >= o.max_retry THEN 40 ELSE 30 END,
    retry_count = o.retry_count + 1,
    available_at = statement_timestamp(),
    locked_by = NULL,
    locked_at = NULL,
    last_error = 'SEND_LEASE_EXPIRED: lease of ' || s.locked_by || ' expired',
    updated_at = statement_timestamp()
FROM stale AS s
WHERE o.event_id = s.event_id
  AND o.status = 10
  AND o.locked_by = s.locked_by
  AND o.locked_at = s.locked_at
  AND o.locked_at < statement_timestamp() - $1::int8 * interval '1 microsecond'
RETURNING o.event_id, s.locked_by, o.status
