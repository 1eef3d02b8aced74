package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/outbox"
)

// A MarkSent, MarkFailed or Release that waits behind a lease recovery
// loses the lease, and its report shows the row as the recovery left it
// (RETRY, no owner), not the SENDING row of the statement's snapshot.
func TestLostReportShowsTheCurrentRow(t *testing.T) {
	t.Parallel()
	var b *bundle
	ops := map[string]func(l outbox.Lease, id uuid.UUID) (outbox.MarkResult, error){
		"MarkSent": func(l outbox.Lease, id uuid.UUID) (outbox.MarkResult, error) {
			return b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: l, Sent: []uuid.UUID{id}})
		},
		"MarkFailed": func(l outbox.Lease, id uuid.UUID) (outbox.MarkResult, error) {
			return b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: l, Failed: []outbox.Failure{{EventID: id, Err: errors.New("x")}}})
		},
		"Release": func(l outbox.Lease, id uuid.UUID) (outbox.MarkResult, error) {
			return b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: l, Released: []uuid.UUID{id}})
		},
	}
	for name, op := range ops {
		b = setup(t, outbox.Config{}) // the ops read b when called
		b.enqueue(t, event(1))
		c := b.claim(t, "relay-"+name, 1)
		if len(c.Messages) != 1 {
			t.Fatalf("%s: claimed %d", name, len(c.Messages))
		}
		id := c.Messages[0].EventID
		rec, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		// A failure below must not leave the recovery's transaction open:
		// dropping the test's schema would wait for it.
		t.Cleanup(func() { _ = rec.Rollback(context.Background()) })
		if got, err := b.store.Recover(b.ctx, rec, c.Lease, time.Microsecond, 1000); err != nil || len(got) != 1 {
			t.Fatalf("%s: recover %v, %v", name, got, err)
		}
		type result struct {
			res outbox.MarkResult
			err error
		}
		done := make(chan result, 1)
		go func() {
			r, err := op(c.Lease, id)
			done <- result{r, err}
		}()
		waitLockWaiter(t, b)
		if err := rec.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		got := testwait.Recv(t, done, "the blocked call to return")
		var lost *outbox.Error
		if !errors.Is(got.err, outbox.ErrLeaseLost) || !errors.As(got.err, &lost) || got.res.Marked != 0 || len(got.res.Lost) != 1 || len(lost.Lost) != 1 {
			t.Fatalf("%s: %+v, %v", name, got.res, got.err)
		}
		for _, l := range []outbox.LostEvent{got.res.Lost[0], lost.Lost[0]} {
			if l.EventID != id || !l.Exists || l.Status != outbox.StatusRetry || l.LockedBy != "" {
				t.Fatalf("%s: lost event %+v, want RETRY without owner", name, l)
			}
		}
		if st, retries, _ := b.status(t, id); st != outbox.StatusRetry || retries != 1 {
			t.Fatalf("%s: row %v after %d attempts", name, st, retries)
		}
	}
}

func waitLockWaiter(t *testing.T, b *bundle) {
	t.Helper()
	ctx := testwait.Context(t, b.ctx, testwait.Step)
	for {
		var n int
		if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0`, b.schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no statement waited for a lock: %v", context.Cause(ctx))
		case <-time.After(5 * time.Millisecond):
		}
	}
}
