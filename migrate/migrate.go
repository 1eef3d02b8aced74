// Package migrate applies the embedded, numbered SQL migrations that each
// package of this module ships for the tables it owns.
//
// Every package (inbox, outbox, inventory, order) exposes a [Component] named
// Migrations and a Migrate function that calls [Apply] with it. A service that
// uses several packages can migrate them together in one transaction:
//
//	_, err := migrate.Apply(ctx, pool, "seckill", inbox.Migrations, outbox.Migrations)
//
// # Guarantees
//
// [Apply] is idempotent and safe to run concurrently from several processes:
// it takes a transaction-scoped advisory lock keyed by the schema, creates the
// schema and the bookkeeping table seckill_schema_migrations if needed, applies
// only the versions not yet recorded for each component, records them, and
// commits once. Either every pending migration is applied or none is.
// [ApplyTx] does the same inside the caller's transaction, so a service can
// migrate these tables together with its own.
//
// Each applied file is recorded with a checksum of its statements
// ([Migration.Checksum]): a file edited after it was applied is refused by
// Apply and reported by [Validate] with a *[ChecksumError], instead of
// being silently skipped. Comments, goose annotations and layout do not
// count as edits.
//
// Each statement of a file is sent as a query of its own (Citus runs DDL
// only one statement per query): the files are split at the semicolons
// that end statements, not at those inside strings, quoted identifiers,
// dollar quotes or comments, and a statement between -- +goose
// StatementBegin and -- +goose StatementEnd is kept whole.
//
// Invalid input is rejected before the database is used: a schema name
// with a *[SchemaError] (the rule in [ValidateSchema] makes a name mean the
// same schema whether or not a tool quotes it), a component or file that
// cannot be read or split with a *[ComponentError].
//
// # Files
//
// Migration files are named NNN_title.up.sql (for example 001_init.up.sql),
// the naming golang-migrate uses. They contain plain DDL with unqualified
// names: Apply runs them with search_path set to the target schema. Each
// file of this module starts with the annotation -- +goose Up, and a
// statement holding a semicolon sits between -- +goose StatementBegin and
// -- +goose StatementEnd, so the same files run unchanged with goose (v3)
// and with golang-migrate (v4), which reads the annotations as comments;
// connect those tools with search_path set to the schema (for example
// search_path=seckill in the connection URL) and keep one version table
// per component, since every component numbers its files from 001.
// docs/migrating.md in the repository shows the steps for both tools.
package migrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

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
	// Checksum identifies the file's statements (SHA-256, hex): comments,
	// goose annotations and the amount of whitespace between tokens do
	// not count; any other edit changes it. [Apply] records it with the
	// version and refuses a file whose checksum no longer matches.
	Checksum string

	stmts []statement
}

// Statements returns the statements of a file read by
// [Component.Migrations] in order, each without its terminating
// semicolon: what [Apply] sends, one statement per query (Citus, for one,
// runs DDL only one statement at a time). Comments
// between statements are dropped; a statement written between the goose
// annotations -- +goose StatementBegin and -- +goose StatementEnd is one
// statement whatever it contains.
func (m Migration) Statements() []string {
	out := make([]string, len(m.stmts))
	for i, st := range m.stmts {
		out[i] = st.sql
	}
	return out
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
	Schema    string // the schema checked ([DefaultSchema] when "" was passed)
	Component string // the Name of the first of comps whose versions differ
	Applied   int    // highest version recorded in the database (0: none)
	Latest    int    // highest version embedded in the code
}

// Error names the schema and the component and gives the applied and the
// expected version.
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

// ErrInvalidComponent is matched (with errors.Is) by every error that
// rejects a [Component] or one of its files before the database is used.
// The concrete type is *ComponentError.
var ErrInvalidComponent = errors.New("migrate: invalid component")

// ComponentError rejects a component, or one of its files, and says why.
// Nothing was sent to the database.
type ComponentError struct {
	Component string // the component's Name
	File      string // the file at fault; "" for the component as a whole
	Reason    string // why, in words, e.g. "no FS" or the splitter's complaint with its line
	Err       error  // the fs error behind Reason, if any
}

// Error names the component, the file when there is one, and the reason.
func (e *ComponentError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("migrate: component %q: %s", e.Component, e.Reason)
	}
	return fmt.Sprintf("migrate: component %q: file %s: %s", e.Component, e.File, e.Reason)
}

// Is reports whether target is [ErrInvalidComponent].
func (e *ComponentError) Is(target error) bool { return target == ErrInvalidComponent }

// Unwrap returns the fs error behind the rejection, if any.
func (e *ComponentError) Unwrap() error { return e.Err }

// ErrChecksumMismatch is matched by the error [Apply] and [Validate] return
// when a migration recorded as applied has been edited since: its
// statements no longer have the checksum recorded when it ran. The
// concrete type is *ChecksumError. Restore the file and add the change as
// a new migration.
var ErrChecksumMismatch = errors.New("migrate: applied migration was edited")

// ChecksumError reports an applied migration whose file changed.
type ChecksumError struct {
	Schema    string // the schema ([DefaultSchema] when "" was passed)
	Component string // the component's Name
	Version   int    // the edited file's version, its NNN prefix
	Name      string // the file name in the code
	Recorded  string // the checksum recorded when it was applied
	Current   string // the checksum of the file in the code
}

// Error names the schema, the component, the file and its version, with the
// first 12 hex digits of the current and of the recorded checksum.
func (e *ChecksumError) Error() string {
	return fmt.Sprintf("migrate: schema %q component %q: %s (version %d) was edited after it was applied (checksum %s, applied %s)",
		e.Schema, e.Component, e.Name, e.Version, short(e.Current), short(e.Recorded))
}

// Is reports whether target is [ErrChecksumMismatch].
func (e *ChecksumError) Is(target error) bool { return target == ErrChecksumMismatch }

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

// checksum is the SHA-256 of the normalised statements.
func checksum(stmts []statement) string {
	h := sha256.New()
	for _, st := range stmts {
		h.Write([]byte(st.norm))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Migrations returns the component's migrations ordered by version, each
// split into its statements. It fails with a *ComponentError (matching
// [ErrInvalidComponent]) on a component without a name or FS, a file name
// without a positive numeric prefix, two files with the same version, or a
// file that cannot be split into statements (a string, quoted identifier,
// dollar quote or comment never closed; unbalanced or unknown goose
// annotations).
func (c Component) Migrations() ([]Migration, error) {
	bad := func(file, format string, args ...any) error {
		return &ComponentError{Component: c.Name, File: file, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Name == "":
		return nil, bad("", "no Name")
	case !utf8.ValidString(c.Name) || strings.ContainsRune(c.Name, 0):
		return nil, bad("", "the Name is not valid UTF-8 text without NUL")
	case c.FS == nil:
		return nil, bad("", "no FS")
	}
	entries, err := fs.ReadDir(c.FS, ".")
	if err != nil {
		return nil, &ComponentError{Component: c.Name, Reason: "read the migrations: " + err.Error(), Err: err}
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
			return nil, bad(name, "the name does not start with a positive version number and '_'")
		}
		if prev, dup := seen[v]; dup {
			return nil, bad(name, "shares version %d with %s", v, prev)
		}
		seen[v] = name
		b, err := fs.ReadFile(c.FS, path.Clean(name))
		if err != nil {
			return nil, &ComponentError{Component: c.Name, File: name, Reason: "read: " + err.Error(), Err: err}
		}
		stmts, err := splitStatements(string(b))
		if err != nil {
			return nil, bad(name, "%v", err)
		}
		if len(stmts) == 0 {
			return nil, bad(name, "no SQL statement")
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b), Checksum: checksum(stmts), stmts: stmts})
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
// [DefaultSchema]) in one transaction begun on db: [ApplyTx] in a
// transaction of its own, committed when every pending migration applied.
func Apply(ctx context.Context, db pgtx.TxBeginner, schema string, comps ...Component) (Result, error) {
	if _, _, err := prepare(schema, comps); err != nil {
		return Result{}, err
	}
	var res Result
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var err error
		res, err = ApplyTx(ctx, tx, schema, comps...)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// ApplyTx applies every pending migration of comps to schema ("" means
// [DefaultSchema]) inside the caller's transaction tx, so that a service
// can migrate these tables together with its own in one transaction; the
// migrations take effect when the caller commits, and none does if it
// rolls back.
//
// It takes a transaction-scoped advisory lock keyed by the schema (held
// until the caller's transaction ends: concurrent migrators of the same
// schema wait), creates the schema and the bookkeeping table
// seckill_schema_migrations if needed, and for each component applies the
// versions not yet recorded, in order, each statement of a file sent on
// its own with search_path set to the schema; search_path is restored
// before ApplyTx returns. Each applied file is recorded with its
// [Migration.Checksum]. A recorded file whose checksum differs from the
// code's gives a *ChecksumError (matching [ErrChecksumMismatch]) and
// applies nothing more; a recorded file without a checksum (applied by a
// version of this package that kept none) gets the code's recorded.
//
// An invalid schema name gives a *SchemaError and an invalid component a
// *ComponentError, before anything is sent. After any other error the
// caller's transaction is aborted (roll it back).
func ApplyTx(ctx context.Context, tx pgx.Tx, schema string, comps ...Component) (Result, error) {
	schema, plans, err := prepare(schema, comps)
	if err != nil {
		return Result{}, err
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	// The lock serialises concurrent migrators of the same schema; it is
	// released when the caller's transaction ends.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('seckill.migrate:' || $1, 0))`, schema); err != nil {
		return Result{}, fmt.Errorf("migrate: lock: %w", err)
	}
	var searchPath string
	if err := tx.QueryRow(ctx, `SELECT current_setting('search_path')`).Scan(&searchPath); err != nil {
		return Result{}, fmt.Errorf("migrate: read search_path: %w", err)
	}
	var hasChecksum bool
	for _, q := range []string{
		`CREATE SCHEMA IF NOT EXISTS ` + quoted,
		`CREATE TABLE IF NOT EXISTS ` + quoted + `.seckill_schema_migrations (
	component  text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT statement_timestamp(),
	checksum   text,
	PRIMARY KEY (component, version)
)`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return Result{}, fmt.Errorf("migrate: prepare schema %s: %w", quoted, err)
		}
	}
	if err := tx.QueryRow(ctx, checksumColumnSQL, quoted+".seckill_schema_migrations").Scan(&hasChecksum); err != nil {
		return Result{}, fmt.Errorf("migrate: prepare schema %s: %w", quoted, err)
	}
	if !hasChecksum { // a table made by a version of this package without checksums
		if _, err := tx.Exec(ctx, `ALTER TABLE `+quoted+`.seckill_schema_migrations ADD COLUMN checksum text`); err != nil {
			return Result{}, fmt.Errorf("migrate: prepare schema %s: %w", quoted, err)
		}
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, quoted); err != nil {
		return Result{}, fmt.Errorf("migrate: set search_path: %w", err)
	}
	res := Result{Applied: map[string][]int{}}
	for i, c := range comps {
		applied, err := appliedChecksums(ctx, tx, quoted, c.Name)
		if err != nil {
			return Result{}, err
		}
		for _, m := range plans[i] {
			if sum, ok := applied[m.Version]; ok {
				switch {
				case sum == "":
					if _, err := tx.Exec(ctx, `UPDATE `+quoted+`.seckill_schema_migrations SET checksum = $3 WHERE component = $1 AND version = $2`,
						c.Name, m.Version, m.Checksum); err != nil {
						return Result{}, fmt.Errorf("migrate: record checksum of %s %s: %w", c.Name, m.Name, err)
					}
				case sum != m.Checksum:
					return Result{}, &ChecksumError{Schema: schema, Component: c.Name, Version: m.Version, Name: m.Name,
						Recorded: sum, Current: m.Checksum}
				}
				continue
			}
			for _, st := range m.stmts {
				if _, err := tx.Exec(ctx, st.sql); err != nil {
					return Result{}, fmt.Errorf("migrate: %s %s (statement at line %d): %w", c.Name, m.Name, st.line, err)
				}
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+quoted+`.seckill_schema_migrations (component, version, name, checksum) VALUES ($1, $2, $3, $4)`,
				c.Name, m.Version, m.Name, m.Checksum); err != nil {
				return Result{}, fmt.Errorf("migrate: record %s %s: %w", c.Name, m.Name, err)
			}
			res.Applied[c.Name] = append(res.Applied[c.Name], m.Version)
		}
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, searchPath); err != nil {
		return Result{}, fmt.Errorf("migrate: restore search_path: %w", err)
	}
	return res, nil
}

// checksumColumnSQL tells whether the bookkeeping table ($1) has the
// checksum column.
const checksumColumnSQL = `SELECT EXISTS (SELECT FROM pg_attribute
	WHERE attrelid = $1::regclass AND attname = 'checksum' AND NOT attisdropped)`

// prepare validates the schema name (defaulting it) and reads every
// component's migrations, before anything is sent.
func prepare(schema string, comps []Component) (string, [][]Migration, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	if err := ValidateSchema(schema); err != nil {
		return "", nil, err
	}
	plans := make([][]Migration, len(comps))
	for i, c := range comps {
		var err error
		if plans[i], err = c.Migrations(); err != nil {
			return "", nil, err
		}
	}
	return schema, plans, nil
}

// appliedChecksums returns the versions recorded for component, each with
// its checksum ("" when none was recorded).
func appliedChecksums(ctx context.Context, q pgtx.Querier, quoted, component string) (map[int]string, error) {
	rows, err := q.Query(ctx, `SELECT version, coalesce(checksum, '') FROM `+quoted+`.seckill_schema_migrations WHERE component = $1`, component)
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	out := map[int]string{}
	var v int32
	var sum string
	_, err = pgx.ForEachRow(rows, []any{&v, &sum}, func() error {
		out[int(v)] = sum
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}
	return out, nil
}

// Validate checks that schema has exactly the migrations of comps applied,
// unedited. It returns nil when it has; a *ChecksumError matching
// [ErrChecksumMismatch] when an applied file was edited (a file applied
// without a checksum is taken as it is); a *VersionError matching
// [ErrPending] or [ErrSchemaNewer] when versions differ (for the first
// component that differs); a *SchemaError or *ComponentError for invalid
// input; or the query error. It writes nothing.
func Validate(ctx context.Context, db pgtx.Querier, schema string, comps ...Component) error {
	schema, plans, err := prepare(schema, comps)
	if err != nil {
		return err
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	var exists, hasChecksum bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, quoted+".seckill_schema_migrations").Scan(&exists); err != nil {
		return fmt.Errorf("migrate: validate: %w", err)
	}
	if exists {
		if err := db.QueryRow(ctx, checksumColumnSQL, quoted+".seckill_schema_migrations").Scan(&hasChecksum); err != nil {
			return fmt.Errorf("migrate: validate: %w", err)
		}
	}
	for i, c := range comps {
		latest := 0
		if n := len(plans[i]); n > 0 {
			latest = plans[i][n-1].Version
		}
		applied := map[int]string{}
		if exists {
			if hasChecksum {
				if applied, err = appliedChecksums(ctx, db, quoted, c.Name); err != nil {
					return err
				}
			} else if err := versionsOnly(ctx, db, quoted, c.Name, applied); err != nil {
				return err
			}
		}
		for _, m := range plans[i] {
			if sum := applied[m.Version]; sum != "" && sum != m.Checksum {
				return &ChecksumError{Schema: schema, Component: c.Name, Version: m.Version, Name: m.Name, Recorded: sum, Current: m.Checksum}
			}
		}
		newest := 0
		for v := range applied {
			newest = max(newest, v)
		}
		if newest != latest {
			return &VersionError{Schema: schema, Component: c.Name, Applied: newest, Latest: latest}
		}
	}
	return nil
}

// versionsOnly reads the versions of a bookkeeping table without the
// checksum column into applied, each with an empty checksum.
func versionsOnly(ctx context.Context, q pgtx.Querier, quoted, component string, applied map[int]string) error {
	rows, err := q.Query(ctx, `SELECT version FROM `+quoted+`.seckill_schema_migrations WHERE component = $1`, component)
	if err != nil {
		return fmt.Errorf("migrate: validate: %w", err)
	}
	var v int32
	_, err = pgx.ForEachRow(rows, []any{&v}, func() error {
		applied[int(v)] = ""
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate: validate: %w", err)
	}
	return nil
}
