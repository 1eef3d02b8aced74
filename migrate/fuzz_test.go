package migrate_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/seckillkit/seckill/migrate"
)

// schemaRule is the documented rule, written independently of the code:
// lower-case ASCII letters, digits and underscores, 1 to 63 bytes, no
// leading digit, no "pg_" prefix, not a reserved key word (the list is
// checked against the server's pg_get_keywords() in
// TestReservedWordsMatchServer).
var schemaRule = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func reservedWord(name string) bool {
	for _, w := range migrate.ReservedWords() {
		if w == name {
			return true
		}
	}
	return false
}

// FuzzSchemaNameRule extends FuzzValidateSchema (migrate_test.go): the
// accepted set is exactly the documented rule, ValidateSchema and
// QuoteSchema agree, a rejection is an *Error naming the input, and
// Apply and Validate reject an invalid name before using the database (they
// get a nil pool here).
func FuzzSchemaNameRule(f *testing.F) {
	for _, s := range []string{"seckill", "_", "PG_x", "pG_", "pg", "pgx_1", "a\x00", "a\u200bb", "ſeckill",
		`seckill"; DROP SCHEMA public CASCADE; --`, "$1", "a.b", "A" + strings.Repeat("9", 62), "a" + strings.Repeat("9", 62), "Seckill", "user", "order", "select", "left", "int", "public", "é" + strings.Repeat("a", 61)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		want := schemaRule.MatchString(name) && !strings.HasPrefix(name, "pg_") && !reservedWord(name)
		err := migrate.ValidateSchema(name)
		if (err == nil) != want {
			t.Fatalf("ValidateSchema(%q) = %v, rule says valid=%v", name, err, want)
		}
		q, qerr := migrate.QuoteSchema(name)
		if name != "" && (qerr == nil) != (err == nil) {
			t.Fatalf("QuoteSchema(%q) = %v but ValidateSchema = %v", name, qerr, err)
		}
		if err != nil {
			var se *migrate.Error
			if !errors.As(err, &se) || se.Schema != name || se.Reason == "" || !errors.Is(err, migrate.ErrInvalidSchema) {
				t.Fatalf("ValidateSchema(%q) = %#v, want a *migrate.Error naming it", name, err)
			}
			// Rejected before the database is touched: a nil pool does not panic.
			if name != "" {
				if _, err := migrate.Apply(context.Background(), nil, name, good); !errors.Is(err, migrate.ErrInvalidSchema) {
					t.Fatalf("Apply(nil, %q) = %v", name, err)
				}
				if err := migrate.Validate(context.Background(), nil, name, good); !errors.Is(err, migrate.ErrInvalidSchema) {
					t.Fatalf("Validate(nil, %q) = %v", name, err)
				}
			}
			return
		}
		if q != `"`+name+`"` {
			t.Fatalf("QuoteSchema(%q) = %q", name, q)
		}
	})
}
