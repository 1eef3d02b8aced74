package outbox_test

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/outbox"
)

// An outbox created by migration 001 and holding pending events is
// upgraded by Migrate: the ready index loses its INCLUDE columns, keeps its
// name, key and predicate, and the events are claimed through it as before.
func TestMigrationUpgradeKeepsPendingEvents(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	first, err := fs.ReadFile(outbox.MigrationFiles, "migrations/001_init.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	v1 := migrate.Embedded("outbox", fstest.MapFS{"m/001_init.up.sql": {Data: first}}, "m")
	if _, err := migrate.Apply(ctx, pool, schema, v1); err != nil {
		t.Fatal(err)
	}
	indexdef := func() string {
		var def string
		if err := pool.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'idx_outbox_ready'`,
			schema).Scan(&def); err != nil {
			t.Fatal(err)
		}
		return def
	}
	if def := indexdef(); !strings.Contains(def, "INCLUDE") {
		t.Fatalf("version 1 index: %s", def)
	}
	store, err := outbox.New(outbox.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{ctx: ctx, pool: pool, schema: schema, store: store}
	b.enqueue(t, event(1), event(2), event(3))

	if err := migrateOutbox(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Validate(ctx, pool, schema, outbox.Migrations); err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}
	def := indexdef()
	if strings.Contains(def, "INCLUDE") || !strings.Contains(def, "(available_at, created_at, event_id)") ||
		!strings.Contains(def, "WHERE (status = ANY (ARRAY[0, 30]))") {
		t.Fatalf("version 2 index: %s", def)
	}
	if c := b.claim(t, "relay", 10); len(c.Messages) != 3 {
		t.Fatalf("claimed %d events after the upgrade, want 3", len(c.Messages))
	}
}
