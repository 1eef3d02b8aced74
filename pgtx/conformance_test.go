package pgtx_test

// pgtx's conformance tests, run by internal/conformance: invalid and
// hostile options, and RunInTx in every pgx exec mode. (pgtx has no Store:
// its entry points are functions, its PgBouncer tests in
// pgbouncer_test.go and its fuzz targets in fuzz_test.go are about
// RunInTx's own behaviour and error classification.)

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/conformance"
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

// TestQueryExecModes runs RunInTx — options applied in the BEGIN round
// trip (or, with DeferBegin, in the first statement's pipeline), a retried
// serialization failure, the transaction id read of ResolveCommit, a
// commit — in every exec mode of conformance.ExecModes.
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	conformance.ExecModes(t, func(t *testing.T, pool *pgxpool.Pool) {
		for _, deferBegin := range []bool{false, true} {
			t.Run(fmt.Sprintf("DeferBegin=%v", deferBegin), func(t *testing.T) {
				t.Parallel()
				execModeRun(t, pool, deferBegin)
			})
		}
	})
}

func execModeRun(t *testing.T, pool *pgxpool.Pool, deferBegin bool) {
	b := setup(t)
	obs := &counter{}
	opts := pgtx.Options{IsoLevel: pgx.Serializable, LockTimeout: 75 * time.Millisecond,
		StatementTimeout: 1500 * time.Millisecond, ResolveCommit: true, BaseBackoff: time.Millisecond,
		Observer: obs.observer(), Name: "exec-mode", DeferBegin: deferBegin}
	runs := 0
	err := pgtx.RunInTx(b.ctx, pool, opts, func(tx pgx.Tx) error {
		runs++
		var iso, lt, st string
		if err := tx.QueryRow(b.ctx, `SELECT current_setting($1), current_setting('lock_timeout'),
					current_setting('statement_timeout')`, "transaction_isolation").Scan(&iso, &lt, &st); err != nil {
			return err
		}
		if iso != "serializable" || lt != "75ms" || st != "1500ms" {
			return fmt.Errorf("settings = %s, %s, %s", iso, lt, st)
		}
		if _, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES ($1, $2)`, runs, 7); err != nil {
			return err
		}
		if runs == 1 {
			return raise(b.ctx, tx, "40001")
		}
		return nil
	})
	if err != nil || runs != 2 {
		t.Fatalf("RunInTx = %v after %d runs, want success on the second", err, runs)
	}
	if obs.n(evRetry) != 1 {
		t.Fatalf("observed %d retries, want 1", obs.n(evRetry))
	}
	if second, all := b.count(t, "id = 2 AND v = 7"), b.count(t, "true"); second != 1 || all != 1 {
		t.Fatalf("rows: %d of the second attempt, %d in all; want only the second attempt's", second, all)
	}
}
