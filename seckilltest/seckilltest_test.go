package seckilltest_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/seckilltest"
)

func TestMain(m *testing.M) { seckilltest.Main(m) }

func schemaExists(t *testing.T, db *seckilltest.DB, schema string) bool {
	t.Helper()
	var ok bool
	if err := db.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func tables(t *testing.T, db *seckilltest.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1`, db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// New creates the schema with the chosen migrations applied, each test
// gets a schema of its own, and the schema is gone when the test ends.
func TestNewAppliesMigrationsAndCleansUp(t *testing.T) {
	t.Parallel()
	var outer *seckilltest.DB
	var schemas []string
	t.Run("inner", func(t *testing.T) {
		db := seckilltest.New(t, inbox.Migrations, outbox.Migrations)
		other := seckilltest.New(t)
		outer = db
		schemas = []string{db.Schema, other.Schema}
		if db.Schema == other.Schema {
			t.Fatalf("two calls gave the same schema %s", db.Schema)
		}
		if err := migrate.Validate(context.Background(), db.Pool, db.Schema, inbox.Migrations, outbox.Migrations); err != nil {
			t.Fatalf("migrations not applied: %v", err)
		}
		got := tables(t, db)
		want := map[string]bool{"consumer_inbox": true, "event_outbox": true}
		for _, n := range got {
			delete(want, n)
		}
		if len(want) != 0 {
			t.Fatalf("tables %v lack %v", got, want)
		}
		if !schemaExists(t, other, other.Schema) || len(tables(t, other)) != 0 {
			t.Fatalf("New without migrations: schema %s should exist and be empty, has %v", other.Schema, tables(t, other))
		}
	})
	for _, s := range schemas {
		if schemaExists(t, outer, s) {
			t.Errorf("schema %s still exists after its test ended", s)
		}
	}
}

// The pool of DB.NewPool resolves unqualified names in the test's schema.
func TestNewPoolSearchPath(t *testing.T) {
	t.Parallel()
	db := seckilltest.New(t, inbox.Migrations)
	pool := db.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM consumer_inbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	var sp string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&sp); err != nil || sp != db.Schema {
		t.Fatalf("current_schema() = %q (%v), want %q", sp, err, db.Schema)
	}
}

// A migration that fails fails the test, with what failed.
func TestNewFailsOnABadMigration(t *testing.T) {
	t.Parallel()
	bad := migrate.Component{Name: "bad", FS: badFS}
	ft := &fatalTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != errFatal {
				panic(r)
			}
		}()
		seckilltest.New(ft, bad)
	}()
	if ft.msg == "" {
		t.Fatal("New did not fail the test on a broken migration")
	}
	t.Log(ft.msg)
}

// Main drops the schemas of Example when the test binary ends, also on a
// server named by SECKILL_DATABASE_URL (a throwaway server would go anyway):
// this binary runs itself with only ExampleExample, pointed at a database
// of its own on this process's server (other test binaries may be making
// example schemas on the same server), which is left without the
// example's schema.
func TestMainDropsExampleSchemas(t *testing.T) {
	t.Parallel()
	db := seckilltest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := db.Schema // fresh and valid as a database name too
	if _, err := db.Pool.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`) })
	childURL := withDatabase(t, db.URL, name)

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^ExampleExample$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "SECKILL_DATABASE_URL="+childURL)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: ExampleExample") {
		t.Fatalf("child run: %v\n%s", err, out)
	}
	conn, err := pgx.Connect(ctx, childURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var left []string
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 't\_%'`)
	if err != nil {
		t.Fatal(err)
	}
	if left, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("schemas %v left after the child run: Main did not drop Example's", left)
	}
}

// withDatabase returns the connection string u with database name instead.
func withDatabase(t *testing.T, u, name string) string {
	t.Helper()
	if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		return u + " dbname=" + name // keyword/value form: the last one wins
	}
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	parsed.Path = "/" + name
	return parsed.String()
}
