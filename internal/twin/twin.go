// Package twin is the shared body of a helper and its Queue twin: one
// statement, its arguments and the function that reads its row, run now on
// a connection or transaction, or queued into a caller's batch.
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
