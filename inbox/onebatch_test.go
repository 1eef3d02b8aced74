package inbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/pgtx"
)

// waitForLockWait returns once a statement on schema waits for a lock.
func waitForLockWait(t *testing.T, b *testBundle) {
	t.Helper()
	ctx := testwait.Context(t, b.ctx, testwait.Step)
	for {
		var n int
		if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, b.schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no statement waited for the lock")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestQueueClaimMessageAbort(t *testing.T) {
	t.Parallel()
	for _, citus := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "citus"}[citus], func(t *testing.T) {
			t.Parallel()
			queueClaimMessageAbort(t, setupMode(t, citus))
		})
	}
}

func queueClaimMessageAbort(t *testing.T, b *testBundle) {
	msg := newMessage("g")
	res := inbox.Result{Code: "DONE", Payload: []byte(`{"n":1}`)}
	claim := func(m inbox.Message) error {
		var batch pgx.Batch
		if err := b.in.QueueClaimMessage(&batch, withResult(m, res), nil, pgtx.Abort); err != nil {
			t.Fatal(err)
		}
		return pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, &batch)
	}

	// New: committed, PROCESSED with the result.
	if err := claim(msg); err != nil {
		t.Fatalf("fresh claim: %v", err)
	}
	rec, err := b.in.Lookup(b.ctx, b.pool, msg.Key())
	if err != nil || rec.Status != inbox.StatusProcessed || rec.Result.Code != "DONE" {
		t.Fatalf("row = %+v, %v; want PROCESSED with DONE", rec, err)
	}

	// Processed before: the insert raises, nothing commits.
	err = claim(msg)
	var se *pgtx.StatementError
	if c, ok := pgtx.UniqueViolationOf(err); !errors.As(err, &se) || se.Index != 0 || !ok || c != inbox.ConstraintClaimed || !pgtx.Classify(err).NotCommitted {
		t.Fatalf("duplicate: err = %v, want statement 0 to raise unique_violation on %s", err, inbox.ConstraintClaimed)
	}
	if !errors.Is(err, inbox.ErrDuplicate) || se.Call != "inbox.Store.QueueClaimMessage(g "+msg.MessageID.String()+")" ||
		!strings.Contains(err.Error(), se.Call) {
		t.Fatalf("duplicate: err = %v (call %q), want inbox.ErrDuplicate from the named call", err, se.Call)
	}
	if n := b.count(t, nil); n != 1 {
		t.Fatalf("rows = %d, want 1", n)
	}

	// In flight: the insert waits for the first claim's transaction; it
	// raises when that commits and claims when that rolls back.
	for _, commit := range []bool{true, false} {
		m := newMessage("g")
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := b.in.ClaimMessage(b.ctx, tx, m); err != nil || !c.Fresh {
			t.Fatalf("first claim: %+v %v", c, err)
		}
		done := make(chan error, 1)
		go func() { done <- claim(m) }()
		waitForLockWait(t, b)
		if commit {
			err = tx.Commit(b.ctx)
		} else {
			err = tx.Rollback(b.ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		err = testwait.Recv(t, done, "the blocked call to return")
		if _, dup := pgtx.UniqueViolationOf(err); commit != dup || (!commit && err != nil) {
			t.Fatalf("first claim committed %v: second claim err = %v", commit, err)
		}
		rec, err := b.in.Lookup(b.ctx, b.pool, m.Key())
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]inbox.Status{true: inbox.StatusClaimed, false: inbox.StatusProcessed}[commit]; rec.Status != want {
			t.Fatalf("first claim committed %v: row status %v, want %v", commit, rec.Status, want)
		}
	}

	// Bad input queues nothing.
	var batch pgx.Batch
	bad := newMessage("g")
	bad.Topic = ""
	if err := b.in.QueueClaimMessage(&batch, withResult(bad, res), nil, pgtx.Abort); !errors.Is(err, inbox.ErrInvalidArgument) || batch.Len() != 0 {
		t.Fatalf("bad message: %v, %d queued", err, batch.Len())
	}
	if err := b.in.QueueClaimMessage(&batch, withResult(newMessage("g"), inbox.Result{}), nil, pgtx.Abort); !errors.Is(err, inbox.ErrInvalidArgument) || batch.Len() != 0 {
		t.Fatalf("bad result: %v, %d queued", err, batch.Len())
	}
	if err := b.in.QueueClaimMessage(nil, withResult(newMessage("g"), res), nil, pgtx.Abort); !errors.Is(err, inbox.ErrInvalidArgument) {
		t.Fatalf("nil batch: %v", err)
	}
}
