package migrate_test

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/migrate"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var (
	good = migrate.Component{Name: "widgets", FS: os.DirFS("testdata/good")}
	v2   = migrate.Component{Name: "widgets", FS: os.DirFS("testdata/v2")}
)

func TestApplyIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)

	res, err := migrate.Apply(ctx, pool, schema, good)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Applied["widgets"]; len(got) != 1 || got[0] != 1 {
		t.Fatalf("first Apply applied %v, want [1]", got)
	}
	res, err = migrate.Apply(ctx, pool, schema, good)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 0 {
		t.Fatalf("second Apply applied %v, want nothing", res.Applied)
	}
	if err := migrate.Validate(ctx, pool, schema, good); err != nil {
		t.Fatalf("Validate after Apply: %v", err)
	}
	// The table lives in the schema, not in public.
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'widget'`, schema).Scan(&n); err != nil || n != 1 {
		t.Fatalf("widget table in %s: n=%d err=%v", schema, n, err)
	}
}

func TestApplyConcurrentlyAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)

	const workers = 8
	var wg sync.WaitGroup
	results := make([]migrate.Result, workers)
	errs := make([]error, workers)
	start := make(chan struct{})
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = migrate.Apply(ctx, pool, schema, good)
		}()
	}
	close(start)
	testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
	applied := 0
	for i := range workers {
		if errs[i] != nil {
			t.Fatalf("worker %d: %v", i, errs[i])
		}
		applied += len(results[i].Applied["widgets"])
	}
	if applied != 1 {
		t.Fatalf("migration applied %d times across %d concurrent callers, want 1", applied, workers)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.seckill_schema_migrations`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("bookkeeping rows = %d (err %v), want 1", rows, err)
	}
}

func TestValidateReportsVersions(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)

	// Nothing applied yet: pending.
	err := migrate.Validate(ctx, pool, schema, good)
	var ve *migrate.Error
	if !errors.Is(err, migrate.ErrPending) || !errors.As(err, &ve) || ve.Applied != 0 || ve.Latest != 1 {
		t.Fatalf("Validate on empty schema = %v, want ErrPending 0→1", err)
	}
	if _, err := migrate.Apply(ctx, pool, schema, good); err != nil {
		t.Fatal(err)
	}
	// The code moves on to version 2: pending until applied.
	if err := migrate.Validate(ctx, pool, schema, v2); !errors.Is(err, migrate.ErrPending) {
		t.Fatalf("Validate with newer code = %v, want ErrPending", err)
	}
	res, err := migrate.Apply(ctx, pool, schema, v2)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Applied["widgets"]; len(got) != 1 || got[0] != 2 {
		t.Fatalf("upgrade applied %v, want [2]", got)
	}
	// Old code against the upgraded schema: newer.
	if err := migrate.Validate(ctx, pool, schema, good); !errors.Is(err, migrate.ErrSchemaNewer) || errors.Is(err, migrate.ErrPending) {
		t.Fatalf("Validate with older code = %v, want ErrSchemaNewer only", err)
	}
}

func TestApplyFailureWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/001_ok.up.sql", []byte("CREATE TABLE a (id int);"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/002_broken.up.sql", []byte("CREATE TABLE b (id int REFERENCES nowhere);"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := migrate.Apply(ctx, pool, schema, migrate.Component{Name: "broken", FS: os.DirFS(dir)})
	if err == nil || !strings.Contains(err.Error(), "002_broken.up.sql") {
		t.Fatalf("Apply with a broken file = %v, want an error naming the file", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema exists after failed Apply (n=%d, err=%v): the transaction should have rolled back", n, err)
	}
}

func TestBadSchemaNamesRejected(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	for _, name := range []string{`a;drop`, `a"b`, strings.Repeat("x", 64), "1abc", "pg_temp", "séckill", "a b", "a-b", "Shop", "seckilL", "user", "order"} {
		_, err := migrate.Apply(ctx, pool, name, good)
		var se *migrate.Error
		if !errors.Is(err, migrate.ErrInvalidSchema) || !errors.As(err, &se) || se.Schema != name {
			t.Errorf("Apply(schema %q) = %v, want *migrate.Error", name, err)
		}
		if err := migrate.Validate(ctx, pool, name, good); !errors.Is(err, migrate.ErrInvalidSchema) {
			t.Errorf("Validate(schema %q) = %v, want ErrInvalidSchema", name, err)
		}
	}
	// Empty means the default; QuoteSchema is the one place that says so.
	if q, err := migrate.QuoteSchema(""); err != nil || q != `"seckill"` {
		t.Errorf(`QuoteSchema("") = %q, %v`, q, err)
	}
	if err := migrate.ValidateSchema(""); !errors.Is(err, migrate.ErrInvalidSchema) {
		t.Errorf(`ValidateSchema("") = %v, want ErrInvalidSchema`, err)
	}
	for _, ok := range []string{"seckill", "shop_2", "_x", strings.Repeat("y", 63), "orders", "int", "public"} {
		if err := migrate.ValidateSchema(ok); err != nil {
			t.Errorf("ValidateSchema(%q) = %v, want nil", ok, err)
		}
	}
	// Nothing was created for the rejected names.
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'a%' AND nspname NOT LIKE 'pg%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rejected names created %d schemas (err %v)", n, err)
	}
}

func FuzzValidateSchema(f *testing.F) {
	for _, s := range []string{"seckill", "", `a;drop`, `"x"`, "pg_x", "Ab_9", strings.Repeat("z", 64), "\x00", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		q, err := migrate.QuoteSchema(name)
		if err != nil {
			if !errors.Is(err, migrate.ErrInvalidSchema) {
				t.Fatalf("error %v is not ErrInvalidSchema", err)
			}
			return
		}
		if name == "" {
			name = migrate.DefaultSchema
		}
		if q != `"`+name+`"` || strings.ContainsAny(name, "\";\\ \x00") || len(name) > 63 {
			t.Fatalf("accepted %q as %q", name, q)
		}
	})
}

func TestEmbedded(t *testing.T) {
	t.Parallel()
	c := migrate.Embedded("widgets", os.DirFS("testdata"), "v2")
	if latest, err := c.Latest(); err != nil || latest != 2 || c.Name != "widgets" {
		t.Fatalf("Embedded component: latest %d, err %v", latest, err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Embedded with an invalid directory did not panic")
		}
	}()
	migrate.Embedded("bad", os.DirFS("testdata"), "../outside")
}
