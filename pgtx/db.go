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
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// TxBeginner starts a transaction. *pgxpool.Pool and *pgx.Conn satisfy it;
// [RunInTx] accepts it.
type TxBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Compile-time checks that the pgx types fit.
var (
	_ Querier    = (pgx.Tx)(nil)
	_ Querier    = (*pgx.Conn)(nil)
	_ TxBeginner = (*pgx.Conn)(nil)
)
