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
