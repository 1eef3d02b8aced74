// Package schematest holds the assertions the stores' tests share about a
// schema without its tables and about the Citus option: each store's
// TestNotMigratedSchema calls them with its own component.
package schematest

import (
	"errors"
	"strings"
	"testing"

	"github.com/seckillkit/seckill/migrate"
)

// NotMigrated fails t unless err, returned by what, is a
// *migrate.NotMigratedError (migrate.ErrNotMigrated) for schema and
// component whose text names the fix: migrate.Apply with the component's
// migrations.
func NotMigrated(t testing.TB, what string, err error, schema, component string) {
	t.Helper()
	var nm *migrate.NotMigratedError
	if !errors.Is(err, migrate.ErrNotMigrated) || !errors.As(err, &nm) || nm.Schema != schema || nm.Component != component ||
		!strings.Contains(err.Error(), `migrate.Apply(ctx, db, "`+schema+`", `+component+`.Migrations)`) {
		t.Fatalf("%s: %v, want a *migrate.NotMigratedError naming schema %s and migrate.Apply", what, err, schema)
	}
}

// CitusOnPlain fails t unless err, returned by a store's Check with
// Config.Citus set on plain PostgreSQL for the migrated schema, is the
// *migrate.CitusMismatchError (migrate.ErrCitusMismatch) that says so.
func CitusOnPlain(t testing.TB, err error, schema string) {
	t.Helper()
	var cm *migrate.CitusMismatchError
	if !errors.Is(err, migrate.ErrCitusMismatch) || !errors.As(err, &cm) || !cm.Option || cm.Citus ||
		cm.Distributed || cm.Schema != schema || !strings.Contains(err.Error(), "no Citus extension: unset it") {
		t.Fatalf("Check of Config.Citus on plain PostgreSQL: %v, want a *migrate.CitusMismatchError", err)
	}
}
