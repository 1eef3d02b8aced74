package migrate_test

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
)

func files(kv ...string) fs.FS {
	m := fstest.MapFS{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = &fstest.MapFile{Data: []byte(kv[i+1])}
	}
	return m
}

func tableExists(t *testing.T, ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema, table string) bool {
	t.Helper()
	var ok bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{schema, table}.Sanitize()).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// ApplyTx runs in the caller's transaction: the migrations and the
// caller's own writes commit or roll back together, and the caller's
// search_path is what it was.
func TestApplyTxInCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	own := pgtest.Schema(t)
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+own+`; CREATE TABLE `+own+`.mine (id int)`); err != nil {
		t.Fatal(err)
	}
	run := func(commit bool) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+own+`, public`); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO mine VALUES (1)`); err != nil {
			t.Fatal(err)
		}
		res, err := migrate.ApplyTx(ctx, tx, schema, good)
		if err != nil || len(res.Applied["widgets"]) != 1 {
			t.Fatalf("ApplyTx = %v, %v", res, err)
		}
		var sp string
		if err := tx.QueryRow(ctx, `SHOW search_path`).Scan(&sp); err != nil || sp != own+", public" {
			t.Fatalf("search_path after ApplyTx = %q (%v), want the caller's %q", sp, err, own+", public")
		}
		// Unqualified names are the caller's again.
		if _, err := tx.Exec(ctx, `INSERT INTO mine VALUES (2)`); err != nil {
			t.Fatal(err)
		}
		if !tableExists(t, ctx, tx, schema, "widget") {
			t.Fatal("the migration is not visible inside the caller's transaction")
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(false)
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+own+`.mine`).Scan(&n); err != nil || n != 0 || tableExists(t, ctx, pool, schema, "widget") {
		t.Fatalf("after rollback: %d rows of mine (%v), widget exists %v; want nothing", n, err, tableExists(t, ctx, pool, schema, "widget"))
	}
	run(true)
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+own+`.mine`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("after commit: %d rows of mine (%v), want 2", n, err)
	}
	if err := migrate.Validate(ctx, pool, schema, good); err != nil {
		t.Fatalf("Validate after the caller's commit: %v", err)
	}
}

// A migration edited after it was applied is refused by Apply (nothing
// more is applied) and reported by Validate; an edit of its comments or
// layout (adding goose annotations, say) is not an edit.
func TestEditedMigrationDetected(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	v1 := migrate.Component{Name: "widgets", FS: files("001_init.up.sql", "CREATE TABLE widget (id bigint PRIMARY KEY, name text NOT NULL);")}
	if _, err := migrate.Apply(ctx, pool, schema, v1); err != nil {
		t.Fatal(err)
	}
	reformatted := migrate.Component{Name: "widgets", FS: files(
		"001_init.up.sql", "-- +goose Up\n-- the widgets\nCREATE TABLE widget (\n    id   bigint PRIMARY KEY,\n    name text   NOT NULL -- shown to users\n);\n")}
	if res, err := migrate.Apply(ctx, pool, schema, reformatted); err != nil || len(res.Applied) != 0 {
		t.Fatalf("Apply after a comment and layout edit = %v, %v; want nothing applied, no error", res, err)
	}
	if err := migrate.Validate(ctx, pool, schema, reformatted); err != nil {
		t.Fatalf("Validate after a comment and layout edit: %v", err)
	}
	edited := migrate.Component{Name: "widgets", FS: files(
		"001_init.up.sql", "CREATE TABLE widget (id bigint PRIMARY KEY, name text NOT NULL, color text);",
		"002_more.up.sql", "CREATE TABLE gadget (id int);")}
	want, _ := edited.Migrations()
	_, err := migrate.Apply(ctx, pool, schema, edited)
	var ce *migrate.Error
	if !errors.Is(err, migrate.ErrChecksumMismatch) || !errors.As(err, &ce) ||
		ce.Version != 1 || ce.File != "001_init.up.sql" || ce.Component != "widgets" || ce.Schema != schema ||
		ce.Current != want[0].Checksum || ce.Recorded == ce.Current {
		t.Fatalf("Apply of an edited migration = %v, want a *migrate.Error for version 1", err)
	}
	if tableExists(t, ctx, pool, schema, "gadget") {
		t.Fatal("Apply applied version 2 after finding version 1 edited")
	}
	if err := migrate.Validate(ctx, pool, schema, edited); !errors.Is(err, migrate.ErrChecksumMismatch) {
		t.Fatalf("Validate of an edited migration = %v, want ErrChecksumMismatch", err)
	}
}

// A database migrated by a version of this package that recorded no
// checksums is not an error: Apply adds the column and records the code's
// checksums; Validate accepts it before and after.
func TestLegacyBookkeepingGetsChecksums(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	q := legacyBookkeeping(t, ctx, pool, schema, `CREATE TABLE {q}.widget (id bigint PRIMARY KEY, name text NOT NULL);
INSERT INTO {q}.seckill_schema_migrations (component, version, name) VALUES ('widgets', 1, '001_init.up.sql'),
	('gadgets', 1, '001_init.up.sql'), ('gadgets', 2, '002_more.up.sql')`)
	// Another component's bookkeeping in the same table: its versions
	// are not widgets', and its rows stay as they were.
	if err := migrate.Validate(ctx, pool, schema, good); err != nil {
		t.Fatalf("Validate of a database without checksums: %v", err)
	}
	res, err := migrate.Apply(ctx, pool, schema, v2)
	if err != nil || !slices.Equal(res.Applied["widgets"], []int{2}) {
		t.Fatalf("Apply on a database without checksums = %v, %v; want version 2 applied", res, err)
	}
	ms, _ := v2.Migrations()
	var others int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+q+`.seckill_schema_migrations
		WHERE component = 'gadgets' AND checksum IS NULL`).Scan(&others); err != nil || others != 2 {
		t.Fatalf("gadgets rows without checksum: %d, %v; want 2, untouched", others, err)
	}
	rows, err := pool.Query(ctx, `SELECT version, checksum FROM `+q+`.seckill_schema_migrations WHERE component = 'widgets' ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Version  int32
		Checksum *string
	}])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("bookkeeping rows %v", got)
	}
	for i, r := range got {
		if r.Checksum == nil || *r.Checksum != ms[i].Checksum {
			t.Fatalf("version %d: checksum %v, want the code's %s", r.Version, r.Checksum, ms[i].Checksum)
		}
	}
	if err := migrate.Validate(ctx, pool, schema, v2); err != nil {
		t.Fatalf("Validate after Apply: %v", err)
	}
}

// TestLegacyBookkeepingOfEveryVersion: on a bookkeeping table without
// checksums where both versions are recorded, Apply applies nothing and
// gives each version its own checksum.
func TestLegacyBookkeepingOfEveryVersion(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	q := legacyBookkeeping(t, ctx, pool, schema, `INSERT INTO {q}.seckill_schema_migrations (component, version, name)
	VALUES ('widgets', 1, '001_init.up.sql'), ('widgets', 2, '002_color.up.sql')`)
	res, err := migrate.Apply(ctx, pool, schema, v2)
	if err != nil || len(res.Applied["widgets"]) != 0 {
		t.Fatalf("Apply = %v, %v; want nothing applied", res, err)
	}
	ms, _ := v2.Migrations()
	for _, m := range ms {
		var sum *string
		if err := pool.QueryRow(ctx, `SELECT checksum FROM `+q+`.seckill_schema_migrations
			WHERE component = 'widgets' AND version = $1`, m.Version).Scan(&sum); err != nil {
			t.Fatal(err)
		}
		if sum == nil || *sum != m.Checksum {
			t.Fatalf("version %d: checksum %v, want its own %s", m.Version, sum, m.Checksum)
		}
	}
}

// sqlLog records every query pgx sends.
type sqlLog struct {
	mu  sync.Mutex
	sql []string
}

func (l *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sql = append(l.sql, d.SQL)
	return ctx
}

func (l *sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Apply sends each statement of a file on its own (Citus runs DDL only one
// statement per query), splitting where a semicolon ends a statement and
// nowhere else.
func TestEachStatementSentAlone(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	log := &sqlLog{}
	pool := pgtest.NewPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = log })
	schema := pgtest.Schema(t)
	src := `-- +goose Up
-- a comment; with a semicolon
CREATE TABLE note (id int PRIMARY KEY, body text NOT NULL DEFAULT 'a;b', "odd;name" int);
/* a block comment; */
INSERT INTO note (id, body) VALUES (1, E'it\'s; here'), (2, $$dollar; quoted$$);
-- +goose StatementBegin
CREATE FUNCTION note_count() RETURNS bigint LANGUAGE sql
BEGIN ATOMIC
    SELECT count(*) FROM note;
END;
-- +goose StatementEnd
DO $body$ BEGIN PERFORM 1; PERFORM 2; END $body$;
`
	c := migrate.Component{Name: "notes", FS: files("001_init.up.sql", src)}
	ms, err := c.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	stmts := ms[0].Statements()
	if len(stmts) != 4 || !strings.HasPrefix(stmts[2], "CREATE FUNCTION") || !strings.HasSuffix(stmts[2], "END") {
		t.Fatalf("statements %q", stmts)
	}
	if _, err := migrate.Apply(ctx, pool, schema, c); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	sent := slices.Clone(log.sql)
	log.mu.Unlock()
	for _, st := range stmts {
		if !slices.Contains(sent, st) {
			t.Errorf("statement %q was not sent as a query of its own; sent:\n%s", st, strings.Join(sent, "\n---\n"))
		}
	}
	var body string
	var n int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT body FROM `+schema+`.note WHERE id = 1), `+schema+`.note_count()`).Scan(&body, &n); err != nil || body != "it's; here" || n != 2 {
		t.Fatalf("body %q, count %d, %v", body, n, err)
	}
}

// ValidateSchema rejects exactly the key words that cannot name a schema
// unquoted on the running server, and accepts the others.
func TestReservedWordsMatchServer(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 2*time.Minute)
	pool := pgtest.Pool(t)
	rows, err := pool.Query(ctx, `SELECT word FROM pg_get_keywords() ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	words, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, w := range words {
		_, err := tx.Exec(ctx, `SAVEPOINT kw; CREATE SCHEMA `+w+`; ROLLBACK TO SAVEPOINT kw`)
		var pgErr *pgconn.PgError
		syntax := errors.As(err, &pgErr) && pgErr.Code == "42601"
		if err != nil && !syntax {
			if strings.HasPrefix(w, "pg_") || errors.As(err, &pgErr) && pgErr.Code == "42P06" {
				_, _ = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT kw`)
				continue
			}
			t.Fatalf("CREATE SCHEMA %s: %v", w, err)
		}
		if syntax {
			if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT kw`); err != nil {
				t.Fatal(err)
			}
		}
		rejected := errors.Is(migrate.ValidateSchema(w), migrate.ErrInvalidSchema)
		if rejected != syntax {
			t.Errorf("key word %q: unquoted CREATE SCHEMA is a syntax error: %v; ValidateSchema rejects it: %v", w, syntax, rejected)
		}
	}
}

// Every migration file this module embeds starts with goose's annotation
// and wraps any statement holding a semicolon in StatementBegin/End, so
// goose (which splits at a semicolon ending a line) runs it as written;
// see examples/internal/migratetools for the run with the real tools.
func TestModuleMigrationsAreGooseFiles(t *testing.T) {
	t.Parallel()
	for _, c := range []migrate.Component{inbox.Migrations, outbox.Migrations, inventory.Migrations, order.Migrations} {
		ms, err := c.Migrations()
		if err != nil || len(ms) == 0 {
			t.Fatalf("%s: %d migrations, %v", c.Name, len(ms), err)
		}
		for i, m := range ms {
			if m.Version != i+1 {
				t.Errorf("%s %s: version %d, want %d (the module's files are numbered 1, 2, 3, … without gaps)", c.Name, m.Name, m.Version, i+1)
			}
			first, _, _ := strings.Cut(m.SQL, "\n")
			if strings.TrimSpace(first) != "-- +goose Up" {
				t.Errorf("%s %s: first line %q, want \"-- +goose Up\"", c.Name, m.Name, first)
			}
			for _, st := range m.Statements() {
				if !strings.Contains(st, ";") {
					continue
				}
				at := strings.Index(m.SQL, st)
				before := strings.Split(strings.TrimRight(m.SQL[:at], " \t\n"), "\n")
				if prev := strings.TrimSpace(before[len(before)-1]); !strings.EqualFold(prev, "-- +goose StatementBegin") {
					t.Errorf("%s %s: statement at line %d holds a semicolon but is not between -- +goose StatementBegin and StatementEnd",
						c.Name, m.Name, len(before)+1)
				}
			}
		}
	}
}

// legacyBookkeeping creates schema with the bookkeeping table of a release
// that recorded no checksums, runs then (where {q} is the quoted schema),
// and returns the quoted schema.
func legacyBookkeeping(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema, then string) string {
	t.Helper()
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+q+`;
CREATE TABLE `+q+`.seckill_schema_migrations (
	component  text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT statement_timestamp(),
	PRIMARY KEY (component, version)
);
`+strings.ReplaceAll(then, "{q}", q)); err != nil {
		t.Fatal(err)
	}
	return q
}
