package pgtx_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/pgtx"
)

// TestQueryExecModes runs RunInTx — options applied in the BEGIN round
// trip (or, with DeferBegin, in the first statement's pipeline), a retried
// serialization failure, the transaction id read of ResolveCommit, a
// commit — through pools in the query exec modes where pgx does not learn
// parameter types from the server (exec, simple_protocol: what PgBouncer
// in transaction mode needs) or encodes from a cached description
// (cache_describe).
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	for _, mode := range pgtest.ExecModes {
		for _, deferBegin := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/DeferBegin=%v", mode, deferBegin), func(t *testing.T) {
				t.Parallel()
				execModeRun(t, mode, deferBegin)
			})
		}
	}
}

func execModeRun(t *testing.T, mode pgx.QueryExecMode, deferBegin bool) {
	b := setup(t)
	pool := pgtest.NewPool(t, pgtest.WithExecMode(mode))
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
