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

// ErrTooManyAttempts is matched by the error [RunInTx] returns when every
// attempt failed with a retryable error. The concrete type is
// *[AttemptsError].
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

// AttemptsError is returned by [RunInTx] when the last allowed attempt
// failed with a retryable error. It matches [ErrTooManyAttempts] and
// unwraps to the last attempt's error, so errors.As finds the
// *pgconn.PgError.
type AttemptsError struct {
	Attempts int   // how many attempts ran
	Err      error // the last attempt's error
}

// Error gives the number of attempts and the last attempt's error.
func (e *AttemptsError) Error() string {
	return fmt.Sprintf("pgtx: gave up after %d attempts: %v", e.Attempts, e.Err)
}

// Unwrap returns the last attempt's error.
func (e *AttemptsError) Unwrap() error { return e.Err }

// Is matches [ErrTooManyAttempts].
func (e *AttemptsError) Is(target error) bool { return target == ErrTooManyAttempts }

// sqlState returns the SQLSTATE of the first *pgconn.PgError in err's chain.
func sqlState(err error) (string, *pgconn.PgError) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code, pgErr
	}
	return "", nil
}

// IsRetryable reports whether err means the whole transaction failed in a
// way that running it again may fix: serialization_failure (40001) or
// deadlock_detected (40P01). These two codes are matched explicitly:
// transaction_integrity_constraint_violation (40002) and
// statement_completion_unknown (40003), in the same class, are not. An error whose outcome is
// unknown ([ErrCommitOutcomeUnknown]) is never retryable.
func IsRetryable(err error) bool {
	if errors.Is(err, ErrCommitOutcomeUnknown) {
		return false
	}
	code, _ := sqlState(err)
	return code == pgerrcode.SerializationFailure || code == pgerrcode.DeadlockDetected
}

// IsSerializationFailure reports whether err carries SQLSTATE 40001.
func IsSerializationFailure(err error) bool {
	code, _ := sqlState(err)
	return code == pgerrcode.SerializationFailure
}

// IsDeadlock reports whether err carries SQLSTATE 40P01.
func IsDeadlock(err error) bool {
	code, _ := sqlState(err)
	return code == pgerrcode.DeadlockDetected
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

// IsLockTimeout reports whether err is lock_not_available (55P03): the
// statement gave up waiting for a lock because of lock_timeout (see
// [Options.LockTimeout]) or NOWAIT.
func IsLockTimeout(err error) bool {
	code, _ := sqlState(err)
	return code == pgerrcode.LockNotAvailable
}

// IsStatementTimeout reports whether err is query_canceled (57014) that no
// ended context explains: the statement ran past statement_timeout (see
// [Options.StatementTimeout]).
//
// PostgreSQL raises 57014 both for statement_timeout and for a cancel
// request (one that pgx sends when a context ends mid-query, with
// pgconn.CancelRequestContextWatcherHandler, or pg_cancel_backend), and
// tells them apart only in the message text, which follows the server's
// lc_messages; pgconn reports no cancel request in the error either. So
// the predicate reads no message: it returns false when err also matches
// context.Canceled or context.DeadlineExceeded, which [RunInTx] adds to a
// 57014 that fn returns after RunInTx's context ended. For an error from
// outside RunInTx, check the context (or wrap its error) yourself. A
// pg_cancel_backend by another session, with the context still live, is
// indistinguishable and counts as a timeout.
func IsStatementTimeout(err error) bool {
	code, _ := sqlState(err)
	return code == pgerrcode.QueryCanceled &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// withContextEnd adds ctx's error to err when err is query_canceled (57014)
// and ctx has ended, so that [IsStatementTimeout] can tell the cancel
// request an ended context caused from a statement timeout.
func withContextEnd(ctx context.Context, err error) error {
	if code, _ := sqlState(err); code != pgerrcode.QueryCanceled || ctx.Err() == nil ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w (cancelled because the context ended: %w)", err, ctx.Err())
}

// IsCommitOutcomeUnknown reports whether errors.Is(err,
// [ErrCommitOutcomeUnknown]).
func IsCommitOutcomeUnknown(err error) bool { return errors.Is(err, ErrCommitOutcomeUnknown) }

// IsNotCommitted reports whether err, returned by [RunInTx] or [RunBatch],
// proves the transaction did not commit — every non-nil error except one
// whose outcome is unknown and a [RunBatch] *[ResultError] (committed).
// Re-running the work after such an error cannot apply it twice.
func IsNotCommitted(err error) bool {
	var re *ResultError
	return err != nil && !IsCommitOutcomeUnknown(err) && !errors.As(err, &re)
}
