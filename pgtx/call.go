package pgtx

import (
	"github.com/jackc/pgx/v5"
)

// NameCall marks the statements queued in b from position from (an index
// of b.QueuedQueries) to its end as one call named name, and has classify
// translate their errors. A helper that queues several statements for one
// operation (an allocation queues a ledger row and a decrement) calls it
// once, after queueing them, so that a failure names the operation and its
// condition rather than a statement:
//
//   - [RunBatch] returns a *[StatementError] (or a *[ResultError]) whose
//     Call is name and whose Err is classify's error;
//   - sent otherwise (pgx.Tx.SendBatch and BatchResults.Close), the
//     statement's error is classify's, with name in front of its text.
//
// classify receives the error a statement returned (a server error, or
// the error of the result callback queued with it) and returns the error
// the call reports: typically one that matches the helper's sentinel with
// errors.Is and unwraps to the error it was given, so that errors.As still
// finds the *pgconn.PgError. A nil classify, or one that returns its
// argument, leaves the error as it is. It runs only on failure, from the
// goroutine reading the results.
//
// NameCall keeps the result callbacks already set on the statements
// (QueuedQuery.Exec, Query, QueryRow): it wraps them, so set them before
// calling it. A from out of range marks nothing.
func NameCall(b *pgx.Batch, from int, name string, classify func(error) error) {
	if b == nil || from < 0 {
		return
	}
	for _, qq := range b.QueuedQueries[min(from, len(b.QueuedQueries)):] {
		fn := qq.Fn
		qq.Fn = func(br pgx.BatchResults) error {
			var err error
			if fn != nil {
				err = fn(br)
			} else {
				_, err = br.Exec()
			}
			if err == nil {
				return nil
			}
			if classify != nil {
				if c := classify(err); c != nil {
					err = c
				}
			}
			return &callError{name: name, err: err}
		}
	}
}

// callError is the error of a statement of a call marked by [NameCall]:
// the call's name and the classified error.
type callError struct {
	name string
	err  error
}

func (e *callError) Error() string { return e.name + ": " + e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

// callOf splits the error of a statement of a named call into the call's
// name and its error; other errors come back as they are, with "".
func callOf(err error) (string, error) {
	if ce, ok := err.(*callError); ok {
		return ce.name, ce.err
	}
	return "", err
}
