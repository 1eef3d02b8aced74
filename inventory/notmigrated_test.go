package inventory_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/schematest"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
)

// TestNotMigratedSchema: a Store whose schema lacks the inventory tables (here
// another schema than the one migrated) says so with a
// *migrate.NotMigratedError naming the schema and the fix, at its first
// call, direct or queued in one batch, and from Check; Check also reports
// Config.Citus on plain PostgreSQL.
func TestNotMigratedSchema(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	migrated, other := pgtest.Schema(t), pgtest.Schema(t)
	if _, err := migrate.Apply(ctx, pool, migrated, inventory.Migrations); err != nil {
		t.Fatal(err)
	}
	store, err := inventory.New(inventory.Config{Schema: other})
	if err != nil {
		t.Fatal(err)
	}
	notMigrated := func(what string, err error) {
		t.Helper()
		schematest.NotMigrated(t, what, err, other, "inventory")
	}
	tb := testBundle{} // for newReservation's ids
	tb.ids = new(atomic.Int64)
	r := tb.newReservation(1, 10, 0)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := store.AcquireReservation(ctx, tx, r)
		return err
	})
	notMigrated("AcquireReservation", err)
	_, err = store.GetBucket(ctx, pool, 1, 10, 0)
	notMigrated("GetBucket", err)
	var b pgx.Batch
	if err := store.QueueAcquireReservation(&b, r, nil, pgtx.Abort); err != nil {
		t.Fatal(err)
	}
	if err := store.QueueAllocateBucket(&b, allocationOf(r, 0), nil, pgtx.Abort); err != nil {
		t.Fatal(err)
	}
	err = pgtx.RunBatch(ctx, pool, pgtx.Options{}, &b)
	notMigrated("QueueInsertReservationOrAbort in one batch", err)
	var se *pgtx.StatementError
	if !errors.As(err, &se) || !strings.HasPrefix(se.Call, "inventory.Store.QueueAcquireReservation(") {
		t.Fatalf("one batch: %v, want the call QueueInsertReservationOrAbort named", err)
	}
	notMigrated("Check", store.Check(ctx, pool))

	good, err := inventory.New(inventory.Config{Schema: migrated})
	if err != nil {
		t.Fatal(err)
	}
	if err := good.Check(ctx, pool); err != nil {
		t.Fatalf("Check of the migrated schema: %v", err)
	}
	citus, err := inventory.New(inventory.Config{Schema: migrated, Citus: true})
	if err != nil {
		t.Fatal(err)
	}
	schematest.CitusOnPlain(t, citus.Check(ctx, pool), migrated)
}

// TestNotMigratedFunction: a schema migrated before the refusal function
// existed (here: dropped) fails the one-batch allocation with a
// *migrate.NotMigratedError, not with an unknown function.
func TestNotMigratedFunction(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 1, 10, 2, 1)
		if _, err := tb.pool.Exec(tb.ctx, `DROP FUNCTION `+pgx.Identifier{inventory.SchemaOf(tb.store), "inventory_refuse"}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		r := tb.newReservation(1, 10, 0)
		err := tb.buyOrAbort(t, r, 1, allocationOf(r, 1), nil)
		var nm *migrate.NotMigratedError
		if !errors.Is(err, migrate.ErrNotMigrated) || !errors.As(err, &nm) || nm.Schema != inventory.SchemaOf(tb.store) || nm.Component != "inventory" {
			t.Fatalf("allocation without inventory_refuse: %v, want a *migrate.NotMigratedError", err)
		}
		if _, err := tb.store.GetReservation(tb.ctx, tb.pool, r.ReservationID); !errors.Is(err, inventory.ErrReservationNotFound) {
			t.Fatalf("the failed batch wrote the reservation: %v", err)
		}
	})
}

// TestCheckNeedsTheNewestMigration: a schema migrated by an older release
// (here: without migration 010's inventory_token, dropped) fails Check
// with a *migrate.NotMigratedError naming the schema, not at the first
// Provision with an unknown column.
func TestCheckNeedsTheNewestMigration(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	if err := tb.store.Check(tb.ctx, tb.pool); err != nil {
		t.Fatalf("Check of the migrated schema: %v", err)
	}
	if _, err := tb.pool.Exec(tb.ctx, `DROP TABLE `+pgx.Identifier{inventory.SchemaOf(tb.store), "inventory_token"}.Sanitize()+` CASCADE`); err != nil {
		t.Fatal(err)
	}
	schematest.NotMigrated(t, "Check without inventory_token", tb.store.Check(tb.ctx, tb.pool), inventory.SchemaOf(tb.store), "inventory")
}
