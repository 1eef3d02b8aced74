// Package seckilltest gives the tests of a service that embeds this module
// a real PostgreSQL server and a fresh schema per test, with the chosen
// migrations applied and everything removed when the test ends.
//
// The server is the one named by the SECKILL_DATABASE_URL environment
// variable when it is set (the tests need the right to create schemas
// there); otherwise a throwaway cluster, started on first use from the
// local PostgreSQL server binaries (found on PATH, through pg_config
// --bindir or under /usr/lib/postgresql/*/bin; SECKILL_PG_BINDIR names
// the directory explicitly) in a temporary directory. As root, the
// throwaway server runs as the unprivileged "postgres" OS user, since
// initdb refuses root. With neither a URL nor binaries, the test fails
// with one sentence saying what to install or set. One server serves every
// test of a test binary.
//
// Wire it up once per package, so the throwaway server is stopped and its
// directory removed when the tests end:
//
//	func TestMain(m *testing.M) { seckilltest.Main(m) }
//
// and ask for a database in each test:
//
//	func TestCheckout(t *testing.T) {
//		t.Parallel()
//		db := seckilltest.New(t, inbox.Migrations, outbox.Migrations)
//		ib, err := inbox.New(inbox.Config{Schema: db.Schema})
//		...
//	}
//
// Example functions, which get no *testing.T, use [Example] instead.
//
// SECKILL_QUERY_EXEC_MODE selects pgx's default_query_exec_mode for the
// pools handed out (cache_statement, cache_describe, describe_exec, exec
// or simple_protocol; unset keeps the URL's), so a suite can be run the
// way it runs behind PgBouncer in transaction mode:
//
//	SECKILL_QUERY_EXEC_MODE=exec go test ./...
package seckilltest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/migrate"
)

// DB is one test's database: a fresh schema on the process's server.
type DB struct {
	// Pool is shared by every test of the process (up to 64
	// connections). Do not close it. Its search_path is the server's
	// default: name the schema in the library's Config (and qualify your
	// own tables, or use [DB.NewPool]).
	Pool *pgxpool.Pool
	// Schema is the fresh schema: created (by the migrations when any
	// were given), and dropped with everything in it when the test ends.
	Schema string
	// URL is the server's connection string, for connections of the
	// test's own.
	URL string
}

// New returns a fresh schema on the process's server, created with the
// migrations comps applied (with [migrate.Apply], in one transaction; none
// creates an empty schema), and dropped with everything in it by
// t.Cleanup. Set SECKILL_KEEP_SCHEMAS=1 to keep the schemas of failed
// tests for inspection. New fails the test (t.Fatal) when no server is
// available or a migration fails. Tests calling New may run in parallel:
// every schema has a name of its own, derived from t.Name().
func New(t testing.TB, comps ...migrate.Component) *DB {
	t.Helper()
	pool := pgtest.Pool(t)
	db := &DB{Pool: pool, Schema: pgtest.Schema(t), URL: pgtest.URL(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if len(comps) == 0 {
		if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{db.Schema}.Sanitize()); err != nil {
			t.Fatalf("seckilltest: create schema %s: %v", db.Schema, err)
		}
		return db
	}
	if _, err := migrate.Apply(ctx, pool, db.Schema, comps...); err != nil {
		t.Fatalf("seckilltest: migrate schema %s: %v", db.Schema, err)
	}
	return db
}

// NewPool returns a pool of the test's own whose connections have the
// schema as their search_path, so the test's own SQL may leave table
// names unqualified. It is closed when the test ends.
func (db *DB) NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["search_path"] = db.Schema
	})
}

// Example is [New] for Example functions, which get no *testing.T: it
// panics where New fails the test, and the schema is dropped when [Main]
// ends the test binary (it is kept when Main is not used, until the
// throwaway server goes; on a server of SECKILL_DATABASE_URL it stays).
//
//	func ExampleStore_Enqueue() {
//		db := seckilltest.Example(outbox.Migrations)
//		store, err := outbox.New(outbox.Config{Schema: db.Schema})
//		...
//		// Output: ...
//	}
func Example(comps ...migrate.Component) *DB {
	return New(pgtest.ExampleTB("example"), comps...)
}

// Main runs the package's tests (m.Run), then drops the schemas of
// [Example], closes the shared pool, stops the throwaway server and
// removes its directory, and exits. It also fails the run when goroutines
// of this module's packages are still running after the tests (a relay
// that was never stopped), waiting up to five seconds for them to end.
func Main(m *testing.M) { pgtest.Main(m) }
