package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/pgtx"
)

// Archive batch sizes.
const (
	// defaultArchiveBatchSize is the batch size [Store.ArchiveSent] uses
	// when given 0.
	defaultArchiveBatchSize = 1000
	// maxArchiveBatchSize bounds one archive statement, keeping each
	// batch's row locks, WAL burst and vacuum debt small.
	maxArchiveBatchSize = 10000
)

// archiveSentSQL moves up to $3 SENT events sent before $2 whose id is
// greater than $1 from event_outbox to event_outbox_history, in one
// statement: the rows are locked (SKIP LOCKED: a row another transaction
// holds — a relay marking it, a purge — is left for a later run), deleted
// with their status re-checked, and inserted into the history from what the
// DELETE returned. One statement is one atomic step: interrupted (cancel,
// cut connection, crash), nothing of the batch happened; completed, every
// row of the batch is in exactly one of the two tables. A row already in
// the history with the same event_id (never, unless someone copied it
// there) fails the statement and moves nothing.
//
// It returns the rows moved, the rows examined and the last id examined
// (the keyset cursor of the next batch).
const archiveSentSQL = `WITH victims AS (
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
       (SELECT event_id FROM victims ORDER BY event_id DESC LIMIT 1)`

// ArchiveSent moves SENT events whose sent_at is before olderThan from
// event_outbox to event_outbox_history (same columns, plus archived_at),
// in statements of at most batchSize rows (0 means
// 1000, at most 10000), walking the
// primary key, and returns how many it moved. It is [Store.PurgeSent] for
// teams that keep their events for an audit period: the active table stays
// small (the claim's and the enqueue's cost follow it), the history keeps
// every event.
//
// Each batch is one statement (DELETE … RETURNING feeding an INSERT), so it
// is all or nothing: given a pool, each batch commits on its own, and a run
// interrupted between or inside batches (ctx cancelled, connection cut,
// server crash) has moved whole batches only; calling it again moves the
// rest. Nothing is lost or copied twice, and a second call with the same
// arguments moves nothing. Given a pgx.Tx, every batch commits or rolls
// back with it.
//
// Only SENT rows move. PENDING, SENDING, RETRY and DEAD rows never do, and
// neither does a SENT row another transaction holds locked (a relay's
// transaction that is marking it, a concurrent purge or archive): it is
// skipped and left for a later run. It returns the count so far with the
// error when a batch fails or ctx ends. Bad input returns a
// *[Error] and sends nothing.
//
// The history table is created by migration 004 ([Migrations]); it is
// the caller's to trim (it has a BRIN index on sent_at), detach or export.
func (s *Store) ArchiveSent(ctx context.Context, db pgtx.Querier, olderThan time.Time, batchSize int) (_ int64, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return 0, nilHandle("db")
	}
	switch {
	case olderThan.IsZero():
		return 0, invalid("olderThan", "zero")
	case batchSize < 0 || batchSize > maxArchiveBatchSize:
		return 0, invalid("batchSize", "%d, want 0 (default) to %d", batchSize, maxArchiveBatchSize)
	case batchSize == 0:
		batchSize = defaultArchiveBatchSize
	}
	var total int64
	after := uuid.Nil
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("outbox: archive sent: %w", err)
		}
		var moved, examined int64
		var last *uuid.UUID
		if err := db.QueryRow(ctx, s.archiveSentSQL, after, olderThan, batchSize).Scan(&moved, &examined, &last); err != nil {
			return total, fmt.Errorf("outbox: archive sent: %w", err)
		}
		total += moved
		if examined < int64(batchSize) || last == nil {
			return total, nil
		}
		after = *last
	}
}
