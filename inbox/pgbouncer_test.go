package inbox_test

// The inbox through PgBouncer in transaction pooling mode, with the pgx
// settings of the harness (default_query_exec_mode=exec): migration,
// concurrent claims and the batch forms.

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// bouncerSetup is setup with the migration and the returned pool going
// through the process's PgBouncer; b.pool stays a direct pool for checks.
func bouncerSetup(t *testing.T, maxConns int32) (*testBundle, *pgxpool.Pool) {
	t.Helper()
	bp := pgtest.PgBouncerPool(t, func(c *pgxpool.Config) { c.MaxConns = maxConns })
	schema := pgtest.Schema(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	// migrate takes a transaction-scoped advisory lock and SET LOCAL
	// search_path: both fine through transaction pooling.
	if err := migrateInbox(ctx, bp, schema); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{ctx: ctx, pool: pgtest.Pool(t), schema: schema, in: in}, bp
}

// TestPgBouncerClaimConcurrentDuplicates: 200 transactions, each on its own
// client connection, claim the same message through PgBouncer (20 server
// connections) and commit. Exactly one owns it; every other one gets the
// result the owner committed.
func TestPgBouncerClaimConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	const n = 200
	b, bp := bouncerSetup(t, n)
	claimsOneWinner(t, b, bp, n)
}

// TestPgBouncerQueue: the batch forms through PgBouncer. A batch runs as
// one pipeline inside the caller's transaction, so on one server
// connection.
func TestPgBouncerQueue(t *testing.T) {
	t.Parallel()
	b, bp := bouncerSetup(t, 4)
	queueFormsWork(t, b, bp)
}
