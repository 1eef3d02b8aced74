package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/pgtx"
)

// Stats is a snapshot of the outbox (seed §12.2 metrics).
type Stats struct {
	Pending, Sending, Sent, Retry, Dead int64
	// OldestWaiting is the age of the oldest PENDING or RETRY event (0 when
	// there is none): how far publishing lags behind.
	OldestWaiting time.Duration
}

// Stats counts the events per status and the age of the oldest waiting
// event with one read-only statement. It reads the whole table, so its cost
// follows the SENT history too: keep that short with [Store.PurgeSent].
func (s *Store) Stats(ctx context.Context, db pgtx.Querier) (Stats, error) {
	if db == nil {
		return Stats{}, nilHandle("db")
	}
	var st Stats
	var ageUS int64
	if err := db.QueryRow(ctx, s.statsSQL).Scan(&st.Pending, &st.Sending, &st.Sent, &st.Retry, &st.Dead, &ageUS); err != nil {
		return Stats{}, fmt.Errorf("outbox: stats: %w", err)
	}
	st.OldestWaiting = time.Duration(ageUS) * time.Microsecond
	return st, nil
}

// PurgeSent deletes SENT events whose sent_at is before olderThan, in
// statements of at most batchSize rows (each its own implicit transaction
// when db is a pool), walking the primary key so each row is read about
// once, and returns how many it deleted. Rows locked by someone else are
// skipped (a later purge gets them). PENDING, SENDING, RETRY and DEAD rows
// are never deleted. It stops early, returning the count so far, when ctx
// ends.
func (s *Store) PurgeSent(ctx context.Context, db pgtx.Querier, olderThan time.Time, batchSize int) (int64, error) {
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
