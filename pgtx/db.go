package pgtx

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is the smallest handle the read and stand-alone write helpers of
// this module accept. A *pgxpool.Pool, a *pgx.Conn and a pgx.Tx all satisfy
// it, so a helper runs inside the caller's transaction when given one and
// in its own implicit transaction otherwise.
//
// The helpers call one method at a time and never from two goroutines at
// once on the same handle, so a pgx.Tx (which is not safe for concurrent
// use) is fine; they never commit, roll back or close what they are given.
type Querier interface {
	// Exec runs sql with args and returns its command tag (the helpers
	// read RowsAffected from it: 0 rows is an outcome they classify).
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	// Query runs sql with args and returns its rows; the helpers read them
	// to the end and close them before the next call.
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	// QueryRow runs sql with args; an error, including pgx.ErrNoRows,
	// is reported by Scan.
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	// SendBatch sends b's statements in one pipeline and returns their
	// results in order; the helpers close the results before the next
	// call. On a pool or connection outside a transaction each statement
	// runs in its own implicit transaction, as pgx does.
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// TxBeginner starts a transaction. *pgxpool.Pool and *pgx.Conn satisfy it;
// [RunInTx] accepts it.
type TxBeginner interface {
	// BeginTx starts a transaction with opts (isolation, access and
	// deferrable modes, which RunInTx fills from [Options]) and returns it;
	// RunInTx commits or rolls it back itself. It may block (a pool waiting
	// for a free connection) until ctx ends. RunInTx calls it at most once
	// per attempt (with [Options.DeferBegin], only when fn's first
	// statement cannot carry BEGIN along).
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Compile-time checks that the pgx types fit.
var (
	_ Querier    = (pgx.Tx)(nil)
	_ Querier    = (*pgx.Conn)(nil)
	_ TxBeginner = (*pgx.Conn)(nil)
)
