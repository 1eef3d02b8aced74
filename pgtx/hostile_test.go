package pgtx_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/pgtx"
)

// TestEveryEntryPointRejectsInvalidInput covers what TestInvalidOptions
// does not: a nil fn, and isolation, access and deferrable modes that are
// not pgx's constants (they are strings that end up in the BEGIN text).
// Each is ErrInvalidOptions before a connection is used. The predicates
// and Backoff take any value (FuzzErrorClassification, FuzzBackoff).
func TestEveryEntryPointRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	if err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, nil); !errors.Is(err, pgtx.ErrInvalidOptions) {
		t.Errorf("nil fn: %v, want ErrInvalidOptions", err)
	}
	for _, o := range []pgtx.Options{
		{IsoLevel: "chaos"}, {AccessMode: "read sometimes"}, {DeferrableMode: "later"},
		{IsoLevel: "READ COMMITTED"}, // pgx's constants are lower case
	} {
		called := false
		err := pgtx.RunInTx(ctx, pool, o, func(pgx.Tx) error { called = true; return nil })
		if !errors.Is(err, pgtx.ErrInvalidOptions) || called {
			t.Errorf("RunInTx(%+v) = %v, called=%v; want ErrInvalidOptions", o, err, called)
		}
	}
}

// TestNoSQLInjection: pgtx's only strings that reach SQL text are the
// transaction modes; hostile ones are rejected (they were spliced into
// BEGIN, which runs through the simple protocol, so a "; statement" ran).
// Options.Name never reaches the server and is reported verbatim.
func TestNoSQLInjection(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	table := pgx.Identifier{schema, "victim"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()+`; CREATE TABLE `+table+` (id int)`); err != nil {
		t.Fatal(err)
	}
	drop := "; DROP TABLE " + table + "; --"
	for _, o := range []pgtx.Options{
		{IsoLevel: pgx.ReadCommitted + pgx.TxIsoLevel(drop)},
		{IsoLevel: pgx.ReadCommitted + pgx.TxIsoLevel(drop), LockTimeout: time.Second},
		{AccessMode: pgx.ReadWrite + pgx.TxAccessMode(drop)},
		{AccessMode: pgx.ReadWrite + pgx.TxAccessMode(drop), StatementTimeout: time.Second},
		{IsoLevel: pgx.Serializable, AccessMode: pgx.ReadOnly, DeferrableMode: pgx.Deferrable + pgx.TxDeferrableMode(drop)},
	} {
		err := pgtx.RunInTx(ctx, pool, o, func(pgx.Tx) error { return nil })
		if !errors.Is(err, pgtx.ErrInvalidOptions) {
			t.Errorf("RunInTx(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
	var ok bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil || !ok {
		t.Fatalf("the table was dropped through a transaction mode (%v)", err)
	}
	const name = `'; DROP TABLE victim; -- "x" $1`
	var got string
	obs := pgtx.Observer{TxEnd: func(_ context.Context, e pgtx.Event) { got = e.Name }}
	if err := pgtx.RunInTx(ctx, pool, pgtx.Options{Name: name, Observer: obs, LockTimeout: time.Second}, func(pgx.Tx) error { return nil }); err != nil || got != name {
		t.Errorf("Name: %q, %v", got, err)
	}
}
