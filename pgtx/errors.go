package pgtx

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrCommitOutcomeUnknown is matched (with errors.Is) by the error
// [RunInTx] returns when COMMIT was sent but its answer never arrived: the
// connection broke, timed out or was cancelled during COMMIT. The
// transaction may or may not have committed. Such an error is never retried
// by RunInTx: running fn again could apply it twice. Recover through an
// idempotent path (redelivery plus an inbox, unique keys) or enable
// [Options.ResolveCommit]. The concrete type is *[CommitError].
var ErrCommitOutcomeUnknown = errors.New("pgtx: commit outcome unknown")

// ErrTooManyAttempts is matched by the error [RunInTx] and [RunBatch]
// return when the last allowed attempt ([Options.MaxAttempts]) failed with
// a retryable error. The error's text gives the number of attempts, and it
// unwraps to the last attempt's error too, so errors.As finds the
// *pgconn.PgError and [Classify] reports the last attempt's condition.
var ErrTooManyAttempts = errors.New("pgtx: retryable error on every attempt")

// ErrInvalidOptions is matched by the error [RunInTx] returns, before
// touching the database, when its [Options] are out of range.
var ErrInvalidOptions = errors.New("pgtx: invalid options")

// CommitError reports a COMMIT that did not succeed. Unknown tells whether
// the outcome is unknown (the error then matches [ErrCommitOutcomeUnknown])
// or known not to have committed (the server refused or rolled back, the
// COMMIT never left the client, or the resolution found the transaction
// aborted).
type CommitError struct {
	// Err is the error COMMIT returned.
	Err error
	// Unknown is true when the transaction may have committed.
	Unknown bool
	// XID is the transaction id captured before COMMIT when
	// [Options.ResolveCommit] is set and the transaction had one; 0
	// otherwise.
	XID uint64
	// Resolution says what resolution found: "" (not attempted),
	// "aborted", "in progress" (still undecided when resolution timed out),
	// "no transaction id before COMMIT" (nothing to ask about; the outcome
	// stays unknown), a timeline change (a failover since the transaction
	// id was read: the outcome stays unknown), or the error that stopped it.
	Resolution string

	timeline string // the server's timeline when XID was read
}

// Error says whether the outcome is unknown or the transaction did not
// commit, then the transaction id and the resolution when there are any,
// then COMMIT's error.
func (e *CommitError) Error() string {
	var b strings.Builder
	if e.Unknown {
		b.WriteString("pgtx: commit outcome unknown")
	} else {
		b.WriteString("pgtx: commit failed, transaction not committed")
	}
	if e.XID != 0 {
		fmt.Fprintf(&b, " (xid %d", e.XID)
		if e.Resolution != "" {
			fmt.Fprintf(&b, ", resolution: %s", e.Resolution)
		}
		b.WriteString(")")
	} else if e.Resolution != "" {
		fmt.Fprintf(&b, " (resolution: %s)", e.Resolution)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the error COMMIT returned.
func (e *CommitError) Unwrap() error { return e.Err }

// Is matches [ErrCommitOutcomeUnknown] when the outcome is unknown.
func (e *CommitError) Is(target error) bool {
	return target == ErrCommitOutcomeUnknown && e.Unknown
}

// sqlState returns the SQLSTATE of the first *pgconn.PgError in err's chain.
func sqlState(err error) (string, *pgconn.PgError) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code, pgErr
	}
	return "", nil
}

// ErrorClass is what [Classify] reads from an error: what became of the
// transaction (Committed, NotCommitted or OutcomeUnknown: exactly one is
// true) and which condition a caller acts on caused it. The conditions are
// read from the SQLSTATE of the first *pgconn.PgError in the chain.
type ErrorClass struct {
	// Committed is true for a nil error and a [RunBatch] *[ResultError]:
	// the transaction committed.
	Committed bool
	// NotCommitted is true for every other error of [RunInTx] or
	// [RunBatch] except an unknown outcome: it proves the transaction did
	// not commit, so running the work again cannot apply it twice.
	NotCommitted bool
	// OutcomeUnknown is true when the error matches
	// [ErrCommitOutcomeUnknown]: COMMIT was sent and its answer lost.
	OutcomeUnknown bool

	// Retryable is true when the whole transaction failed in a way that
	// running it again may fix: serialization_failure (40001) or
	// deadlock_detected (40P01). These two codes are matched explicitly:
	// transaction_integrity_constraint_violation (40002) and
	// statement_completion_unknown (40003), in the same class, are not.
	// An unknown outcome is never retryable.
	Retryable bool
	// SerializationFailure is true for SQLSTATE 40001.
	SerializationFailure bool
	// Deadlock is true for SQLSTATE 40P01.
	Deadlock bool
	// LockTimeout is true for lock_not_available (55P03): the statement
	// gave up waiting for a lock because of lock_timeout (see
	// [Options.LockTimeout]) or NOWAIT.
	LockTimeout bool
	// StatementTimeout is true for query_canceled (57014) that no ended
	// context explains: the statement ran past statement_timeout (see
	// [Options.StatementTimeout]).
	//
	// PostgreSQL raises 57014 both for statement_timeout and for a cancel
	// request (one that pgx sends when a context ends mid-query, with
	// pgconn.CancelRequestContextWatcherHandler, or pg_cancel_backend),
	// and tells them apart only in the message text, which follows the
	// server's lc_messages; pgconn reports no cancel request in the error
	// either. So Classify reads no message: StatementTimeout is false when
	// the error also matches context.Canceled or context.DeadlineExceeded,
	// which [RunInTx] adds to a 57014 that fn returns after RunInTx's
	// context ended. For an error from outside RunInTx, check the context
	// (or wrap its error) yourself. A pg_cancel_backend by another
	// session, with the context still live, is indistinguishable and
	// counts as a timeout.
	StatementTimeout bool
}

// Classify tells what err, returned by [RunInTx], [RunBatch], fn or any
// statement, means: see [ErrorClass]. It works on any error chain built
// with %w (or errors.Join). Classify(nil) reports Committed and nothing
// else. A unique violation is told by [UniqueViolationOf], with the
// constraint's name.
func Classify(err error) ErrorClass {
	var c ErrorClass
	var re *ResultError
	switch {
	case err == nil, errors.As(err, &re):
		c.Committed = true
	case errors.Is(err, ErrCommitOutcomeUnknown):
		c.OutcomeUnknown = true
	default:
		c.NotCommitted = true
	}
	code, _ := sqlState(err)
	c.SerializationFailure = code == pgerrcode.SerializationFailure
	c.Deadlock = code == pgerrcode.DeadlockDetected
	c.Retryable = (c.SerializationFailure || c.Deadlock) && !c.OutcomeUnknown
	c.LockTimeout = code == pgerrcode.LockNotAvailable
	c.StatementTimeout = code == pgerrcode.QueryCanceled &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	return c
}

// UniqueViolationOf reports whether err is a unique_violation (23505) and, if
// so, the name of the violated constraint (or unique index).
//
// A violation that a Citus coordinator relays from a worker (its context
// says "while executing command on") carries no constraint field, and its
// message names the shard's constraint: the schema's name with
// "_<shard id>" appended. The name is then read from the message (the
// first double-quoted name, as PostgreSQL's English messages put it) and
// the suffix removed, so that it is the one in the schema, as on plain
// PostgreSQL.
func UniqueViolationOf(err error) (constraint string, ok bool) {
	code, pgErr := sqlState(err)
	if code != pgerrcode.UniqueViolation {
		return "", false
	}
	name := pgErr.ConstraintName
	if strings.Contains(pgErr.Where, "while executing command on ") {
		if name == "" {
			if _, rest, found := strings.Cut(pgErr.Message, `"`); found {
				name, _, _ = strings.Cut(rest, `"`)
			}
		}
		if i := strings.LastIndexByte(name, '_'); i > 0 && i < len(name)-1 &&
			strings.Trim(name[i+1:], "0123456789") == "" {
			name = name[:i]
		}
	}
	return name, true
}

// withContextEnd adds ctx's error to err when err is query_canceled (57014)
// and ctx has ended, so that [Classify] can tell the cancel request an
// ended context caused from a statement timeout.
func withContextEnd(ctx context.Context, err error) error {
	if code, _ := sqlState(err); code != pgerrcode.QueryCanceled || ctx.Err() == nil ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w (cancelled because the context ended: %w)", err, ctx.Err())
}
