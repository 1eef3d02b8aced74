package pgtx_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/pgtx"
)

// TestCommitErrorText: a CommitError says which outcome it is, and its
// transaction id and resolution when it has them.
func TestCommitErrorText(t *testing.T) {
	t.Parallel()
	cause := errors.New("connection reset")
	for _, c := range []struct {
		err  pgtx.CommitError
		want string
	}{
		{pgtx.CommitError{Err: cause, Unknown: true}, "pgtx: commit outcome unknown: connection reset"},
		{pgtx.CommitError{Err: cause}, "pgtx: commit failed, transaction not committed: connection reset"},
		{pgtx.CommitError{Err: cause, Unknown: true, XID: 42}, "pgtx: commit outcome unknown (xid 42): connection reset"},
		{pgtx.CommitError{Err: cause, Unknown: true, XID: 42, Resolution: "in progress"},
			"pgtx: commit outcome unknown (xid 42, resolution: in progress): connection reset"},
		{pgtx.CommitError{Err: cause, Resolution: "aborted"}, "pgtx: commit failed, transaction not committed (resolution: aborted): connection reset"},
		{pgtx.CommitError{Unknown: true}, "pgtx: commit outcome unknown"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%+v:\n got %q\nwant %q", c.err, got, c.want)
		}
	}
}

// TestUniqueViolationOfCitusNames: a unique violation a Citus coordinator
// relays names the shard's constraint; only a trailing "_<digits>" after
// a non-empty name is a shard suffix.
func TestUniqueViolationOfCitusNames(t *testing.T) {
	t.Parallel()
	const where = "while executing command on 10.0.0.2:5432"
	for _, c := range []struct{ constraint, message, want string }{
		{"uq_orders_request_102008", "", "uq_orders_request"},
		{"", `duplicate key value violates unique constraint "uq_orders_request_102008"`, "uq_orders_request"},
		{"items_pkey", "", "items_pkey"},       // no shard suffix
		{"_102008", "", "_102008"},             // nothing before the underscore
		{"uq_orders_", "", "uq_orders_"},       // nothing after it
		{"uq_orders_v2x", "", "uq_orders_v2x"}, // not digits
		{"a_1", "", "a"},
	} {
		err := &pgconn.PgError{Code: "23505", ConstraintName: c.constraint, Message: c.message, Where: where}
		if got, ok := pgtx.UniqueViolationOf(err); !ok || got != c.want {
			t.Errorf("%+v: %q, %v; want %q", c, got, ok, c.want)
		}
	}
	// Not relayed: the name is the server's, as it is.
	if got, _ := pgtx.UniqueViolationOf(&pgconn.PgError{Code: "23505", ConstraintName: "uq_x_1"}); got != "uq_x_1" {
		t.Errorf("plain PostgreSQL: %q, want uq_x_1", got)
	}
}

// TestObserverWithOneHook: an Observer with only one hook set has it
// called: TxStart alone, AttemptStart alone.
func TestObserverWithOneHook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var txStarts, attemptStarts int
	for _, obs := range []pgtx.Observer{
		{TxStart: func(ctx context.Context, _ pgtx.Event) context.Context { txStarts++; return ctx }},
		{AttemptStart: func(ctx context.Context, _ pgtx.Event) context.Context { attemptStarts++; return ctx }},
	} {
		if err := pgtx.RunInTx(b.ctx, b.pool, pgtx.Options{Observer: obs}, func(pgx.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if txStarts != 1 || attemptStarts != 1 {
		t.Fatalf("TxStart called %d times, AttemptStart %d; want 1 and 1", txStarts, attemptStarts)
	}
}

// TestStatementErrorText: a StatementError names the call, or the
// statement's index (0 is the first statement), or says that the batch
// failed before its first statement ran (index -1).
func TestStatementErrorText(t *testing.T) {
	t.Parallel()
	cause := errors.New("boom")
	for _, c := range []struct {
		err  pgtx.StatementError
		want string
	}{
		{pgtx.StatementError{Call: "order.QueueCreate", Index: 3, Err: cause}, "pgtx: batch call order.QueueCreate failed, nothing committed: boom"},
		{pgtx.StatementError{Index: 0, Err: cause}, "pgtx: batch statement 0 failed, nothing committed: boom"},
		{pgtx.StatementError{Index: 2, Err: cause}, "pgtx: batch statement 2 failed, nothing committed: boom"},
		{pgtx.StatementError{Index: -1, Err: cause}, "pgtx: batch failed before its first statement ran: boom"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%+v:\n got %q\nwant %q", c.err, got, c.want)
		}
	}
}

// TestBackoffOptions: the waits between attempts (as the Observer sees
// them) follow BaseBackoff and MaxBackoff, and their defaults (10ms, 1s)
// when they are zero.
func TestBackoffOptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// waits runs RunInTx whose fn fails with a serialization failure on
	// every attempt but the last, and returns the Observer's backoffs.
	waits := func(opts pgtx.Options) []time.Duration {
		var got []time.Duration
		opts.Observer = pgtx.Observer{AttemptEnd: func(_ context.Context, e pgtx.Event) {
			if e.Retry {
				got = append(got, e.Backoff)
			}
		}}
		runs := 0
		err := pgtx.RunInTx(b.ctx, b.pool, opts, func(pgx.Tx) error {
			if runs++; runs < opts.MaxAttempts {
				return fmt.Errorf("fn: %w", &pgconn.PgError{Code: "40001"})
			}
			return nil
		})
		if err != nil || len(got) != opts.MaxAttempts-1 {
			t.Fatalf("%+v: %v, %d waits", opts, err, len(got))
		}
		return got
	}
	within := func(what string, d, lo, hi time.Duration) {
		t.Helper()
		if d < lo || d > hi {
			t.Errorf("%s: wait %v, want within [%v, %v]", what, d, lo, hi)
		}
	}
	w := waits(pgtx.Options{MaxAttempts: 2}) // the defaults
	within("default base", w[0], 5*time.Millisecond, 10*time.Millisecond)
	w = waits(pgtx.Options{MaxAttempts: 2, BaseBackoff: 40 * time.Millisecond})
	within("BaseBackoff 40ms", w[0], 20*time.Millisecond, 40*time.Millisecond)
	w = waits(pgtx.Options{MaxAttempts: 7, BaseBackoff: time.Millisecond}) // default cap 1s
	within("6th wait, default cap", w[5], 16*time.Millisecond, 32*time.Millisecond)
	w = waits(pgtx.Options{MaxAttempts: 6, BaseBackoff: time.Millisecond, MaxBackoff: 3 * time.Millisecond})
	within("5th wait, MaxBackoff 3ms", w[4], 1500*time.Microsecond, 3*time.Millisecond)
}

// TestBackoffEdges: the waits at the edges of backoff's arithmetic — a
// wait of 1ns is exactly that, a wait of 2ns is 1 or 2 (both drawn), and
// a cap near the largest duration does not cut the doubling short.
func TestBackoffEdges(t *testing.T) {
	t.Parallel()
	seen := map[time.Duration]bool{}
	for range 256 {
		if got := pgtx.Backoff(1, 1, time.Second); got != 1 {
			t.Fatalf("Backoff(1, 1ns, 1s) = %v, want 1ns", got)
		}
		got := pgtx.Backoff(1, 2, time.Second)
		if got != 1 && got != 2 {
			t.Fatalf("Backoff(1, 2ns, 1s) = %v, want 1ns or 2ns", got)
		}
		seen[got] = true
		if got := pgtx.Backoff(2, time.Millisecond, math.MaxInt64); got < time.Millisecond || got > 2*time.Millisecond {
			t.Fatalf("Backoff(2, 1ms, max) = %v, want within [1ms, 2ms]", got)
		}
	}
	if !seen[1] || !seen[2] {
		t.Fatalf("Backoff(1, 2ns, 1s) drew %v in 256 tries; want both 1ns and 2ns", seen)
	}
}
