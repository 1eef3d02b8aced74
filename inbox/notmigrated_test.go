package inbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/schematest"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
)

// TestNotMigratedSchema: a Store whose schema lacks the inbox tables (here
// another schema than the one migrated) says so with a
// *migrate.NotMigratedError naming the schema and the fix, at its first
// call, direct or queued in one batch, and from Check; Check also reports
// Config.Citus on plain PostgreSQL.
func TestNotMigratedSchema(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	migrated, other := pgtest.Schema(t), pgtest.Schema(t)
	if _, err := migrate.Apply(ctx, pool, migrated, inbox.Migrations); err != nil {
		t.Fatal(err)
	}
	store, err := inbox.New(inbox.Config{Schema: other})
	if err != nil {
		t.Fatal(err)
	}
	notMigrated := func(what string, err error) {
		t.Helper()
		schematest.NotMigrated(t, what, err, other, "inbox")
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := store.ClaimMessage(ctx, tx, newMessage("g"))
		return err
	})
	notMigrated("ClaimMessage", err)
	_, err = store.Lookup(ctx, pool, newMessage("g").Key())
	notMigrated("Lookup", err)
	var b pgx.Batch
	if err := store.QueueClaimMessage(&b, withResult(newMessage("g"), inbox.Result{Code: "DONE"}), nil, pgtx.Abort); err != nil {
		t.Fatal(err)
	}
	err = pgtx.RunBatch(ctx, pool, pgtx.Options{}, &b)
	notMigrated("QueueClaimMessage(pgtx.Abort) in one batch", err)
	var se *pgtx.StatementError
	if !errors.As(err, &se) || !strings.HasPrefix(se.Call, "inbox.Store.QueueClaimMessage(") {
		t.Fatalf("one batch: %v, want the call QueueClaimMessage named", err)
	}
	notMigrated("Check", store.Check(ctx, pool))

	good, err := inbox.New(inbox.Config{Schema: migrated})
	if err != nil {
		t.Fatal(err)
	}
	if err := good.Check(ctx, pool); err != nil {
		t.Fatalf("Check of the migrated schema: %v", err)
	}
	citus, err := inbox.New(inbox.Config{Schema: migrated, Citus: true})
	if err != nil {
		t.Fatal(err)
	}
	schematest.CitusOnPlain(t, citus.Check(ctx, pool), migrated)
}
