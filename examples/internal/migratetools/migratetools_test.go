package migratetools

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gmigrate "github.com/golang-migrate/migrate/v4"
	gmpgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/seckilltest"
)

func TestMain(m *testing.M) { seckilltest.Main(m) }

// components are the four packages' migrations, in the order a service
// would apply them.
var components = []migrate.Component{inbox.Migrations, outbox.Migrations, inventory.Migrations, order.Migrations}

// openSQL opens a database/sql handle whose connections use schema as
// their search_path: how a goose or golang-migrate user points the tools
// at the schema (search_path=<schema> in the connection URL works too).
func openSQL(t *testing.T, db *seckilltest.DB) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = db.Schema
	sqlDB := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = sqlDB.Close() })
	return sqlDB
}

// The files every package embeds run unchanged with goose v3 and with
// golang-migrate v4, one version table per component (each numbers its
// files from 001), and make exactly the schema migrate.Apply makes.
func TestGooseAndGolangMigrateMakeTheSameSchema(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ours := seckilltest.New(t, components...)

	byGoose := seckilltest.New(t)
	gdb := openSQL(t, byGoose)
	for _, c := range components {
		p, err := goose.NewProvider(goose.DialectPostgres, gdb, c.FS, goose.WithTableName("goose_"+c.Name))
		if err != nil {
			t.Fatalf("goose: %s: %v", c.Name, err)
		}
		res, err := p.Up(ctx)
		if err != nil {
			t.Fatalf("goose up: %s: %v", c.Name, err)
		}
		latest := latestVersion(t, c)
		if len(res) != latest {
			t.Fatalf("goose applied %d files of %s, want %d", len(res), c.Name, latest)
		}
	}

	byMigrate := seckilltest.New(t)
	for _, c := range components {
		src, err := iofs.New(c.FS, ".")
		if err != nil {
			t.Fatal(err)
		}
		drv, err := gmpgx.WithInstance(openSQL(t, byMigrate), &gmpgx.Config{MigrationsTable: "migrate_" + c.Name})
		if err != nil {
			t.Fatalf("golang-migrate: %s: %v", c.Name, err)
		}
		m, err := gmigrate.NewWithInstance("iofs", src, "pgx5", drv)
		if err != nil {
			t.Fatalf("golang-migrate: %s: %v", c.Name, err)
		}
		if err := m.Up(); err != nil {
			t.Fatalf("golang-migrate up: %s: %v", c.Name, err)
		}
		v, dirty, err := m.Version()
		latest := latestVersion(t, c)
		if err != nil || dirty || int(v) != latest {
			t.Fatalf("golang-migrate %s at version %d (dirty %v, %v), want %d", c.Name, v, dirty, err, latest)
		}
		if serr, derr := m.Close(); serr != nil || derr != nil {
			t.Fatal(serr, derr)
		}
	}

	want := describe(t, ctx, ours.Pool, ours.Schema)
	if len(want) < 20 {
		t.Fatalf("migrate.Apply's schema has only %d objects:\n%s", len(want), strings.Join(want, "\n"))
	}
	for tool, db := range map[string]*seckilltest.DB{"goose": byGoose, "golang-migrate": byMigrate} {
		got := describe(t, ctx, db.Pool, db.Schema)
		if !slices.Equal(got, want) {
			t.Errorf("%s made a different schema than migrate.Apply:\n%s", tool, diff(want, got))
		}
	}
}

// bookkeeping are the tools' version tables, which differ by design.
func bookkeeping(table string) bool {
	return table == "seckill_schema_migrations" || strings.HasPrefix(table, "goose_") || strings.HasPrefix(table, "migrate_")
}

// describe lists what schema holds, one line per table (with its storage
// options), column (in order, with type, nullability, default, identity),
// constraint, index, sequence and function, with the schema's name
// replaced by "S" so that two schemas compare.
func describe(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	queries := []string{
		`SELECT 'table ' || c.relname || ' ' || coalesce(array_to_string(c.reloptions, ','), ''), c.relname
		 FROM pg_class c WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p')`,
		`SELECT format('column %s.%s #%s %s notnull=%s default=%s identity=%s generated=%s',
		        c.relname, a.attname, a.attnum, format_type(a.atttypid, a.atttypmod), a.attnotnull,
		        coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity, a.attgenerated), c.relname
		 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		 LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		 WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped`,
		`SELECT format('constraint %s.%s %s', c.relname, k.conname, pg_get_constraintdef(k.oid)), c.relname
		 FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid WHERE c.relnamespace = $1::regnamespace`,
		`SELECT 'index ' || pg_get_indexdef(i.indexrelid), c.relname
		 FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE c.relnamespace = $1::regnamespace`,
		`SELECT 'sequence ' || s.relname, coalesce(t.relname, '')
		 FROM pg_class s LEFT JOIN pg_depend d ON d.objid = s.oid AND d.deptype IN ('a', 'i')
		 LEFT JOIN pg_class t ON t.oid = d.refobjid
		 WHERE s.relnamespace = $1::regnamespace AND s.relkind = 'S'`,
		`SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') ' || md5(replace(pg_get_functiondef(p.oid), $2, 'S')), ''
		 FROM pg_proc p WHERE p.pronamespace = $1::regnamespace AND $2 <> ''`,
	}
	var out []string
	for _, q := range queries {
		args := []any{pgx.Identifier{schema}.Sanitize()}
		if strings.Contains(q, "$2") {
			args = append(args, schema)
		}
		rows, err := pool.Query(ctx, q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var line, table string
		_, err = pgx.ForEachRow(rows, []any{&line, &table}, func() error {
			if !bookkeeping(table) {
				out = append(out, strings.ReplaceAll(line, schema, "S"))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(out)
	return out
}

// latestVersion returns the highest version of c's files (NNN_title.up.sql).
func latestVersion(t *testing.T, c migrate.Component) int {
	t.Helper()
	entries, err := fs.ReadDir(c.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	latest := 0
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		if v, err := strconv.Atoi(num); ok && err == nil && strings.HasSuffix(e.Name(), ".up.sql") {
			latest = max(latest, v)
		}
	}
	return latest
}

func diff(want, got []string) string {
	var b strings.Builder
	for _, w := range want {
		if !slices.Contains(got, w) {
			fmt.Fprintf(&b, "- %s\n", w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			fmt.Fprintf(&b, "+ %s\n", g)
		}
	}
	return b.String()
}
