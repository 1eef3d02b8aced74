// Package twin is the shared body of a helper and its Queue twin: one
// statement, its arguments and the function that reads its row, run now on
// a connection or transaction, or queued into a caller's batch; or, as a
// [Batch], several statements sent together.
//
// A package builds a [Row] from validated input in one place; the direct
// helper calls [Row.Run] and the Queue helper calls [Row.Queue], so both
// send the same statement and classify its result the same way.
package twin

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// RowQuerier runs a statement that returns at most one row: a pool, a
// connection or a transaction.
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Row is a statement that returns at most one row, with the function that
// reads and classifies it.
type Row[T any] struct {
	// SQL is the statement.
	SQL string
	// Args are its arguments.
	Args []any
	// Scan reads row into dst and returns the classified error (pgx reports
	// the statement's own error at Scan). batch is true for a queued
	// statement, whose callback has no context of its own: ctx is then
	// context.Background().
	Scan func(ctx context.Context, batch bool, row pgx.Row, dst *T) error
}

// Run runs the statement on q and returns what Scan read.
func (r Row[T]) Run(ctx context.Context, q RowQuerier) (T, error) {
	var out T
	err := r.Scan(ctx, false, q.QueryRow(ctx, r.SQL, r.Args...), &out)
	return out, err
}

// Queue queues the statement into b; Scan fills dst when the batch results
// are read, and its error is the one BatchResults returns for it. b and dst
// must not be nil (the caller checks, with its own error type).
func (r Row[T]) Queue(b *pgx.Batch, dst *T) {
	b.Queue(r.SQL, r.Args...).QueryRow(func(row pgx.Row) error {
		return r.Scan(context.Background(), true, row, dst)
	})
}

// BatchSender sends a batch: a pool, a connection or a transaction.
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Batch is a helper of several statements sent together, each with its own
// callback: run now as a batch of their own (one round trip), or queued
// into a caller's batch.
type Batch[T any] struct {
	// Add queues the statements into b with callbacks that fill dst and
	// return the classified error (pgx returns the first one from
	// BatchResults.Close). batch is true for the Queue form, whose
	// callbacks have no context of their own: ctx is then
	// context.Background().
	Add func(ctx context.Context, batch bool, b *pgx.Batch, dst *T)
}

// Run sends the statements on s as one batch and returns what the
// callbacks filled in, with the first error.
func (q Batch[T]) Run(ctx context.Context, s BatchSender) (T, error) {
	var (
		out T
		b   pgx.Batch
	)
	q.Add(ctx, false, &b, &out)
	err := s.SendBatch(ctx, &b).Close()
	return out, err
}

// Queue appends the statements to b; dst is filled when the caller reads
// the batch's results.
func (q Batch[T]) Queue(b *pgx.Batch, dst *T) {
	q.Add(context.Background(), true, b, dst)
}
