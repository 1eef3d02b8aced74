package migrate_test

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"
	"time"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/migrate"
)

// TestEveryEntryPointRejectsInvalidInput covers what TestBadSchemaNamesRejected
// and the fuzz targets do not: invalid components (no name, no FS, a file
// without a positive version, two files with one version) are rejected by
// Apply, Component.Migrations and Component.Latest before the database is
// used — Apply gets a nil pool here, which would panic if it were touched —
// and by Validate, which only reads. The migrate package documents no sentinel for a bad
// component (only ErrInvalidSchema for names): these are plain errors.
func TestEveryEntryPointRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	sql := &fstest.MapFile{Data: []byte("CREATE TABLE t (id int);")}
	for name, c := range map[string]migrate.Component{
		"no name":        {FS: fstest.MapFS{"001_a.up.sql": sql}},
		"no FS":          {Name: "x"},
		"no version":     {Name: "x", FS: fstest.MapFS{"abc.up.sql": sql}},
		"zero version":   {Name: "x", FS: fstest.MapFS{"000_a.up.sql": sql}},
		"negative":       {Name: "x", FS: fstest.MapFS{"-1_a.up.sql": sql}},
		"shared version": {Name: "x", FS: fstest.MapFS{"001_a.up.sql": sql, "1_b.up.sql": sql}},
	} {
		if _, err := c.Migrations(); err == nil {
			t.Errorf("%s: Migrations accepted it", name)
		}
		if _, err := c.Latest(); err == nil {
			t.Errorf("%s: Latest accepted it", name)
		}
		if _, err := migrate.Apply(ctx, nil, "ok_schema", c); err == nil {
			t.Errorf("%s: Apply accepted it", name)
		}
		if err := migrate.Validate(ctx, pool, "ok_schema", c); err == nil { // (reads, then rejects)
			t.Errorf("%s: Validate accepted it", name)
		}
	}
	for _, bad := range []string{`x"; DROP SCHEMA public CASCADE; --`, "pg_catalog", "a\x00"} {
		if _, err := migrate.QuoteSchema(bad); !errors.Is(err, migrate.ErrInvalidSchema) {
			t.Errorf("QuoteSchema(%q) = %v", bad, err)
		}
	}
}

// TestNoSQLInjection: the one caller string migrate puts in SQL text, the
// schema name, is validated and quoted (hostile names are rejected: see
// TestBadSchemaNamesRejected and FuzzSchemaNameRule); the component name is
// a bind parameter, stored verbatim in the bookkeeping table, and Validate
// finds it again.
func TestNoSQLInjection(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	names := []string{`'; DROP TABLE seckill_schema_migrations; --`, `"quoted"`, `$1`, `' OR '1'='1`, "é主🚀", `\`}
	var comps []migrate.Component
	for i, n := range names {
		comps = append(comps, migrate.Component{Name: n, FS: fstest.MapFS{"001_init.up.sql": &fstest.MapFile{
			Data: []byte("CREATE TABLE t" + string(rune('a'+i)) + " (id int);")}}})
	}
	if _, err := migrate.Apply(ctx, pool, schema, comps...); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Validate(ctx, pool, schema, comps...); err != nil {
		t.Fatalf("Validate after Apply: %v", err)
	}
	q, _ := migrate.QuoteSchema(schema)
	for _, n := range names {
		var v int
		if err := pool.QueryRow(ctx, `SELECT version FROM `+q+`.seckill_schema_migrations WHERE component = $1`, n).Scan(&v); err != nil || v != 1 {
			t.Errorf("component %q: version %d, %v", n, v, err)
		}
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&tables); err != nil || tables != len(names)+1 {
		t.Errorf("%d tables (%v), want %d", tables, err, len(names)+1)
	}
}
