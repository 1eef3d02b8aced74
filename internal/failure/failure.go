// Package failure classifies the server errors the packages of this module
// meet into the errors they return: a condition a one-batch statement
// raised (a SQLSTATE of its own, or a unique constraint) matched to the
// package's sentinel, and a schema without the package's tables reported
// as a *migrate.NotMigratedError.
package failure

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
)

// Error is a classified server error: it matches its sentinel with
// errors.Is and unwraps to the error it classifies (which holds the
// *pgconn.PgError). Its text is that error's: the server's message names
// the condition.
type Error struct {
	Sentinel error
	Err      error
}

// Error returns the classified error's text.
func (e *Error) Error() string { return e.Err.Error() }

// Is reports whether target is the sentinel.
func (e *Error) Is(target error) bool { return target == e.Sentinel }

// Unwrap returns the classified error.
func (e *Error) Unwrap() error { return e.Err }

// Classifier classifies the errors of one store.
type Classifier struct {
	Schema    string // the store's schema
	Component string // its migration component's name, e.g. "inventory"
	// Codes maps the SQLSTATEs the store's statements raise to sentinels.
	Codes map[string]error
	// Constraints maps the unique constraints a one-batch insert may
	// violate to sentinels.
	Constraints map[string]error
	// Objects names the component's tables and functions: a missing one
	// of them in Schema is reported as a *migrate.NotMigratedError.
	Objects []string
}

// Name marks the statements queued into b from position from as the call
// name, whose errors c classifies ([pgtx.NameCall]).
func (c *Classifier) Name(b *pgx.Batch, from int, name string) {
	pgtx.NameCall(b, from, name, c.Classify)
}

// Classify returns err classified: a missing table or function of the
// schema as a *migrate.NotMigratedError, a SQLSTATE of Codes or a unique
// violation of Constraints as an *Error matching the sentinel; other
// errors (and errors already classified) as they are.
func (c *Classifier) Classify(err error) error {
	if err == nil {
		return nil
	}
	var fe *Error
	var nm *migrate.NotMigratedError
	var pgErr *pgconn.PgError
	if errors.As(err, &fe) || errors.As(err, &nm) || !errors.As(err, &pgErr) {
		return err
	}
	if c.missing(pgErr) {
		return &migrate.NotMigratedError{Schema: c.Schema, Component: c.Component, Err: err}
	}
	if sentinel, ok := c.Codes[pgErr.Code]; ok {
		return &Error{Sentinel: sentinel, Err: err}
	}
	if name, ok := pgtx.UniqueViolationOf(err); ok {
		if sentinel, ok := c.Constraints[name]; ok {
			return &Error{Sentinel: sentinel, Err: err}
		}
	}
	return err
}

// Explain replaces *err, when it says that a table or function of the
// schema is missing, by a *migrate.NotMigratedError; other errors stay as
// they are. The methods of a store defer it, so that what they return
// names a missing schema and the fix.
func (c *Classifier) Explain(err *error) {
	if *err == nil {
		return
	}
	var nm *migrate.NotMigratedError
	var pgErr *pgconn.PgError
	if !errors.As(*err, &nm) && errors.As(*err, &pgErr) && c.missing(pgErr) {
		*err = &migrate.NotMigratedError{Schema: c.Schema, Component: c.Component, Err: *err}
	}
}

// missing reports whether pgErr says that a table, a function or the
// schema itself is missing from the store's schema: undefined_table
// (42P01) naming a relation of the schema, undefined_function (42883)
// naming a function of the schema, or invalid_schema_name (3F000) naming
// the schema. (The identifiers are in the messages in every language.)
func (c *Classifier) missing(pgErr *pgconn.PgError) bool {
	switch pgErr.Code {
	case pgerrcode.UndefinedTable, pgerrcode.UndefinedFunction:
		// relation "schema.table" does not exist;
		// function schema.name(argument types) does not exist
		for _, o := range c.Objects {
			if strings.Contains(pgErr.Message, `"`+c.Schema+`.`+o+`"`) ||
				strings.Contains(pgErr.Message, " "+c.Schema+"."+o+"(") {
				return true
			}
		}
	case pgerrcode.InvalidSchemaName:
		return strings.Contains(pgErr.Message, `"`+c.Schema+`"`)
	}
	return false
}

// Mark returns a function that marks the statements queued into b from
// now on as the call name ([Classifier.Name]); for a nil b it does
// nothing. A Queue method defers it: defer c.Mark(b, "pkg.Store.QueueX")().
func (c *Classifier) Mark(b *pgx.Batch, name string) func() {
	if b == nil {
		return func() {}
	}
	from := b.Len()
	return func() { c.Name(b, from, name) }
}

// checkSQL tells whether table $1 (schema-qualified, quoted) exists and
// whether the server has the Citus extension; distributedSQL, asked only
// when it has, whether Citus distributes the table (a table of a
// distributed schema, or one made distributed).
const (
	checkSQL = `SELECT to_regclass($1) IS NOT NULL,
       EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')`
	distributedSQL = `SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = to_regclass($1))`
)

// Check verifies on db that the schema has the component's table (one of
// Objects) and that citus, the store's Citus option, fits the server. It
// returns a *migrate.NotMigratedError, a *migrate.CitusMismatchError, the
// query's error, or nil.
func (c *Classifier) Check(ctx context.Context, db pgtx.Querier, table string, citus bool) error {
	var exists, hasCitus, distributed bool
	name := pgx.Identifier{c.Schema, table}.Sanitize()
	if err := db.QueryRow(ctx, checkSQL, name).Scan(&exists, &hasCitus); err != nil {
		return fmt.Errorf("%s: check schema %q: %w", c.Component, c.Schema, err)
	}
	if exists && hasCitus {
		if err := db.QueryRow(ctx, distributedSQL, name).Scan(&distributed); err != nil {
			return fmt.Errorf("%s: check schema %q: %w", c.Component, c.Schema, err)
		}
	}
	if !exists {
		return &migrate.NotMigratedError{Schema: c.Schema, Component: c.Component,
			Err: fmt.Errorf("relation %s does not exist", name)}
	}
	if distributed != citus {
		return &migrate.CitusMismatchError{Schema: c.Schema, Component: c.Component, Option: citus,
			Citus: hasCitus, Distributed: distributed}
	}
	return nil
}
