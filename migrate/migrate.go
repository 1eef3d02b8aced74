// Package migrate applies the embedded, numbered SQL migrations that each
// package of this module ships for the tables it owns.
//
// Every package (inbox, outbox, inventory, order) exposes a [Component] named
// Migrations and a Migrate function that calls [Apply] with it. A service that
// uses several packages can migrate them together in one transaction:
//
//	err := migrate.Apply(ctx, pool, "seckill", inbox.Migrations, outbox.Migrations)
//
// # Guarantees
//
// [Apply] is idempotent and safe to run concurrently from several processes:
// it takes a transaction-scoped advisory lock keyed by the schema, creates the
// schema and the bookkeeping table seckill_schema_migrations if needed, applies
// only the versions not yet recorded for each component, records them, and
// commits once. Either every pending migration is applied or none is.
//
// # Files
//
// Migration files are named NNN_title.up.sql (for example 001_init.up.sql),
// the naming golang-migrate uses. They contain plain DDL with unqualified
// names: Apply runs them with search_path set to the target schema, and a
// user of goose or golang-migrate can run the same files after
// SET search_path TO their schema.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// Component is the set of migrations one package owns.
type Component struct {
	// Name identifies the component in the bookkeeping table, e.g. "inbox".
	Name string
	// FS holds the NNN_title.up.sql files at its root.
	FS fs.FS
}

// Embedded returns the component name whose migration files are the
// *.up.sql files in directory dir of fsys, typically an embed.FS:
//
//	//go:embed migrations/*.up.sql
//	var files embed.FS
//	var Migrations = migrate.Embedded("inbox", files, "migrations")
//
// It panics when dir is not a valid path, which for a directory embedded
// next to the call cannot happen at run time; missing or misnamed files are
// reported by [Component.Migrations] and [Apply].
func Embedded(name string, fsys fs.FS, dir string) Component {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(fmt.Sprintf("migrate: component %s: %v", name, err))
	}
	return Component{Name: name, FS: sub}
}

// Migration is one numbered SQL file of a component.
type Migration struct {
	Version int    // the NNN prefix of the file name
	Name    string // the file name
	SQL     string // the file's contents
}

// ErrPending is matched by the error [Validate] returns when a component has
// migrations that are not applied yet. The concrete type is *VersionError.
var ErrPending = errors.New("migrate: migrations pending")

// ErrSchemaNewer is matched by the error [Validate] returns when the database
// records a version newer than the code knows: the code is older than the
// schema. The concrete type is *VersionError.
var ErrSchemaNewer = errors.New("migrate: database schema is newer than this code")

// VersionError reports the versions of one component that [Validate] found.
type VersionError struct {
	Schema    string
	Component string
	Applied   int // highest version recorded in the database (0: none)
	Latest    int // highest version embedded in the code
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("migrate: schema %q component %q at version %d, code expects %d",
		e.Schema, e.Component, e.Applied, e.Latest)
}

// Is matches [ErrPending] when the database is behind and [ErrSchemaNewer]
// when it is ahead.
func (e *VersionError) Is(target error) bool {
	return target == ErrPending && e.Applied < e.Latest ||
		target == ErrSchemaNewer && e.Applied > e.Latest
}

// Migrations returns the component's migrations ordered by version. It
// fails on a file name without a numeric prefix or on two files with the
// same version.
func (c Component) Migrations() ([]Migration, error) {
	if c.Name == "" || c.FS == nil {
		return nil, errors.New("migrate: component needs a Name and an FS")
	}
	entries, err := fs.ReadDir(c.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s migrations: %w", c.Name, err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".up.sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migrate: %s: file %q does not start with a positive version number", c.Name, name)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrate: %s: files %q and %q share version %d", c.Name, prev, name, v)
		}
		seen[v] = name
		b, err := fs.ReadFile(c.FS, path.Clean(name))
		if err != nil {
			return nil, fmt.Errorf("migrate: read %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Latest returns the highest version the component embeds (0 if none).
func (c Component) Latest() (int, error) {
	ms, err := c.Migrations()
	if err != nil || len(ms) == 0 {
		return 0, err
	}
	return ms[len(ms)-1].Version, nil
}

// Result tells what [Apply] did.
type Result struct {
	// Applied lists, per component name, the versions applied by this call
	// in the order they ran. Empty when everything was already applied.
	Applied map[string][]int
}

// Apply applies every pending migration of comps to schema ("" means
// [DefaultSchema]) in one transaction begun on db. It is idempotent and
// concurrency-safe (see the package documentation). An invalid schema name
// returns a *SchemaError before anything is sent to the server.
func Apply(ctx context.Context, db pgtx.TxBeginner, schema string, comps ...Component) (Result, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	quoted, err := QuoteSchema(schema)
	if err != nil {
		return Result{}, err
	}
	plans := make([][]Migration, len(comps))
	for i, c := range comps {
		if plans[i], err = c.Migrations(); err != nil {
			return Result{}, err
		}
	}
	res := Result{Applied: map[string][]int{}}
	err = pgx.BeginTxFunc(ctx, db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		// The lock serialises concurrent migrators of the same schema;
		// it is released at COMMIT or ROLLBACK.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('seckill.migrate:' || $1, 0))`, schema); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+quoted+`;
CREATE TABLE IF NOT EXISTS `+quoted+`.seckill_schema_migrations (
	component  text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT statement_timestamp(),
	PRIMARY KEY (component, version)
);
SET LOCAL search_path TO `+quoted); err != nil {
			return fmt.Errorf("migrate: prepare schema %s: %w", quoted, err)
		}
		for i, c := range comps {
			applied, err := appliedVersions(ctx, tx, quoted, c.Name)
			if err != nil {
				return err
			}
			for _, m := range plans[i] {
				if applied[m.Version] {
					continue
				}
				if _, err := tx.Exec(ctx, m.SQL); err != nil {
					return fmt.Errorf("migrate: %s %s: %w", c.Name, m.Name, err)
				}
				if _, err := tx.Exec(ctx, `INSERT INTO `+quoted+`.seckill_schema_migrations (component, version, name) VALUES ($1, $2, $3)`,
					c.Name, m.Version, m.Name); err != nil {
					return fmt.Errorf("migrate: record %s %s: %w", c.Name, m.Name, err)
				}
				res.Applied[c.Name] = append(res.Applied[c.Name], m.Version)
			}
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

func appliedVersions(ctx context.Context, q pgtx.Querier, quoted, component string) (map[int]bool, error) {
	rows, err := q.Query(ctx, `SELECT version FROM `+quoted+`.seckill_schema_migrations WHERE component = $1`, component)
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	out := make(map[int]bool, len(vs))
	for _, v := range vs {
		out[int(v)] = true
	}
	return out, nil
}

// Validate checks that schema has exactly the migrations of comps applied.
// It returns nil when it does, a *VersionError matching [ErrPending] or
// [ErrSchemaNewer] when versions differ (for the first component that
// differs), or the query error. It writes nothing.
func Validate(ctx context.Context, db pgtx.Querier, schema string, comps ...Component) error {
	if schema == "" {
		schema = DefaultSchema
	}
	quoted, err := QuoteSchema(schema)
	if err != nil {
		return err
	}
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, quoted+".seckill_schema_migrations").Scan(&exists); err != nil {
		return fmt.Errorf("migrate: validate: %w", err)
	}
	for _, c := range comps {
		latest, err := c.Latest()
		if err != nil {
			return err
		}
		applied := 0
		if exists {
			if err := db.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+quoted+`.seckill_schema_migrations WHERE component = $1`,
				c.Name).Scan(&applied); err != nil {
				return fmt.Errorf("migrate: validate: %w", err)
			}
		}
		if applied != latest {
			return &VersionError{Schema: schema, Component: c.Name, Applied: applied, Latest: latest}
		}
	}
	return nil
}
