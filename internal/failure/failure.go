// Package failure classifies the server errors the packages of this module
// meet into the errors they return: a condition a one-batch statement
// raised (a SQLSTATE of its own, or a unique constraint) matched to the
// package's sentinel, and a schema without the package's tables reported
// as a *migrate.NotMigratedError.
package failure

import (
	"errors"
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

// Explain replaces *err by its classification: deferred by the methods of
// a store, so that what they return names a missing schema.
func (c *Classifier) Explain(err *error) {
	if *err != nil {
		*err = c.Classify(*err)
	}
}

// missing reports whether pgErr says that a table, a function or the
// schema itself is missing from the store's schema: undefined_table
// (42P01) naming a relation of the schema, undefined_function (42883)
// naming a function of the schema, or invalid_schema_name (3F000) naming
// the schema. (The identifiers are in the messages in every language.)
func (c *Classifier) missing(pgErr *pgconn.PgError) bool {
	switch pgErr.Code {
	case pgerrcode.UndefinedTable:
		return strings.Contains(pgErr.Message, `"`+c.Schema+`.`) ||
			strings.Contains(pgErr.Message, pgx.Identifier{c.Schema}.Sanitize()+`.`)
	case pgerrcode.UndefinedFunction:
		return strings.Contains(pgErr.Message, " "+c.Schema+".")
	case pgerrcode.InvalidSchemaName:
		return strings.Contains(pgErr.Message, `"`+c.Schema+`"`)
	}
	return false
}
