package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/pgtx"
)

// PurgeSent deletes SENT events whose sent_at is before olderThan, in
// statements of at most batchSize rows (each its own implicit transaction
// when db is a pool), walking the primary key so each row is read about
// once, and returns how many it deleted. Rows locked by someone else are
// skipped (a later purge gets them). PENDING, SENDING, RETRY and DEAD rows
// are never deleted. It stops early, returning the count so far, when ctx
// ends.
func (s *Store) PurgeSent(ctx context.Context, db pgtx.Querier, olderThan time.Time, batchSize int) (_ int64, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return 0, nilHandle("db")
	}
	if olderThan.IsZero() {
		return 0, invalid("olderThan", "zero")
	}
	if batchSize <= 0 || batchSize > 1<<31-1 {
		return 0, invalid("batchSize", "must be positive, got %d", batchSize)
	}
	var total int64
	after := uuid.Nil
	for {
		var deleted, examined int64
		var last *uuid.UUID
		if err := db.QueryRow(ctx, s.purgeSQL, after, olderThan, batchSize).Scan(&deleted, &examined, &last); err != nil {
			return total, fmt.Errorf("outbox: purge sent: %w", err)
		}
		total += deleted
		if examined < int64(batchSize) || last == nil {
			return total, nil
		}
		after = *last
	}
}
