package pgtx_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/faultproxy"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/roundtrip"
	"github.com/seckillkit/seckill/pgtx"
)

var deferred = pgtx.Options{DeferBegin: true}

// countedPool returns a pool whose round trips c counts.
func countedPool(t *testing.T, c *roundtrip.Counter) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = c; cfg.MaxConns = 1 })
}

// allReleased waits until every connection of pool is back (a broken
// connection is destroyed asynchronously: it counts as acquired until
// closed) and fails after 10 seconds.
func allReleased(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); pool.Stat().AcquiredConns() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still acquired", pool.Stat().AcquiredConns())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With DeferBegin, BEGIN travels with the first statement: one round trip
// fewer per transaction, counted by a tracer (prepares included: each
// transaction runs twice and the second run is counted, when every
// statement is in pgx's statement cache).
func TestDeferBeginSavesTheBeginRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var rt roundtrip.Counter
	pool := countedPool(t, &rt)
	id := 0
	next := func() int { id++; return id }
	cases := []struct {
		name  string
		fn    func(tx pgx.Tx) error
		eager int64 // round trips without DeferBegin
	}{
		{"one batch", func(tx pgx.Tx) error {
			bt := &pgx.Batch{}
			bt.Queue(`INSERT INTO `+b.table+` VALUES ($1, 1)`, next())
			bt.Queue(`INSERT INTO `+b.table+` VALUES ($1, 1)`, next())
			return tx.SendBatch(b.ctx, bt).Close()
		}, 3},
		{"exec then query row", func(tx pgx.Tx) error {
			if _, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES ($1, 2)`, next()); err != nil {
				return err
			}
			var n int
			return tx.QueryRow(b.ctx, `SELECT count(*) FROM `+b.table+` WHERE v = $1`, 2).Scan(&n)
		}, 4},
		{"query row first", func(tx pgx.Tx) error {
			var n int
			if err := tx.QueryRow(b.ctx, `SELECT count(*) FROM `+b.table+` WHERE v = $1`, 3).Scan(&n); err != nil {
				return err
			}
			_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES ($1, 3)`, next())
			return err
		}, 4},
		{"nothing", func(pgx.Tx) error { return nil }, 2},
	}
	for _, c := range cases {
		for _, opts := range []pgtx.Options{{}, deferred} {
			for range 2 { // the first run fills the statement cache
				rt.Store(0)
				if err := pgtx.RunInTx(b.ctx, pool, opts, c.fn); err != nil {
					t.Fatalf("%s (DeferBegin %v): %v", c.name, opts.DeferBegin, err)
				}
			}
			want := c.eager
			if opts.DeferBegin {
				want = max(c.eager-1, 0)
				if c.name == "nothing" {
					want = 0 // no BEGIN and no COMMIT
				}
			}
			if got := rt.Load(); got != want {
				t.Errorf("%s (DeferBegin %v): %d round trips, want %d", c.name, opts.DeferBegin, got, want)
			}
		}
	}
	// Every write committed: 2 rows × 2 runs × 2 modes from the batch, and
	// 1 × 2 × 2 from each of the two single-insert cases.
	if n := b.count(t, "true"); n != 16 {
		t.Fatalf("%d rows committed, want 16", n)
	}
}

// Whatever fn's first call is, everything it does is one transaction: an
// error rolls all of it back, success commits all of it, and the
// connection goes back to the pool.
func TestDeferBeginEveryFirstCallIsInTheTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ins := `INSERT INTO ` + b.table + ` VALUES ($1, $2)`
	firsts := map[string]func(tx pgx.Tx, id int) error{
		"SendBatch": func(tx pgx.Tx, id int) error {
			bt := &pgx.Batch{}
			bt.Queue(ins, id, 0)
			return tx.SendBatch(b.ctx, bt).Close()
		},
		"SendBatch read by hand": func(tx pgx.Tx, id int) error {
			bt := &pgx.Batch{}
			bt.Queue(ins, id, 0)
			bt.Queue(`SELECT v FROM `+b.table+` WHERE id = $1`, id)
			br := tx.SendBatch(b.ctx, bt)
			if br.Tx() != nil {
				return errors.New("the batch of a transaction reports a transaction of its own")
			}
			tag, err := br.Exec()
			if err != nil || tag.String() != "INSERT 0 1" {
				return fmt.Errorf("first result %q, %v: want the INSERT's, not BEGIN's", tag, err)
			}
			var v int
			if err := br.QueryRow().Scan(&v); err != nil {
				return err
			}
			return br.Close()
		},
		"Exec with arguments": func(tx pgx.Tx, id int) error {
			_, err := tx.Exec(b.ctx, ins, id, 0)
			return err
		},
		"Exec with a pgx query option": func(tx pgx.Tx, id int) error {
			_, err := tx.Exec(b.ctx, ins, pgx.QueryExecModeSimpleProtocol, id, 0)
			return err
		},
		"Exec without arguments": func(tx pgx.Tx, id int) error {
			_, err := tx.Exec(b.ctx, fmt.Sprintf(`INSERT INTO %s VALUES (%d, 0)`, b.table, id))
			return err
		},
		"Query": func(tx pgx.Tx, id int) error {
			rows, err := tx.Query(b.ctx, ins+` RETURNING id`, id, 0)
			if err != nil {
				return err
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[int])
			if err != nil || len(got) != 1 || got[0] != id {
				return fmt.Errorf("returned %v, %v", got, err)
			}
			return nil
		},
		"QueryRow": func(tx pgx.Tx, id int) error {
			var got int
			if err := tx.QueryRow(b.ctx, ins+` RETURNING id`, id, 0).Scan(&got); err != nil || got != id {
				return fmt.Errorf("returned %d, %v", got, err)
			}
			return nil
		},
		"Prepare": func(tx pgx.Tx, id int) error {
			if _, err := tx.Prepare(b.ctx, "", ins); err != nil {
				return err
			}
			_, err := tx.Exec(b.ctx, ins, id, 0)
			return err
		},
		"CopyFrom": func(tx pgx.Tx, id int) error {
			_, err := tx.CopyFrom(b.ctx, pgx.Identifier{b.schema, "items"}, []string{"id", "v"}, pgx.CopyFromRows([][]any{{id, 0}}))
			return err
		},
		"Begin": func(tx pgx.Tx, id int) error {
			sp, err := tx.Begin(b.ctx)
			if err != nil {
				return err
			}
			if _, err := sp.Exec(b.ctx, ins, id, 0); err != nil {
				return err
			}
			return sp.Commit(b.ctx)
		},
		"Conn": func(tx pgx.Tx, id int) error {
			_, err := tx.Conn().Exec(b.ctx, ins, id, 0)
			return err
		},
		"LargeObjects": func(tx pgx.Tx, id int) error {
			lo := tx.LargeObjects()
			oid, err := lo.Create(b.ctx, 0)
			if err != nil {
				return err
			}
			_, err = tx.Exec(b.ctx, ins, id, int(oid))
			return err
		},
	}
	undo := errors.New("undo")
	id := 0
	for name, first := range firsts {
		id++
		err := pgtx.RunInTx(b.ctx, b.pool, deferred, func(tx pgx.Tx) error {
			if err := first(tx, id); err != nil {
				return fmt.Errorf("first call: %w", err)
			}
			// Later statements see the first one's write: same transaction.
			var n int
			if err := tx.QueryRow(b.ctx, `SELECT count(*) FROM `+b.table+` WHERE id = $1`, id).Scan(&n); err != nil || n != 1 {
				return fmt.Errorf("second statement sees %d rows (%v)", n, err)
			}
			return undo
		})
		if !errors.Is(err, undo) {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if n := b.count(t, fmt.Sprintf("id = %d", id)); n != 0 {
			t.Errorf("%s: the rolled-back transaction left %d rows", name, n)
		}
		if err := pgtx.RunInTx(b.ctx, b.pool, deferred, func(tx pgx.Tx) error { return first(tx, id) }); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if n := b.count(t, fmt.Sprintf("id = %d", id)); n != 1 {
			t.Errorf("%s: the committed transaction left %d rows, want 1", name, n)
		}
	}
	allReleased(t, b.pool)
}

// Options apply from the first statement on, and SET LOCAL ends with the
// transaction.
func TestDeferBeginAppliesOptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opts := pgtx.Options{DeferBegin: true, IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly,
		LockTimeout: 75 * time.Millisecond, StatementTimeout: 1500 * time.Millisecond}
	settings := `SELECT current_setting($1), current_setting('transaction_read_only'),
		current_setting('lock_timeout'), current_setting('statement_timeout')`
	check := func(iso, ro, lt, st string) error {
		if iso != "repeatable read" || ro != "on" || lt != "75ms" || st != "1500ms" {
			return fmt.Errorf("settings = %s, %s, %s, %s", iso, ro, lt, st)
		}
		return nil
	}
	err := pgtx.RunInTx(b.ctx, b.pool, opts, func(tx pgx.Tx) error {
		var iso, ro, lt, st string
		if err := tx.QueryRow(b.ctx, settings, "transaction_isolation").Scan(&iso, &ro, &lt, &st); err != nil {
			return err
		}
		return check(iso, ro, lt, st)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = pgtx.RunInTx(b.ctx, b.pool, opts, func(tx pgx.Tx) error {
		var iso, ro, lt, st string
		bt := &pgx.Batch{}
		bt.Queue(settings, "transaction_isolation").QueryRow(func(r pgx.Row) error { return r.Scan(&iso, &ro, &lt, &st) })
		if err := tx.SendBatch(b.ctx, bt).Close(); err != nil {
			return err
		}
		return check(iso, ro, lt, st)
	})
	if err != nil {
		t.Fatal(err)
	}
	// A read-only transaction refuses a write sent as the first statement.
	err = pgtx.RunInTx(b.ctx, b.pool, opts, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES ($1, 0)`, 1)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("write in a read-only transaction: %v", err)
	}
	var lt string
	if err := b.pool.QueryRow(b.ctx, `SHOW lock_timeout`).Scan(&lt); err != nil || lt != "0" {
		t.Fatalf("lock_timeout after the transaction = %q (%v), want the server default 0", lt, err)
	}
}

func TestDeferBeginRetriesSerializationFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writeSkewIsRetried(t, b, b.pool, deferred)
}

func TestDeferBeginRetriesDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deadlockIsRetried(t, b, b.pool, deferred)
}

// A *pgx.Conn works as db as well as a pool.
func TestDeferBeginOnConn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn := pgtest.Conn(t)
	err := pgtx.RunInTx(b.ctx, conn, deferred, func(tx pgx.Tx) error {
		bt := &pgx.Batch{}
		bt.Queue(`INSERT INTO `+b.table+` VALUES ($1, 0)`, 1)
		return tx.SendBatch(b.ctx, bt).Close()
	})
	if err != nil || b.count(t, "id = 1") != 1 {
		t.Fatalf("RunInTx on a conn: %v", err)
	}
	if conn.PgConn().TxStatus() != 'I' {
		t.Fatalf("connection left in transaction status %q", conn.PgConn().TxStatus())
	}
}

// The COMMIT of a deferred transaction is classified like any other: cut
// after the server ran it, the outcome is unknown (and it did commit);
// with ResolveCommit it is found committed.
func TestDeferBeginCommitOutcomeUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, resolve := range []bool{false, true} {
		pool, px := proxied(t)
		px.SetRule(cutCommitOnce(faultproxy.CutAfter))
		err := pgtx.RunInTx(b.ctx, pool, pgtx.Options{DeferBegin: true, ResolveCommit: resolve}, func(tx pgx.Tx) error {
			_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES ($1, 0)`, i)
			return err
		})
		switch {
		case !resolve && !errors.Is(err, pgtx.ErrCommitOutcomeUnknown):
			t.Fatalf("cut after COMMIT: %v, want ErrCommitOutcomeUnknown", err)
		case resolve && err != nil:
			t.Fatalf("cut after COMMIT, resolved: %v, want nil", err)
		}
		if n := b.count(t, fmt.Sprintf("id = %d", i)); n != 1 || px.Cuts() != 1 {
			t.Fatalf("%d rows, %d cuts: want 1 and 1 (the COMMIT reached the server)", n, px.Cuts())
		}
	}
}

// cutFirstBegin drops the connection that is about to send the first
// BEGIN, before the server sees it.
func cutFirstBegin() faultproxy.Rule {
	var done atomic.Bool
	return func(m faultproxy.Message) faultproxy.Action {
		if strings.HasPrefix(strings.ToLower(strings.TrimSpace(m.Query())), "begin") && done.CompareAndSwap(false, true) {
			return faultproxy.CutBefore
		}
		return faultproxy.Forward
	}
}

// A connection that breaks as BEGIN's pipeline is sent: fn sees the error,
// RunInTx reports it as not committed, nothing is written, and the broken
// connection does not go back into use.
func TestDeferBeginBrokenPipeline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, px := proxied(t)
	px.SetRule(cutFirstBegin())
	var fnErr error
	err := pgtx.RunInTx(b.ctx, pool, deferred, func(tx pgx.Tx) error {
		bt := &pgx.Batch{}
		bt.Queue(`INSERT INTO `+b.table+` VALUES ($1, 0)`, 1)
		fnErr = tx.SendBatch(b.ctx, bt).Close()
		return fnErr
	})
	if err == nil || fnErr == nil || !pgtx.Classify(err).NotCommitted || px.Cuts() != 1 {
		t.Fatalf("RunInTx = %v (fn saw %v, %d cuts), want a not-committed error", err, fnErr, px.Cuts())
	}
	if n := b.count(t, "id = 1"); n != 0 {
		t.Fatalf("%d rows written", n)
	}
	// The pool serves the next transaction on a sound connection.
	if err := pgtx.RunInTx(b.ctx, pool, deferred, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES ($1, 0)`, 2)
		return err
	}); err != nil || b.count(t, "id = 2") != 1 {
		t.Fatalf("next transaction: %v", err)
	}
	allReleased(t, pool)
}

// fn ignoring the error of a failed BEGIN pipeline still gets no commit.
func TestDeferBeginIgnoredBeginFailureIsNotCommitted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, px := proxied(t)
	px.SetRule(cutFirstBegin())
	err := pgtx.RunInTx(b.ctx, pool, deferred, func(tx pgx.Tx) error {
		bt := &pgx.Batch{}
		bt.Queue(`INSERT INTO `+b.table+` VALUES ($1, 0)`, 1)
		_ = tx.SendBatch(b.ctx, bt).Close() // a careless fn
		return nil
	})
	if err == nil || !pgtx.Classify(err).NotCommitted {
		t.Fatalf("RunInTx = %v, want the begin failure", err)
	}
}

// A panic in fn after the first statement rolls back and re-panics; the
// connection goes back to the pool.
func TestDeferBeginPanicRollsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want boom", p)
			}
		}()
		_ = pgtx.RunInTx(b.ctx, b.pool, deferred, func(tx pgx.Tx) error {
			if _, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES ($1, 0)`, 1); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if n := b.count(t, "id = 1"); n != 0 {
		t.Fatalf("%d rows after the panic", n)
	}
	allReleased(t, b.pool)
}

// An error of the first statement, sent behind BEGIN, reaches fn as pgx
// reports it and is classified as usual: a serialization failure raised
// in the first batch is retried, a unique violation is returned at once.
func TestDeferBeginFirstStatementErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	var obs counter
	opts := pgtx.Options{DeferBegin: true, Observer: obs.observer(), BaseBackoff: time.Millisecond}
	runs := 0
	err := pgtx.RunInTx(b.ctx, b.pool, opts, func(tx pgx.Tx) error {
		runs++
		bt := &pgx.Batch{}
		if runs == 1 {
			bt.Queue(`DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$`)
		}
		bt.Queue(`INSERT INTO `+b.table+` VALUES ($1, 0)`, 2)
		return tx.SendBatch(b.ctx, bt).Close()
	})
	if err != nil || runs != 2 || obs.n(evRetry) != 1 || b.count(t, "id = 2") != 1 {
		t.Fatalf("RunInTx = %v after %d runs, %d retries", err, runs, obs.n(evRetry))
	}

	runs = 0
	err = pgtx.RunInTx(b.ctx, b.pool, deferred, func(tx pgx.Tx) error {
		runs++
		_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES ($1, 0)`, 1)
		if _, ok := err.(*pgconn.PgError); !ok {
			return fmt.Errorf("first statement's error is %T, want *pgconn.PgError: %w", err, err)
		}
		return err
	})
	if c, ok := pgtx.UniqueViolationOf(err); !ok || c != "items_pkey" || runs != 1 {
		t.Fatalf("RunInTx = %v (constraint %q) after %d runs, want the unique violation once", err, c, runs)
	}
}

// beginCtxTracer records whether each BEGIN pgx sends carries ctxKey.
type beginCtxTracer struct{ withKey, without atomic.Int32 }

type ctxKey struct{}

func (c *beginCtxTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(strings.ToLower(d.SQL), "begin") {
		if ctx.Value(ctxKey{}) != nil {
			c.withKey.Add(1)
		} else {
			c.without.Add(1)
		}
	}
	return ctx
}

func (c *beginCtxTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Conn and LargeObjects take no context; as fn's first call they begin the
// transaction with RunInTx's context (a tracer sees its values), and when
// that context has ended they begin nothing and the error reaches fn.
func TestDeferBeginConnAndLargeObjectsUseRunInTxContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := &beginCtxTracer{}
	pool := pgtest.NewPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tr })
	ctx := context.WithValue(b.ctx, ctxKey{}, true)
	firsts := map[string]func(pgx.Tx) error{
		"Conn": func(tx pgx.Tx) error {
			if tx.Conn() == nil {
				return errors.New("Conn() = nil")
			}
			return nil
		},
		"LargeObjects": func(tx pgx.Tx) error {
			lo := tx.LargeObjects()
			_, err := lo.Create(b.ctx, 0)
			return err
		},
	}
	for name, first := range firsts {
		if err := pgtx.RunInTx(ctx, pool, deferred, first); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if w, wo := tr.withKey.Load(), tr.without.Load(); w != 1 || wo != 0 {
			t.Fatalf("%s: %d BEGINs with RunInTx's context, %d without; want 1 and 0", name, w, wo)
		}
		tr.withKey.Store(0)

		cctx, cancel := context.WithCancel(ctx)
		err := pgtx.RunInTx(cctx, pool, deferred, func(tx pgx.Tx) error {
			cancel()
			if err := first(tx); err == nil {
				return errors.New("began a transaction after RunInTx's context ended")
			}
			_, err := tx.Exec(b.ctx, `SELECT 1`)
			return err
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s after cancel: err = %v, want context.Canceled from the BEGIN", name, err)
		}
		if n := tr.withKey.Load() + tr.without.Load(); n != 0 {
			t.Fatalf("%s after cancel: %d BEGINs reached the tracer", name, n)
		}
	}
}

// TestDeferBeginConnectionLostBeforeReady: the connection breaks after
// the server answered the first statement, sent behind BEGIN in one
// pipeline, but before its ReadyForQuery. The statement reports the broken
// connection (Exec's error; Query's rows.Err once the rows are read),
// never success, and RunInTx returns that error: nothing committed.
func TestDeferBeginConnectionLostBeforeReady(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, query := range []bool{false, true} {
		pool, px := proxied(t)
		var executed, done atomic.Bool
		px.SetRule(func(m faultproxy.Message) faultproxy.Action {
			if m.Type == 'E' {
				executed.Store(true)
			}
			if m.Type == 'S' && executed.Load() && done.CompareAndSwap(false, true) {
				return faultproxy.CutBeforeReady
			}
			return faultproxy.Forward
		})
		var stmtErr error
		err := pgtx.RunInTx(b.ctx, pool, pgtx.Options{DeferBegin: true}, func(tx pgx.Tx) error {
			sql := `INSERT INTO ` + b.table + ` VALUES ($1, 0) RETURNING id`
			if query {
				rows, _ := tx.Query(b.ctx, sql, 700+i)
				for rows.Next() {
				}
				stmtErr = rows.Err()
			} else {
				_, stmtErr = tx.Exec(b.ctx, sql, 700+i)
			}
			return stmtErr
		})
		if px.Cuts() != 1 || stmtErr == nil || err == nil || errors.As(err, new(*pgtx.CommitError)) || !pgtx.Classify(err).NotCommitted {
			t.Fatalf("query %v: %d cuts, statement error %v, RunInTx %v; want the statement's error for the broken connection, not committed",
				query, px.Cuts(), stmtErr, err)
		}
		if n := b.count(t, fmt.Sprintf("id = %d", 700+i)); n != 0 {
			t.Fatalf("query %v: %d rows committed", query, n)
		}
	}
}
