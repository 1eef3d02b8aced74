package inbox_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/pgtx"
)

// countingQuerier counts the statements Purge sends.
type countingQuerier struct {
	pgtx.Querier
	execs atomic.Int32
}

func (c *countingQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.execs.Add(1)
	return c.Querier.Exec(ctx, sql, args...)
}

func TestPurge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const old, recent = 25, 7
	var oldKeys []inbox.Key
	for i := range old + recent {
		m := newMessage("purge")
		b.inTx(t, func(tx pgx.Tx) error {
			_, err := b.in.ClaimMessage(b.ctx, tx, withResult(m, inbox.Result{Code: "OK"}))
			return err
		})
		if i < old {
			oldKeys = append(oldKeys, m.Key())
		}
	}
	// Age the first rows by 30 days.
	table := pgx.Identifier{b.schema, "consumer_inbox"}.Sanitize()
	for _, k := range oldKeys {
		if _, err := b.pool.Exec(b.ctx, `UPDATE `+table+` SET created_at = created_at - interval '30 days',
			processed_at = processed_at - interval '30 days' WHERE consumer_group = $1 AND message_id = $2`, k.Group, k.MessageID); err != nil {
			t.Fatal(err)
		}
	}
	cutoff := time.Now().Add(-24 * time.Hour)

	q := &countingQuerier{Querier: b.pool}
	n, err := b.in.Purge(testwait.Context(t, b.ctx, testwait.Step), q, cutoff, 10)
	if err != nil {
		t.Fatal(err)
	}
	if n != old {
		t.Fatalf("purged %d, want %d", n, old)
	}
	if got := q.execs.Load(); got != 3 { // 10 + 10 + 5
		t.Fatalf("%d DELETE statements, want 3 batches of at most 10", got)
	}
	if got := b.count(t, nil); got != recent {
		t.Fatalf("%d rows left, want %d", got, recent)
	}
	for _, k := range oldKeys[:3] {
		if _, err := b.in.Lookup(b.ctx, b.pool, k); !errors.Is(err, inbox.ErrNotFound) {
			t.Fatalf("old row still there: %v", err)
		}
	}

	// Nothing older left: one statement, zero rows. An exact multiple of the
	// batch size needs one more, empty, batch.
	q.execs.Store(0)
	if n, err := b.in.Purge(testwait.Context(t, b.ctx, testwait.Step), q, cutoff, 0); err != nil || n != 0 || q.execs.Load() != 1 {
		t.Fatalf("second purge = %d, %v after %d statements; want 0 after 1", n, err, q.execs.Load())
	}
	q.execs.Store(0)
	if n, err := b.in.Purge(testwait.Context(t, b.ctx, testwait.Step), q, time.Now().Add(time.Hour), recent); err != nil || n != recent || q.execs.Load() != 2 {
		t.Fatalf("purge all = %d, %v after %d statements; want %d after 2", n, err, q.execs.Load(), recent)
	}

	// A cancelled context stops before the first batch.
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	if _, err := b.in.Purge(ctx, b.pool, cutoff, 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("purge with cancelled ctx = %v", err)
	}
}
