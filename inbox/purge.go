package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/seckillkit/seckill/pgtx"
)

// Purge batch sizes.
const (
	// defaultPurgeBatchSize is the batch size Purge uses when given 0.
	defaultPurgeBatchSize = 1000
	// maxPurgeBatchSize bounds one DELETE, keeping each batch's locks, WAL
	// burst and vacuum debt small.
	maxPurgeBatchSize = 10000
)

// Purge deletes inbox rows whose processed_at is before olderThan, in
// DELETE statements of at most batchSize rows (0 means
// 1000, at most 10000), until a batch
// deletes fewer than batchSize. It returns how many rows it deleted, also
// when it stops early on an error or when ctx ends between batches.
//
// Retention must exceed the broker's replay window (plus the time any
// compensation or manual redelivery may take): a message redelivered after
// its row is purged is processed again. With Config.MinRetention set, a
// horizon younger than that is refused with a *[Error] and
// nothing is deleted.
//
// Given a pool, each batch commits on its own, which is what a retention
// job wants; given a pgx.Tx, all batches commit or roll back with it. Rows
// locked by another purger are skipped and left for the next run.
func (in *Store) Purge(ctx context.Context, db pgtx.Querier, olderThan time.Time, batchSize int) (_ int64, err error) {
	defer in.fail.Explain(&err)
	if db == nil {
		return 0, nilHandle("db")
	}
	switch {
	case olderThan.IsZero():
		return 0, invalid("olderThan", "zero time")
	case batchSize < 0 || batchSize > maxPurgeBatchSize:
		return 0, invalid("batchSize", fmt.Sprintf("%d, want 0 (default) to %d", batchSize, maxPurgeBatchSize))
	case batchSize == 0:
		batchSize = defaultPurgeBatchSize
	}
	if err := in.checkRetention("purge", olderThan); err != nil {
		return 0, err
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("inbox: purge: %w", err)
		}
		tag, err := db.Exec(ctx, in.sql.purge, olderThan, batchSize)
		if err != nil {
			return total, fmt.Errorf("inbox: purge: %w", err)
		}
		n := tag.RowsAffected()
		total += n
		if n < int64(batchSize) {
			return total, nil
		}
	}
}
