package migrate_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"
	"testing/fstest"
	"time"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/migrate"
)

// TestEveryEntryPointRejectsInvalidInput covers what TestBadSchemaNamesRejected
// and the fuzz targets do not: invalid components (no name, no FS, a file
// without a positive version, two files with one version, a file that
// cannot be split into statements) are rejected with an *Error by
// Apply, ApplyTx, Component.Migrations and Component.Latest before the
// database is used — Apply and ApplyTx get nil handles here, which would
// panic if they were touched — and by Validate, which only reads.
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
		"NUL in name":    {Name: "x\x00", FS: fstest.MapFS{"001_a.up.sql": sql}},
		"open string":    {Name: "x", FS: fstest.MapFS{"001_a.up.sql": {Data: []byte("INSERT INTO t VALUES ('a);")}}},
		"open comment":   {Name: "x", FS: fstest.MapFS{"001_a.up.sql": {Data: []byte("CREATE TABLE t (id int); /* ")}}},
		"goose Down":     {Name: "x", FS: fstest.MapFS{"001_a.up.sql": {Data: []byte("-- +goose Up\nCREATE TABLE t (id int);\n-- +goose Down\nDROP TABLE t;")}}},
		"no statement":   {Name: "x", FS: fstest.MapFS{"001_a.up.sql": {Data: []byte("-- +goose Up\n-- nothing yet\n")}}},
	} {
		check := func(what string, err error) {
			var ce *migrate.Error
			if !errors.Is(err, migrate.ErrInvalidComponent) || !errors.As(err, &ce) || ce.Reason == "" || ce.Component != c.Name {
				t.Errorf("%s: %s = %v, want a *migrate.Error", name, what, err)
			}
		}
		_, err := c.Migrations()
		check("Migrations", err)
		_, err = c.Latest()
		check("Latest", err)
		_, err = migrate.Apply(ctx, nil, "ok_schema", c)
		check("Apply", err)
		_, err = migrate.ApplyTx(ctx, nil, "ok_schema", c)
		check("ApplyTx", err)
		check("Validate", migrate.Validate(ctx, pool, "ok_schema", c))
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

// A component whose FS cannot be read is an *Error that wraps the
// fs error.
func TestUnreadableComponent(t *testing.T) {
	t.Parallel()
	c := migrate.Component{Name: "x", FS: os.DirFS(t.TempDir() + "/missing")}
	_, err := c.Migrations()
	if !errors.Is(err, migrate.ErrInvalidComponent) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Migrations of a missing directory = %v, want ErrInvalidComponent wrapping fs.ErrNotExist", err)
	}
}
