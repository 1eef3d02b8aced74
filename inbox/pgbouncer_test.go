package inbox_test

// The inbox through PgBouncer in transaction pooling mode, with the pgx
// settings of the harness (default_query_exec_mode=exec): migration,
// concurrent claims and the batch forms.

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/pgtx"
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
	if err := inbox.Migrate(ctx, bp, schema); err != nil {
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
	msg := newMessage("pipe")
	res := inbox.Result{Code: "OK", Payload: []byte(`{"a":1}`)}
	run := func(fn func(*pgx.Batch)) error {
		return pgtx.RunInTx(b.ctx, bp, pgtx.Options{}, func(tx pgx.Tx) error {
			batch := &pgx.Batch{}
			fn(batch)
			return tx.SendBatch(b.ctx, batch).Close()
		})
	}
	var first, second, third inbox.Claim
	if err := run(func(batch *pgx.Batch) {
		must(t, b.in.QueueClaimMessage(batch, msg, &first))
		must(t, b.in.QueueComplete(batch, msg.Key(), res))
	}); err != nil {
		t.Fatal(err)
	}
	if !first.Fresh {
		t.Fatalf("first = %+v, want fresh", first)
	}
	if err := run(func(batch *pgx.Batch) {
		must(t, b.in.QueueClaimMessageWithResult(batch, msg, inbox.Result{Code: "IGNORED"}, &second))
	}); err != nil {
		t.Fatal(err)
	}
	if second.Fresh || second.Record.Result.Code != "OK" || string(second.Record.Result.Payload) != `{"a": 1}` ||
		string(second.Record.PayloadHash) != string(msg.PayloadHash) {
		t.Fatalf("second = %+v, want the stored result", second)
	}
	if err := run(func(batch *pgx.Batch) {
		must(t, b.in.QueueComplete(batch, msg.Key(), res))
	}); !errors.Is(err, inbox.ErrAlreadyCompleted) {
		t.Fatalf("queued second Complete = %v, want ErrAlreadyCompleted", err)
	}
	bad := msg
	bad.PayloadHash = []byte{1}
	if err := run(func(batch *pgx.Batch) {
		must(t, b.in.QueueClaimMessage(batch, bad, &third))
	}); !errors.Is(err, inbox.ErrPayloadMismatch) {
		t.Fatalf("queued mismatching claim = %v, want ErrPayloadMismatch", err)
	}
	rec, err := b.in.Lookup(b.ctx, bp, msg.Key())
	if err != nil || rec.Status != inbox.StatusProcessed || rec.Result.Code != "OK" {
		t.Fatalf("Lookup through PgBouncer = %+v, %v", rec, err)
	}
	if n := b.count(t, nil); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
}
