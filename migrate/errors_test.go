package migrate_test

import (
	"errors"
	"testing"

	"github.com/seckillkit/seckill/migrate"
)

// TestErrorText: every refusal names the schema, the component, the file
// and the fix or the figures, and matches its sentinel.
func TestErrorText(t *testing.T) {
	t.Parallel()
	server := errors.New(`ERROR: relation "shop.event_outbox" does not exist (SQLSTATE 42P01)`)
	for _, c := range []struct {
		err      error
		sentinel error
		want     string
	}{
		{&migrate.Error{Kind: migrate.ErrInvalidSchema, Schema: "1bad", Reason: "must start with a letter or _"}, migrate.ErrInvalidSchema,
			`migrate: invalid schema name "1bad": must start with a letter or _`},
		{&migrate.Error{Kind: migrate.ErrInvalidComponent, Component: "outbox", Reason: "no FS"}, migrate.ErrInvalidComponent,
			`migrate: component "outbox": no FS`},
		{&migrate.Error{Kind: migrate.ErrInvalidComponent, Component: "outbox", File: "002_x.up.sql", Reason: "no statement"}, migrate.ErrInvalidComponent,
			`migrate: component "outbox": file 002_x.up.sql: no statement`},
		{&migrate.Error{Kind: migrate.ErrChecksumMismatch, Schema: "shop", Component: "order", File: "001_init.up.sql", Version: 1,
			Current: "0123456789abcdef", Recorded: "fedcba98"}, migrate.ErrChecksumMismatch,
			`migrate: schema "shop" component "order": 001_init.up.sql (version 1) was edited after it was applied (checksum 0123456789ab, applied fedcba98)`},
		{&migrate.Error{Kind: migrate.ErrPending, Schema: "shop", Component: "inbox", Applied: 1, Latest: 2}, migrate.ErrPending,
			`migrate: schema "shop" component "inbox" at version 1, code expects 2`},
		{&migrate.NotMigratedError{Schema: "shop", Component: "outbox", Err: server}, migrate.ErrNotMigrated,
			`migrate: the outbox migrations are not applied to schema "shop": apply them with migrate.Apply(ctx, db, "shop", outbox.Migrations), or configure the schema they were applied to (` + server.Error() + `)`},
		{&migrate.CitusMismatchError{Schema: "shop", Component: "order", Distributed: true, Citus: true}, migrate.ErrCitusMismatch,
			`migrate: the order tables of schema "shop" are distributed by Citus, but Config.Citus is off: set it, or the order statements are split into subplans and their transactions commit with two phases across nodes`},
		{&migrate.CitusMismatchError{Schema: "shop", Component: "order", Option: true}, migrate.ErrCitusMismatch,
			`migrate: Config.Citus is set for the order tables of schema "shop", but the server has no Citus extension: unset it (its statement shapes cost more on a single PostgreSQL)`},
		{&migrate.CitusMismatchError{Schema: "shop", Component: "order", Option: true, Citus: true}, migrate.ErrCitusMismatch,
			`migrate: Config.Citus is set for the order tables of schema "shop", but the tables are not distributed by Citus (a local table of the coordinator): unset it (its statement shapes cost more on a single PostgreSQL)`},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
		if !errors.Is(c.err, c.sentinel) {
			t.Errorf("%v does not match %v", c.err, c.sentinel)
		}
	}
	if nm := (&migrate.NotMigratedError{Err: server}); !errors.Is(nm, server) {
		t.Error("a NotMigratedError does not unwrap to the server's error")
	}
}
