package pgtx

import (
	"runtime"
	"sync"
	"weak"

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
// When the server refuses the batch before its first statement runs (pgx
// prepares the statements it has not described yet in a round trip of
// their own, and an unknown table fails there, without saying which
// statement named it), [RunBatch] asks the calls' classify functions in
// order, and the first that recognises the error names the call.
//
// NameCall keeps the result callbacks already set on the statements
// (QueuedQuery.Exec, Query, QueryRow): it wraps them, so set them before
// calling it. A from out of range marks nothing.
func NameCall(b *pgx.Batch, from int, name string, classify func(error) error) {
	if b == nil || from < 0 || from >= len(b.QueuedQueries) {
		return
	}
	if classify != nil {
		register(b, namedCall{name: name, classify: classify, from: from, first: b.QueuedQueries[from]})
	}
	for _, qq := range b.QueuedQueries[from:] {
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

// namedCall is a call marked by NameCall with a classify function: its
// first statement, first, at position from of its batch.
type namedCall struct {
	name     string
	classify func(error) error
	from     int
	first    *pgx.QueuedQuery
}

// in reports whether c's first statement is still where it was queued in
// b (a batch value reset and queued again has other statements).
func (c namedCall) in(b *pgx.Batch) bool {
	return c.from < len(b.QueuedQueries) && b.QueuedQueries[c.from] == c.first
}

// calls holds, per batch, the calls marked in it with a classify function
// (a *[]namedCall per weak.Pointer[pgx.Batch]); an entry goes when its
// batch is collected. A batch is built by one goroutine at a time.
var calls sync.Map

func register(b *pgx.Batch, c namedCall) {
	k := weak.Make(b)
	v, loaded := calls.LoadOrStore(k, &[]namedCall{})
	list := v.(*[]namedCall)
	if len(*list) > 0 && !(*list)[0].in(b) {
		*list = (*list)[:0] // b was reset: its earlier calls are gone
	}
	*list = append(*list, c)
	if !loaded {
		runtime.AddCleanup(b, func(k weak.Pointer[pgx.Batch]) { calls.Delete(k) }, k)
	}
}

// classifyUnplaced gives err, an error the server raised for b without
// naming its statement, to the classify functions of b's named calls in
// order: the first that returns another error names the call. It returns
// "" and err when none does.
func classifyUnplaced(b *pgx.Batch, err error) (string, error) {
	v, ok := calls.Load(weak.Make(b))
	if !ok {
		return "", err
	}
	for _, c := range *v.(*[]namedCall) {
		if !c.in(b) {
			continue
		}
		if ce := c.classify(err); ce != nil && ce != err {
			return c.name, ce
		}
	}
	return "", err
}
