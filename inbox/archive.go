package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/pgtx"
)

// Archive batch sizes.
const (
	// defaultArchiveBatchSize is the batch size [Store.Archive] uses when
	// given 0.
	defaultArchiveBatchSize = 1000
	// maxArchiveBatchSize bounds one archive statement, keeping each
	// batch's row locks, WAL burst and vacuum debt small.
	maxArchiveBatchSize = 10000
)

// ErrRetentionTooShort is matched by the error [Store.Purge] and
// [Store.Archive] return for a horizon younger than Config.MinRetention.
// The concrete type is *[Error]. Nothing was written.
var ErrRetentionTooShort = errors.New("inbox: horizon younger than the minimum retention")

// checkRetention refuses a horizon younger than the minimum retention,
// measured on this process's clock.
func (in *Store) checkRetention(op string, olderThan time.Time) error {
	if in.minRetention == 0 {
		return nil
	}
	if age := time.Since(olderThan); age < in.minRetention {
		return &Error{Err: ErrRetentionTooShort, Op: op, OlderThan: olderThan, Age: age, MinRetention: in.minRetention}
	}
	return nil
}

// Archive moves inbox rows whose processed_at is before olderThan from
// consumer_inbox to consumer_inbox_history (same columns, plus
// archived_at), in statements of at most batchSize rows (0 means
// 1000, at most 10000), until a batch
// moves fewer than batchSize, and returns how many it moved (also when it
// stops early on an error or when ctx ends between batches). It is
// [Store.Purge] for teams that keep what each consumer did as evidence.
//
// A row that left consumer_inbox no longer deduplicates: a redelivery of
// its message is processed again. So the horizon must be older than the
// broker's replay window plus compensation and repair time; with
// Config.MinRetention set, a younger horizon is refused with a
// *[Error] and nothing is moved.
//
// Each batch is one statement (DELETE … RETURNING feeding an INSERT), all
// or nothing: given a pool, each batch commits on its own, and a run
// interrupted inside a batch (ctx cancelled, connection cut, server crash)
// moved whole batches only; calling it again moves the rest, nothing lost
// or copied twice. Given a pgx.Tx, every batch commits or rolls back with
// it. A row whose claiming transaction has not committed is invisible and
// stays (with its result: the claim and [Store.Complete] run in one
// transaction); a committed row another transaction holds locked (a repair
// updating it, a concurrent purge or archive) is skipped and left for a
// later run. Bad input returns a *[Error] and sends nothing.
//
// The history table is created by migration 002 ([Migrations]); it is the
// caller's to trim (BRIN index on processed_at), detach or export.
func (in *Store) Archive(ctx context.Context, db pgtx.Querier, olderThan time.Time, batchSize int) (_ int64, err error) {
	defer in.fail.Explain(&err)
	if db == nil {
		return 0, nilHandle("db")
	}
	switch {
	case olderThan.IsZero():
		return 0, invalid("olderThan", "zero time")
	case batchSize < 0 || batchSize > maxArchiveBatchSize:
		return 0, invalid("batchSize", fmt.Sprintf("%d, want 0 (default) to %d", batchSize, maxArchiveBatchSize))
	case batchSize == 0:
		batchSize = defaultArchiveBatchSize
	}
	if err := in.checkRetention("archive", olderThan); err != nil {
		return 0, err
	}
	var total int64
	afterGroup, afterID := "", uuid.Nil
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("inbox: archive: %w", err)
		}
		var moved, selected int64
		var lastGroup *string
		var lastID *uuid.UUID
		if err := db.QueryRow(ctx, in.sql.archive, olderThan, batchSize, afterGroup, afterID).Scan(&moved, &selected, &lastGroup, &lastID); err != nil {
			return total, fmt.Errorf("inbox: archive: %w", err)
		}
		total += moved
		if selected < int64(batchSize) || lastGroup == nil || lastID == nil {
			return total, nil
		}
		afterGroup, afterID = *lastGroup, *lastID
	}
}
