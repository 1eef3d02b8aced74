package seckilltest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

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
// this binary runs itself with only ExampleExample, pointed at this
// process's server, which is left without the example's schema.
func TestMainDropsExampleSchemas(t *testing.T) {
	t.Parallel()
	db := seckilltest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	count := func() int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 't\_example\_%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^ExampleExample$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "SECKILL_DATABASE_URL="+db.URL)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: ExampleExample") {
		t.Fatalf("child run: %v\n%s", err, out)
	}
	if after := count(); after != before {
		t.Fatalf("%d example schemas before the child run, %d after: Main did not drop the child's", before, after)
	}
}
