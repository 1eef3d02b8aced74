package migrate

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DefaultSchema is the schema the packages of this module use when their
// configuration names none.
const DefaultSchema = "seckill"

// MaxIdentifierLength is PostgreSQL's limit (NAMEDATALEN-1) on the length of
// an identifier in bytes. Longer names are rejected instead of silently
// truncated by the server.
const MaxIdentifierLength = 63

// ValidateSchema checks that name is a schema name this module accepts: 1 to
// 63 bytes of lower-case ASCII letters, digits and underscores, starting
// with a letter or underscore, not starting with "pg_" (reserved by
// PostgreSQL), and not a reserved SQL key word (such as "user", "order" or
// "select": those PostgreSQL lists in pg_get_keywords() as reserved or as
// usable only as a type or function name). The rule is deliberately narrower than
// what PostgreSQL allows when quoted, so that a name means the same schema
// whether or not a tool quotes it: unquoted, PostgreSQL folds "Shop" to
// shop, and a reserved word is a syntax error. An invalid name gives an
// *[Error] matching [ErrInvalidSchema], with the name and the reason.
func ValidateSchema(name string) error {
	bad := func(reason string) error { return &Error{Kind: ErrInvalidSchema, Schema: name, Reason: reason} }
	switch {
	case name == "":
		return bad("empty")
	case len(name) > MaxIdentifierLength:
		return bad(fmt.Sprintf("longer than %d bytes", MaxIdentifierLength))
	case name[0] >= '0' && name[0] <= '9':
		return bad("starts with a digit")
	case strings.HasPrefix(strings.ToLower(name), "pg_"):
		return bad(`the "pg_" prefix is reserved for system schemas`)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'A' && c <= 'Z' {
			return bad(fmt.Sprintf("upper-case letter %q at byte %d: unquoted, PostgreSQL folds it to lower case, so the name would depend on whether a tool quotes it", c, i))
		}
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return bad(fmt.Sprintf("character %q at byte %d is not a lower-case letter, digit or underscore", c, i))
		}
	}
	if _, ok := reserved[name]; ok {
		return bad("a reserved SQL key word: unquoted, it is a syntax error")
	}
	return nil
}

// reserved holds the key words [ValidateSchema] rejects: those PostgreSQL
// (15 to 18) lists in pg_get_keywords() as reserved or as usable only as a
// type or function name, which cannot name a schema unquoted.
var reserved = func() map[string]struct{} {
	m := map[string]struct{}{}
	for _, w := range strings.Fields(`all analyse analyze and any array as asc asymmetric authorization
		binary both case cast check collate collation column concurrently constraint create cross
		current_catalog current_date current_role current_schema current_time current_timestamp
		current_user default deferrable desc distinct do else end except false fetch for foreign
		freeze from full grant group having ilike in initially inner intersect into is isnull join
		lateral leading left like limit localtime localtimestamp natural not notnull null offset on
		only or order outer overlaps placing primary references returning right select session_user
		similar some symmetric system_user table tablesample then to trailing true union unique user
		using variadic verbose when where window with`) {
		m[w] = struct{}{}
	}
	return m
}()

// QuoteSchema validates name with [ValidateSchema] and returns it quoted for
// use in SQL text (for example `"seckill"`). An empty name means
// [DefaultSchema].
func QuoteSchema(name string) (string, error) {
	if name == "" {
		name = DefaultSchema
	}
	if err := ValidateSchema(name); err != nil {
		return "", err
	}
	return pgx.Identifier{name}.Sanitize(), nil
}

// ErrNotMigrated is matched (with errors.Is) by the error a store or relay
// of this module returns when its schema lacks the tables or functions of
// its component: the migrations were never applied to that schema, or are
// behind the code, or the store is configured with another schema than
// the one they were applied to. The concrete type is *NotMigratedError.
var ErrNotMigrated = errors.New("migrate: schema not migrated")

// NotMigratedError reports a schema without the tables (or functions) of a
// component. Its text names the schema and the fix: apply the component's
// migrations to that schema ([Apply]), or configure the schema they were
// applied to.
type NotMigratedError struct {
	Schema    string // the schema the store or relay uses
	Component string // the component whose objects are missing, e.g. "outbox"
	// Err is the server's error: undefined_table (SQLSTATE 42P01),
	// undefined_function (42883) or invalid_schema_name (3F000), naming
	// the missing object; nil when the check found it without one.
	Err error
}

// Error names the schema, the component and the fix, then the server's
// error.
func (e *NotMigratedError) Error() string {
	msg := fmt.Sprintf("migrate: the %s migrations are not applied to schema %q: apply them with migrate.Apply(ctx, db, %q, %s.Migrations), or configure the schema they were applied to",
		e.Component, e.Schema, e.Schema, e.Component)
	if e.Err != nil {
		msg += " (" + e.Err.Error() + ")"
	}
	return msg
}

// Is reports whether target is [ErrNotMigrated].
func (e *NotMigratedError) Is(target error) bool { return target == ErrNotMigrated }

// Unwrap returns the server's error.
func (e *NotMigratedError) Unwrap() error { return e.Err }

// ErrCitusMismatch is matched (with errors.Is) by the error a store's
// Check returns when its Citus option does not fit the server: the
// component's tables are distributed by Citus (a distributed schema, or a
// distributed table) and the option is off, or the option is on and they
// are not. The concrete type is *CitusMismatchError.
var ErrCitusMismatch = errors.New("migrate: the Citus option does not fit the server")

// CitusMismatchError reports a store whose Citus option does not fit the
// server it runs on.
type CitusMismatchError struct {
	Schema    string // the store's schema
	Component string // the store's component, e.g. "inventory"
	// Option is the store's Config.Citus.
	Option bool
	// Citus tells whether the server has the Citus extension;
	// Distributed whether the component's tables are distributed by it.
	Citus, Distributed bool
}

// Error says which way the option is wrong and what it costs.
func (e *CitusMismatchError) Error() string {
	if e.Distributed {
		return fmt.Sprintf("migrate: the %s tables of schema %q are distributed by Citus, but Config.Citus is off: set it, or the %s statements are split into subplans and their transactions commit with two phases across nodes",
			e.Component, e.Schema, e.Component)
	}
	where := "the server has no Citus extension"
	if e.Citus {
		where = "the tables are not distributed by Citus (a local table of the coordinator)"
	}
	return fmt.Sprintf("migrate: Config.Citus is set for the %s tables of schema %q, but %s: unset it (its statement shapes cost more on a single PostgreSQL)",
		e.Component, e.Schema, where)
}

// Is reports whether target is [ErrCitusMismatch].
func (e *CitusMismatchError) Is(target error) bool { return target == ErrCitusMismatch }
