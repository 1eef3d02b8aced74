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

// ErrInvalidSchema is matched (with errors.Is) by every error that rejects a
// schema name. The concrete type is *SchemaError.
var ErrInvalidSchema = errors.New("migrate: invalid schema name")

// SchemaError rejects a schema name and says why. Nothing was written.
type SchemaError struct {
	Name   string // the rejected name
	Reason string // why it was rejected
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("migrate: invalid schema name %q: %s", e.Name, e.Reason)
}

// Is reports whether target is [ErrInvalidSchema].
func (e *SchemaError) Is(target error) bool { return target == ErrInvalidSchema }

// ValidateSchema checks that name is a schema name this module accepts: 1 to
// 63 bytes of ASCII letters, digits and underscores, not starting with a
// digit, and not starting with "pg_" (reserved by PostgreSQL). The rule is
// deliberately narrower than what PostgreSQL allows when quoted, so that a
// name is the same whether or not a tool quotes it. An invalid name gives a
// *SchemaError.
func ValidateSchema(name string) error {
	bad := func(reason string) error { return &SchemaError{Name: name, Reason: reason} }
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
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return bad(fmt.Sprintf("character %q at byte %d is not a letter, digit or underscore", c, i))
		}
	}
	return nil
}

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
