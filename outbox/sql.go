package outbox

// The statements of the package. {schema} is replaced once, in [New], by the
// validated, quoted schema name; everything else is a bind parameter.
//
// Every parameter has a Go type pgx can encode without knowing the
// parameter's type from the server (query exec modes exec and
// simple_protocol, as PgBouncer in transaction mode needs): UUID arrays go
// as []string cast with $n::text[]::uuid[], JSON as string cast to jsonb.

// enqueueSQL inserts a batch of events with one statement.
//
// Parameters: $1..$13 parallel arrays (one element per event), $14 the
// advisory-lock namespace (schema name), [$15 the NOTIFY channel].
//
// The uncorrelated sub-select in the INSERT's WHERE is an InitPlan that runs
// once, before the first row is produced: it takes a transaction advisory
// lock per distinct ordering key, in key order (no deadlock between two
// Enqueue calls). The rows get their seq (identity default) only after
// that, so for one ordering key seq order is commit order: a second
// transaction enqueuing for the same key waits until the first one ends.
//
// The final SELECT returns one row per inserted event (kind 1) and one per
// input event whose dedup key already belonged to a row this statement's
// snapshot sees (kind 2, with that row's id); rows inserted by this very
// statement are invisible to its snapshot, so kind 2 only finds pre-existing
// rows. Both parts are linear (index probes), whatever the batch size. The
// notify part (kind 0) is a third branch so that it is always executed.
func enqueueSQL(notify bool) string {
	q := `WITH input AS MATERIALIZED (
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
)`
	tail := `
SELECT 1, event_id, NULL::uuid FROM ins
UNION ALL
SELECT 2, i.event_id, e.event_id
FROM input AS i
JOIN {schema}.event_outbox AS e ON e.dedup_key = i.dedup_key`
	if notify {
		// One pg_notify per statement, and none when nothing was inserted.
		q += `, notified AS (
	SELECT 1 AS one FROM pg_notify($15, '') WHERE EXISTS (SELECT 1 FROM ins)
)`
		tail += `
UNION ALL
SELECT 0, NULL::uuid, NULL::uuid FROM notified`
	}
	return q + tail
}

// insertOneSQL inserts one event from scalar parameters: $1 event id, $2
// dedup key, $3 aggregate type, $4 aggregate id, $5 topic, $6 tag (NULL
// for none), $7 message key, $8 schema version, $9 payload, $10 headers,
// $11 delay (µs), $12 max retries, $13 ordering key (NULL for none).
const insertOneSQL = `INSERT INTO {schema}.event_outbox AS o (
		event_id, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key,
		schema_version, payload, headers, available_at, max_retry, ordering_key)
	VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text,
	        $8::int4, $9::text::jsonb, $10::text::jsonb, statement_timestamp() + $11::int8 * interval '1 microsecond', $12::int4,
	        $13::text)`

// enqueueInsertSQL is the common case of ONE event without an ordering key
// and without NOTIFY: a plain INSERT (nothing when the dedup key exists),
// returning the rows of enqueueSQL's kind 1. A plain statement is what
// Citus routes whole to the one node that holds the schema; a
// data-modifying CTE under a SELECT (enqueueOneSQL) is split there into a
// subplan whose result Citus ships between nodes, and the transaction then
// commits with two phases. Parameters as enqueueOneSQL, without the
// channel.
const enqueueInsertSQL = insertOneSQL + `
	ON CONFLICT (dedup_key) DO NOTHING
	RETURNING 1, o.event_id, NULL::uuid`

// The enqueue of Config.Citus, in one batch: enqueueLocksSQL when an event
// has an ordering key, enqueueInsertSQL once per event, in order (each
// event of a key gets its seq after the key's lock, so seq order is commit
// order for the key, as with enqueueSQL), enqueueNotifySQL with Notify,
// then enqueueHoldersSQL.
//
// enqueueLocksSQL takes enqueueSQL's advisory locks, one per distinct
// ordering key in $2, in key order: $1 the namespace (schema name). It
// reads no table: Citus runs it on the coordinator, where every session
// of a Citus cluster takes its advisory locks.
//
// enqueueNotifySQL sends the NOTIFY ($1 the channel) of an enqueue that
// may have inserted nothing: a plain statement cannot tell. (The one-batch
// QueueEnqueue with pgtx.Abort sends it too.)
const (
	enqueueLocksSQL = `SELECT count(pg_advisory_xact_lock(hashtextextended('seckill.outbox:' || $1::text || ':' || k, 0)))
	FROM (SELECT DISTINCT k FROM unnest($2::text[]) AS u(k) WHERE k IS NOT NULL ORDER BY 1) AS keys`

	enqueueNotifySQL = `SELECT pg_notify($1::text, '')`
)

// enqueueHoldersSQL follows every enqueue statement in the same batch: the
// event holding each dedup key in $1, read with the statement's own (new)
// snapshot, so that it also finds a row a concurrent transaction committed
// while the insert waited for it, which the insert's snapshot misses.
const enqueueHoldersSQL = `SELECT dedup_key, event_id FROM {schema}.event_outbox WHERE dedup_key = ANY($1::text[])`

// enqueueOneSQL is enqueueSQL for the common case of ONE event without an
// ordering key, with scalar parameters: no unnest of thirteen arrays, no
// materialised input, no advisory-lock InitPlan, no sort. It returns the
// same rows as enqueueSQL (kind 1 inserted, kind 2 already there, kind 0
// notified) and has the same snapshot semantics. The general statement was
// the costliest of the seckill order transaction (examples/bench
// -statements: about twice the server time of a plain INSERT); this one
// is a plain INSERT (plus one index probe when it inserted nothing). Its
// parameters are scalars, so it also runs unchanged in QueryExecModeExec.
//
// Parameters: $1 event id, $2 dedup key, $3 aggregate type, $4 aggregate
// id, $5 topic, $6 tag (NULL for none), $7 message key, $8 schema version,
// $9 payload, $10 headers, $11 delay (µs), $12 max retries, $13 ordering
// key (NULL: enqueueSQL takes the events that have one), [$14 the NOTIFY
// channel].
func enqueueOneSQL(notify bool) string {
	q := `WITH ins AS (
	` + insertOneSQL + `
	ON CONFLICT (dedup_key) DO NOTHING
	RETURNING o.event_id
)`
	// The dedup probe runs only when nothing was inserted (a one-time
	// filter): an inserted row proves no other row holds the key.
	tail := `
SELECT 1, event_id, NULL::uuid FROM ins
UNION ALL
SELECT 2, $1::uuid, e.event_id
FROM {schema}.event_outbox AS e
WHERE e.dedup_key = $2::text AND NOT EXISTS (SELECT 1 FROM ins)`
	if notify {
		q += `, notified AS (
	SELECT 1 AS one FROM pg_notify($14::text, '') WHERE EXISTS (SELECT 1 FROM ins)
)`
		tail += `
UNION ALL
SELECT 0, NULL::uuid, NULL::uuid FROM notified`
	}
	return q + tail
}

// readySQL picks and locks up to $1 ready events (PENDING or RETRY whose
// available_at has passed), oldest first, skipping rows other relays hold;
// an event with an ordering key only when no earlier event of its key is
// unfinished ({blocking}). The claim (claimSQL) and the InTx relay's lock
// (lockSQL) select from it.
const readySQL = `FROM {schema}.event_outbox AS o
	WHERE o.status IN (0, 30)
	  AND o.available_at <= statement_timestamp(){after}
	  AND (o.ordering_key IS NULL OR NOT EXISTS (
		SELECT 1 FROM {schema}.event_outbox AS p
		WHERE p.ordering_key = o.ordering_key
		  AND p.seq < o.seq
		  AND p.status IN ({blocking})))
	ORDER BY o.available_at, o.created_at, o.event_id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED`

// claimSQL claims up to $1 ready events for owner $2, oldest
// first, skipping rows other relays hold. An event with an ordering key is
// claimable only when no earlier event (lower seq) of the same key is still
// unfinished ({blocking} statuses), so only the head of each key is ever
// claimed and a failing head blocks its own key only. The probe is an index
// (only) scan of idx_outbox_ordering; the outer scan is idx_outbox_ready.
//
// {after} is empty for a claim from the head of the index, or
// claimAfterCond for a claim that starts after the key ($3, $4, $5) of a
// relay's earlier claims: a range scan that skips the head, where every
// claimed event leaves a dead entry in idx_outbox_ready until VACUUM (see
// claimCursor).
const claimSQL = `WITH candidates AS (
	SELECT o.event_id
	` + readySQL + `
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
          o.retry_count, o.max_retry, o.created_at, o.locked_at, o.available_at`

// claimAfterCond bounds the claim's scan of idx_outbox_ready to the keys
// after a cursor: a row comparison, which the planner turns into the
// index scan's start key.
const claimAfterCond = `
	  AND (o.available_at, o.created_at, o.event_id) > ($3::timestamptz, $4::timestamptz, $5::uuid)`

// leaseUpdateSQL finishes events held under one lease: $1 ids, $2 owner,
// $3 locked_at of the claim. The WHERE is the compare-and-set: a row that is
// no longer SENDING under exactly this claim (recovered, re-claimed by
// anyone — the same owner included —, finished) is not touched. The SELECT
// reports those rows as they are now: it reads them with a locking read
// (FOR SHARE), and a locking read in Read Committed that meets a row
// version updated since its snapshot returns the row's latest committed
// version. A plain read would show the statement's snapshot, which for a
// mark that waited behind a lease recovery, a concurrent mark or a release
// is the row before it: SENDING under the caller's own lease. FOR KEY
// SHARE is not enough: it does not conflict with an UPDATE that leaves the
// key alone (Mark), so PostgreSQL grants it
// on the snapshot's version and returns that version.
//
// The report costs nothing when every row was updated (the usual case):
// the count comparison is an InitPlan the planner turns into a one-time
// filter over the whole report, so neither the ids nor the table are read
// again. Otherwise only the missing ids are probed (a hashed NOT IN: linear
// in the batch; $1 holds distinct, non-NULL ids). An earlier form, an
// anti-join of the ids against upd plus a probe of every id, rescanned upd
// once per id and made marking twice as slow as the UPDATE alone.
//
// The ids are cast to uuid[] in a sub-select, which runs once per
// execution. Written as ANY($1::text[]::uuid[]), the generic plan of the
// prepared statement (the one pgx's statement cache ends up using) casts
// the whole array again for every row it filters: 200 ids × 200 rows,
// three times the cost of the UPDATE itself.
const leaseUpdateSQL = `WITH upd AS (
	UPDATE {schema}.event_outbox
	SET {set}
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
  AND i.id NOT IN (SELECT event_id FROM upd)`

const setSent = `status = 20,
	    sent_at = statement_timestamp(),
	    locked_by = NULL,
	    locked_at = NULL,
	    last_error = NULL,
	    updated_at = statement_timestamp()`

// setRelease hands a claimed event back without counting an attempt.
const setRelease = `status = 30,
	    available_at = statement_timestamp(),
	    locked_by = NULL,
	    locked_at = NULL,
	    updated_at = statement_timestamp()`

// retryAt is when a failed event f is ready again: the statement's time
// plus its backoff. The sum is taken in UTC, on timestamp without time
// zone, whose functions are immutable: on Citus an UPDATE may not call a
// STABLE function with a column reference (timestamptz + interval is
// STABLE; statement_timestamp() alone is evaluated once, on the
// coordinator). A backoff of microseconds only gives the same instant
// either way.
const retryAt = `(statement_timestamp() AT TIME ZONE 'UTC' + f.backoff_us * interval '1 microsecond') AT TIME ZONE 'UTC'`

// failSQL records failed publishes under one lease: $1 ids, $2 errors,
// $3 backoffs (µs), $4 owner, $5 locked_at. RETRY after the backoff, or DEAD
// when this was the last allowed attempt. Returns one row per id: the new
// status when marked, else the row's current state (a locking read, as in
// leaseUpdateSQL).
const failSQL = `WITH f AS (
	SELECT * FROM unnest($1::text[]::uuid[], $2::text[], $3::int8[]) AS f(id, err, backoff_us)
), upd AS (
	UPDATE {schema}.event_outbox AS o
	SET status = CASE WHEN o.retry_count + 1 >= o.max_retry THEN 40 ELSE 30 END,
	    retry_count = o.retry_count + 1,
	    available_at = ` + retryAt + `,
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
) AS e ON true`

// recoverSQL returns expired leases to RETRY (compare-and-set on status,
// owner and claim time): $1
// lease duration (µs), $2 limit, [$3 owner, $4 locked_at of one claim]. The
// candidate rows are locked (SKIP LOCKED: a row being marked right now is
// left alone) and the UPDATE re-checks status, expiry (and owner/claim) on
// the latest row version, so a row that was marked SENT, failed, released or
// re-claimed in the meantime is never touched (river issue 1302). The lost
// attempt counts: an event whose attempts are exhausted goes DEAD.
const recoverSQL = `WITH stale AS (
	SELECT event_id, locked_by, locked_at
	FROM {schema}.event_outbox
	WHERE status = 10
	  AND locked_at < statement_timestamp() - $1::int8 * interval '1 microsecond'
	  {owner}
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
RETURNING o.event_id, s.locked_by, o.status`

// statsSQL counts the events per status but SENT exactly, each count
// through the partial index holding only that status (idx_outbox_ready,
// idx_outbox_stale_sending, idx_outbox_dead), plus the age of the oldest
// event waiting to be published. SENT is counted exactly only while the
// table is small ($2 pages at most); otherwise the caller estimates it from
// the planner's statistics: reltuples scaled to the table's current size
// (as the planner does), minus the exact counts. $1 is the table's
// qualified name.
const statsSQL = `SELECT
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
WHERE c.oid = $1::regclass`

// purgeSQL deletes up to $3 SENT events sent before $2 whose id is greater
// than $1, walking the primary key (keyset), so a purge of millions of rows
// reads each row about once. Returns the number deleted and the last id
// examined (NULL when none).
const purgeSQL = `WITH victims AS (
	SELECT event_id
	FROM {schema}.event_outbox
	WHERE event_id > $1
	  AND status = 20
	  AND sent_at < $2
	ORDER BY event_id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), del AS (
	DELETE FROM {schema}.event_outbox AS o
	USING victims AS v
	WHERE o.event_id = v.event_id
	  AND o.status = 20
	RETURNING o.event_id
)
SELECT (SELECT count(*) FROM del),
       (SELECT count(*) FROM victims),
       (SELECT event_id FROM victims ORDER BY event_id DESC LIMIT 1)`
