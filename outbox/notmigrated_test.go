package outbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// TestNotMigratedSchema: a Store whose schema lacks the outbox tables (here
// another schema than the one migrated) says so with a
// *migrate.NotMigratedError naming the schema and the fix, at its first
// call, direct or queued in one batch, and from Check; Check also reports
// Config.Citus on plain PostgreSQL.
func TestNotMigratedSchema(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	migrated, other := pgtest.Schema(t), pgtest.Schema(t)
	if _, err := migrate.Apply(ctx, pool, migrated, outbox.Migrations); err != nil {
		t.Fatal(err)
	}
	store, err := outbox.New(outbox.Config{Schema: other})
	if err != nil {
		t.Fatal(err)
	}
	notMigrated := func(what string, err error) {
		t.Helper()
		var nm *migrate.NotMigratedError
		if !errors.Is(err, migrate.ErrNotMigrated) || !errors.As(err, &nm) || nm.Schema != other || nm.Component != "outbox" ||
			!strings.Contains(err.Error(), `migrate.Apply(ctx, db, "`+other+`", outbox.Migrations)`) {
			t.Fatalf("%s: %v, want a *migrate.NotMigratedError naming schema %s and migrate.Apply", what, err, other)
		}
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := store.Enqueue(ctx, tx, event(1))
		return err
	})
	notMigrated("Enqueue", err)
	_, err = store.ClaimOutboxBatch(ctx, pool, "relay", 10)
	notMigrated("ClaimOutboxBatch", err)
	var b pgx.Batch
	if err := store.QueueEnqueueOrAbort(&b, event(2), &outbox.Enqueued{}); err != nil {
		t.Fatal(err)
	}
	err = pgtx.RunBatch(ctx, pool, pgtx.Options{}, &b)
	notMigrated("QueueEnqueueOrAbort in one batch", err)
	var se *pgtx.StatementError
	if !errors.As(err, &se) || !strings.HasPrefix(se.Call, "outbox.Store.QueueEnqueueOrAbort(") {
		t.Fatalf("one batch: %v, want the call QueueEnqueueOrAbort named", err)
	}
	notMigrated("Check", store.Check(ctx, pool))

	good, err := outbox.New(outbox.Config{Schema: migrated})
	if err != nil {
		t.Fatal(err)
	}
	if err := good.Check(ctx, pool); err != nil {
		t.Fatalf("Check of the migrated schema: %v", err)
	}
	citus, err := outbox.New(outbox.Config{Schema: migrated, Citus: true})
	if err != nil {
		t.Fatal(err)
	}
	var cm *migrate.CitusMismatchError
	if err := citus.Check(ctx, pool); !errors.Is(err, migrate.ErrCitusMismatch) || !errors.As(err, &cm) || !cm.Option || cm.Citus ||
		cm.Distributed || cm.Schema != migrated || !strings.Contains(err.Error(), "no Citus extension: unset it") {
		t.Fatalf("Check of Config.Citus on plain PostgreSQL: %v, want a *migrate.CitusMismatchError", err)
	}
}
