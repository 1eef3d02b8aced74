// Package migrate applies the embedded, numbered SQL migrations that each
// package of this module ships for the tables it owns.
//
// Every package (inbox, outbox, inventory, order) exposes a [Component] named
// Migrations to pass to [Apply]. A service that uses several packages can
// migrate them together in one transaction:
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
// Each applied file is recorded with a checksum of its statements (SHA-256
// of the statements with comments, goose annotations and the amount of
// whitespace between tokens left out): a file edited after it was applied
// is refused by Apply and reported by [Validate] with an error matching
// [ErrChecksumMismatch], instead of being silently skipped. Comments, goose
// annotations and layout do not count as edits.
//
// Each statement of a file is sent as a query of its own (Citus runs DDL
// only one statement per query): the files are split at the semicolons
// that end statements, not at those inside strings, quoted identifiers,
// dollar quotes or comments, and a statement between -- +goose
// StatementBegin and -- +goose StatementEnd is kept whole.
//
// Invalid input is rejected before the database is used: a schema name
// with [ErrInvalidSchema] (the rule in [ValidateSchema] makes a name mean
// the same schema whether or not a tool quotes it), a component or file
// that cannot be read or split with [ErrInvalidComponent]. Every refusal
// of Apply, ApplyTx and Validate is an *[Error] that matches its sentinel
// with errors.Is and says which schema, component and file it concerns.
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

	"github.com/seckillkit/seckill/internal/sqlfile"
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
// reported by [Apply], [ApplyTx] and [Validate].
func Embedded(name string, fsys fs.FS, dir string) Component {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(fmt.Sprintf("migrate: component %s: %v", name, err))
	}
	return Component{Name: name, FS: sub}
}

// migration is one numbered SQL file of a component.
type migration struct {
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

// ErrPending is matched by the error [Validate] returns when a component has
// migrations that are not applied yet (Error.Applied < Error.Latest).
var ErrPending = errors.New("migrate: migrations pending")

// ErrSchemaNewer is matched by the error [Validate] returns when the database
// records a version newer than the code knows (Error.Applied >
// Error.Latest): the code is older than the schema.
var ErrSchemaNewer = errors.New("migrate: database schema is newer than this code")

// ErrInvalidComponent is matched (with errors.Is) by every error that
// rejects a [Component] or one of its files before the database is used.
var ErrInvalidComponent = errors.New("migrate: invalid component")

// ErrChecksumMismatch is matched by the error [Apply], [ApplyTx] and
// [Validate] return when a migration recorded as applied has been edited
// since: its statements no longer have the checksum recorded when it ran.
// Restore the file and add the change as a new migration.
var ErrChecksumMismatch = errors.New("migrate: applied migration was edited")

// ErrInvalidSchema is matched (with errors.Is) by every error that rejects a
// schema name ([ValidateSchema], [QuoteSchema], [Apply], [ApplyTx],
// [Validate]). Nothing was written.
var ErrInvalidSchema = errors.New("migrate: invalid schema name")

// Error is the error of [Apply], [ApplyTx], [Validate], [ValidateSchema]
// and [QuoteSchema] when they refuse. Kind is the sentinel it matches
// with errors.Is; the other fields say what was refused, those that do
// not apply to the refusal being zero.
type Error struct {
	// Kind is [ErrInvalidSchema], [ErrInvalidComponent],
	// [ErrChecksumMismatch], [ErrPending] or [ErrSchemaNewer].
	Kind error
	// Schema is the schema ([DefaultSchema] when "" was passed); for
	// ErrInvalidSchema the rejected name.
	Schema string
	// Component is the component's Name (for ErrPending and
	// ErrSchemaNewer the first of the components whose versions differ).
	Component string
	// File is the file at fault: the file rejected (ErrInvalidComponent;
	// "" for the component as a whole) or the edited file
	// (ErrChecksumMismatch).
	File string
	// Version is the edited file's version, its NNN prefix
	// (ErrChecksumMismatch).
	Version int
	// Applied is the highest version recorded in the database (0: none)
	// and Latest the highest embedded in the code (ErrPending,
	// ErrSchemaNewer).
	Applied, Latest int
	// Recorded is the checksum recorded when the file was applied and
	// Current the checksum of the file in the code (ErrChecksumMismatch).
	Recorded, Current string
	// Reason says why, in words (ErrInvalidSchema, ErrInvalidComponent),
	// e.g. "no FS" or the splitter's complaint with its line.
	Reason string

	cause error // the fs error behind Reason, if any
}

// Error says what was refused and why: the schema, the component, the
// file, and for an edited file the first 12 hex digits of the current and
// of the recorded checksum.
func (e *Error) Error() string {
	switch e.Kind {
	case ErrInvalidSchema:
		return fmt.Sprintf("migrate: invalid schema name %q: %s", e.Schema, e.Reason)
	case ErrInvalidComponent:
		if e.File == "" {
			return fmt.Sprintf("migrate: component %q: %s", e.Component, e.Reason)
		}
		return fmt.Sprintf("migrate: component %q: file %s: %s", e.Component, e.File, e.Reason)
	case ErrChecksumMismatch:
		return fmt.Sprintf("migrate: schema %q component %q: %s (version %d) was edited after it was applied (checksum %s, applied %s)",
			e.Schema, e.Component, e.File, e.Version, short(e.Current), short(e.Recorded))
	}
	return fmt.Sprintf("migrate: schema %q component %q at version %d, code expects %d",
		e.Schema, e.Component, e.Applied, e.Latest)
}

// Unwrap returns Kind and the fs error behind the refusal, if any.
func (e *Error) Unwrap() []error {
	if e.cause != nil {
		return []error{e.Kind, e.cause}
	}
	return []error{e.Kind}
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

// checksumError reports applied file m of component, whose checksum
// recorded is not the code's.
func checksumError(schema, component string, m migration, recorded string) error {
	return &Error{Kind: ErrChecksumMismatch, Schema: schema, Component: component, File: m.Name, Version: m.Version,
		Recorded: recorded, Current: m.Checksum}
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

// migrations returns the component's migrations ordered by version, each
// split into its statements. It fails with an *Error matching
// [ErrInvalidComponent] on a component without a name or FS, a file name
// without a positive numeric prefix, two files with the same version, or a
// file that cannot be split into statements (a string, quoted identifier,
// dollar quote or comment never closed; unbalanced or unknown goose
// annotations).
func (c Component) migrations() ([]migration, error) {
	bad := func(file, format string, args ...any) error {
		return &Error{Kind: ErrInvalidComponent, Component: c.Name, File: file, Reason: fmt.Sprintf(format, args...)}
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
		return nil, &Error{Kind: ErrInvalidComponent, Component: c.Name, Reason: "read the migrations: " + err.Error(), cause: err}
	}
	var out []migration
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
			return nil, &Error{Kind: ErrInvalidComponent, Component: c.Name, File: name, Reason: "read: " + err.Error(), cause: err}
		}
		stmts, err := splitStatements(string(b))
		if err != nil {
			return nil, bad(name, "%v", err)
		}
		if len(stmts) == 0 {
			return nil, bad(name, "no SQL statement")
		}
		out = append(out, migration{Version: v, Name: name, SQL: string(b), Checksum: checksum(stmts), stmts: stmts})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
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
// checksum. A recorded file whose checksum differs from the code's gives
// an *[Error] matching [ErrChecksumMismatch] and
// applies nothing more; a recorded file without a checksum (applied by a
// version of this package that kept none) gets the code's recorded.
//
// An invalid schema name gives an *Error matching [ErrInvalidSchema] and
// an invalid component one matching [ErrInvalidComponent], before anything
// is sent. After any other error the
// caller's transaction is aborted (roll it back).
func ApplyTx(ctx context.Context, tx pgx.Tx, schema string, comps ...Component) (Result, error) {
	schema, plans, err := prepare(schema, comps)
	if err != nil {
		return Result{}, err
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	q := statements.Bind(quoted)
	// The lock serialises concurrent migrators of the same schema; it is
	// released when the caller's transaction ends.
	if _, err := tx.Exec(ctx, q.Get("lock"), schema); err != nil {
		return Result{}, fmt.Errorf("migrate: lock: %w", err)
	}
	var searchPath string
	if err := tx.QueryRow(ctx, q.Get("read_search_path")).Scan(&searchPath); err != nil {
		return Result{}, fmt.Errorf("migrate: read search_path: %w", err)
	}
	var hasChecksum bool
	for _, ddl := range []string{q.Get("create_schema"), q.Get("create_bookkeeping")} {
		if _, err := tx.Exec(ctx, ddl); err != nil {
			return Result{}, fmt.Errorf("migrate: prepare schema %s: %w", quoted, err)
		}
	}
	if err := tx.QueryRow(ctx, q.Get("has_checksum_column"), quoted+".seckill_schema_migrations").Scan(&hasChecksum); err != nil {
		return Result{}, fmt.Errorf("migrate: prepare schema %s: %w", quoted, err)
	}
	if !hasChecksum { // a table made by a version of this package without checksums
		if _, err := tx.Exec(ctx, q.Get("add_checksum_column")); err != nil {
			return Result{}, fmt.Errorf("migrate: prepare schema %s: %w", quoted, err)
		}
	}
	if _, err := tx.Exec(ctx, q.Get("set_search_path"), quoted); err != nil {
		return Result{}, fmt.Errorf("migrate: set search_path: %w", err)
	}
	res := Result{Applied: map[string][]int{}}
	for i, c := range comps {
		applied, err := appliedChecksums(ctx, tx, q, c.Name)
		if err != nil {
			return Result{}, err
		}
		for _, m := range plans[i] {
			if sum, ok := applied[m.Version]; ok {
				switch {
				case sum == "":
					if _, err := tx.Exec(ctx, q.Get("record_checksum"),
						c.Name, m.Version, m.Checksum); err != nil {
						return Result{}, fmt.Errorf("migrate: record checksum of %s %s: %w", c.Name, m.Name, err)
					}
				case sum != m.Checksum:
					return Result{}, checksumError(schema, c.Name, m, sum)
				}
				continue
			}
			for _, st := range m.stmts {
				if _, err := tx.Exec(ctx, st.sql); err != nil {
					return Result{}, fmt.Errorf("migrate: %s %s (statement at line %d): %w", c.Name, m.Name, st.line, err)
				}
			}
			if _, err := tx.Exec(ctx, q.Get("record"),
				c.Name, m.Version, m.Name, m.Checksum); err != nil {
				return Result{}, fmt.Errorf("migrate: record %s %s: %w", c.Name, m.Name, err)
			}
			res.Applied[c.Name] = append(res.Applied[c.Name], m.Version)
		}
	}
	if _, err := tx.Exec(ctx, q.Get("set_search_path"), searchPath); err != nil {
		return Result{}, fmt.Errorf("migrate: restore search_path: %w", err)
	}
	return res, nil
}

// prepare validates the schema name (defaulting it) and reads every
// component's migrations, before anything is sent.
func prepare(schema string, comps []Component) (string, [][]migration, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	if err := ValidateSchema(schema); err != nil {
		return "", nil, err
	}
	plans := make([][]migration, len(comps))
	for i, c := range comps {
		var err error
		if plans[i], err = c.migrations(); err != nil {
			return "", nil, err
		}
	}
	return schema, plans, nil
}

// appliedChecksums returns the versions recorded for component, each with
// its checksum ("" when none was recorded).
func appliedChecksums(ctx context.Context, db pgtx.Querier, q sqlfile.Bound, component string) (map[int]string, error) {
	rows, err := db.Query(ctx, q.Get("applied_checksums"), component)
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
// unedited. It returns nil when it has; an *[Error] matching
// [ErrChecksumMismatch] when an applied file was edited (a file applied
// without a checksum is taken as it is); one matching [ErrPending] or
// [ErrSchemaNewer] when versions differ (for the first component that
// differs); one matching [ErrInvalidSchema] or [ErrInvalidComponent] for
// invalid input; or the query error. It writes nothing.
func Validate(ctx context.Context, db pgtx.Querier, schema string, comps ...Component) error {
	schema, plans, err := prepare(schema, comps)
	if err != nil {
		return err
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	q := statements.Bind(quoted)
	var exists, hasChecksum bool
	if err := db.QueryRow(ctx, q.Get("bookkeeping_exists"), quoted+".seckill_schema_migrations").Scan(&exists); err != nil {
		return fmt.Errorf("migrate: validate: %w", err)
	}
	if exists {
		if err := db.QueryRow(ctx, q.Get("has_checksum_column"), quoted+".seckill_schema_migrations").Scan(&hasChecksum); err != nil {
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
				if applied, err = appliedChecksums(ctx, db, q, c.Name); err != nil {
					return err
				}
			} else if err := versionsOnly(ctx, db, q, c.Name, applied); err != nil {
				return err
			}
		}
		for _, m := range plans[i] {
			if sum := applied[m.Version]; sum != "" && sum != m.Checksum {
				return checksumError(schema, c.Name, m, sum)
			}
		}
		newest := 0
		for v := range applied {
			newest = max(newest, v)
		}
		if newest != latest {
			kind := ErrPending
			if newest > latest {
				kind = ErrSchemaNewer
			}
			return &Error{Kind: kind, Schema: schema, Component: c.Name, Applied: newest, Latest: latest}
		}
	}
	return nil
}

// versionsOnly reads the versions of a bookkeeping table without the
// checksum column into applied, each with an empty checksum.
func versionsOnly(ctx context.Context, db pgtx.Querier, q sqlfile.Bound, component string, applied map[int]string) error {
	rows, err := db.Query(ctx, q.Get("applied_versions"), component)
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
