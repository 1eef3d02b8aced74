package pgtx_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/pgtx"
)

// insertBatch queues one INSERT of (id, v) per id, in order.
func insertBatch(table string, v int, ids ...int) *pgx.Batch {
	b := &pgx.Batch{}
	for _, id := range ids {
		b.Queue(`INSERT INTO `+table+` VALUES ($1, $2)`, id, v)
	}
	return b
}

// onConn runs fn on a connection of pool and checks afterwards that the
// connection is idle (no transaction left open) and open.
func onConn(t *testing.T, ctx context.Context, pool *pgxpool.Pool, fn func(*pgx.Conn)) {
	t.Helper()
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	fn(c.Conn())
	if st := c.Conn().PgConn().TxStatus(); st != 'I' || c.Conn().IsClosed() {
		t.Fatalf("connection after RunBatch: tx status %q, closed %v; want idle and open", st, c.Conn().IsClosed())
	}
}

func TestRunBatchCommitsInOneRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var rt roundtrip.Counter
	pool := pgtest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 1; c.ConnConfig.Tracer = &rt })
	var obs counter
	opts := pgtx.Options{Observer: obs.observer(), LockTimeout: time.Second, IsoLevel: pgx.RepeatableRead}
	run := func(id int) (v int, iso, lockTimeout string) {
		batch := insertBatch(b.table, 7, id)
		batch.Queue(`SELECT v FROM `+b.table+` WHERE id = $1`, id).QueryRow(func(r pgx.Row) error { return r.Scan(&v) })
		batch.Queue(`SELECT current_setting('transaction_isolation'), current_setting('lock_timeout')`).
			QueryRow(func(r pgx.Row) error { return r.Scan(&iso, &lockTimeout) })
		if err := pgtx.RunBatch(b.ctx, pool, opts, batch); err != nil {
			t.Fatal(err)
		}
		return v, iso, lockTimeout
	}
	run(1) // warms pgx's statement cache (a first batch may prepare first)
	rt.Store(0)
	v, iso, lt := run(2)
	if n := rt.Load(); n != 1 {
		t.Fatalf("round trips of a warm RunBatch = %d, want 1", n)
	}
	if v != 7 || iso != "repeatable read" || lt != "1s" {
		t.Fatalf("read v=%d isolation=%q lock_timeout=%q in the batch, want 7, repeatable read, 1s", v, iso, lt)
	}
	if n := b.count(t, "id IN (1, 2)"); n != 2 {
		t.Fatalf("%d rows committed, want 2", n)
	}
	if obs.n(evCommitted) != 2 || obs.n(evAttempt) != 2 {
		t.Fatalf("observer counts %v, want 2 attempts and 2 commits", obs.counts)
	}
}

// TestRunBatchAbortsAtEveryPosition makes each statement of a three-statement
// batch raise in turn (a unique violation against a row committed before):
// nothing of the batch commits, the error names the statement, and the
// connection is left idle for its next user.
func TestRunBatchAbortsAtEveryPosition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for p := range 3 {
		ids := []int{10*p + 1, 10*p + 2, 10*p + 3}
		if _, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES ($1, -1)`, ids[p]); err != nil {
			t.Fatal(err)
		}
		onConn(t, b.ctx, b.pool, func(c *pgx.Conn) {
			var obs counter
			err := pgtx.RunBatch(b.ctx, c, pgtx.Options{Observer: obs.observer()}, insertBatch(b.table, 1, ids...))
			var se *pgtx.StatementError
			if !errors.As(err, &se) || se.Index != p {
				t.Fatalf("position %d: err = %v, want a *StatementError at %d", p, err, p)
			}
			if name, ok := pgtx.UniqueViolationOf(err); !ok || name != "items_pkey" {
				t.Fatalf("position %d: UniqueViolation = %q, %v; want items_pkey", p, name, ok)
			}
			if !pgtx.Classify(err).NotCommitted || pgtx.Classify(err).Retryable || obs.n(evAttempt) != 1 {
				t.Fatalf("position %d: NotCommitted %v, Retryable %v, attempts %d; want true, false, 1",
					p, pgtx.Classify(err).NotCommitted, pgtx.Classify(err).Retryable, obs.n(evAttempt))
			}
		})
		if n := b.count(t, fmt.Sprintf("id BETWEEN %d AND %d AND v = 1", 10*p+1, 10*p+3)); n != 0 {
			t.Fatalf("position %d: %d rows of the aborted batch committed", p, n)
		}
	}
}

// TestRunBatchZeroRowsMustRaise shows the pattern for a condition that would
// otherwise be a zero-row outcome: the statement divides by the number of
// rows it affected, so zero rows raise and abort the batch before COMMIT.
func TestRunBatchZeroRowsMustRaise(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 1)`); err != nil {
		t.Fatal(err)
	}
	take := func(id int) error {
		batch := &pgx.Batch{}
		batch.Queue(`WITH u AS (UPDATE ` + b.table + ` SET v = v - 1 WHERE id = 1 AND v >= 1 RETURNING 1)
			SELECT 1 / (SELECT count(*) FROM u)::int`)
		batch.Queue(`INSERT INTO `+b.table+` VALUES ($1, 0)`, id)
		return pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, batch)
	}
	if err := take(100); err != nil {
		t.Fatal(err)
	}
	err := take(101) // the last unit is gone: the UPDATE matches zero rows
	var se *pgtx.StatementError
	var pgErr *pgconn.PgError
	if !errors.As(err, &se) || se.Index != 0 || !errors.As(err, &pgErr) || pgErr.Code != "22012" {
		t.Fatalf("err = %v, want a *StatementError at 0 with division_by_zero", err)
	}
	if n := b.count(t, "id = 101"); n != 0 {
		t.Fatalf("the sold-out batch committed its INSERT")
	}
}

// TestRunBatchRetriesSerializationFailure: the first attempt's statement
// raises 40001 (a sequence, not rolled back, counts the attempts); the
// batch is sent again and commits once.
func TestRunBatchRetriesSerializationFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seq := pgx.Identifier{b.schema, "attempts"}.Sanitize()
	fn := pgx.Identifier{b.schema, "flaky"}.Sanitize()
	if _, err := b.pool.Exec(b.ctx, `CREATE SEQUENCE `+seq+`;
		CREATE FUNCTION `+fn+`() RETURNS void LANGUAGE plpgsql AS $$
		BEGIN IF nextval('`+seq+`') < 3 THEN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END IF; END $$`); err != nil {
		t.Fatal(err)
	}
	var obs counter
	batch := insertBatch(b.table, 1, 1)
	batch.Queue(`SELECT ` + fn + `()`)
	if err := pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{Observer: obs.observer(), BaseBackoff: time.Millisecond}, batch); err != nil {
		t.Fatal(err)
	}
	if obs.n(evRetry) != 2 || obs.n(evCommitted) != 1 || b.count(t, "id = 1") != 1 {
		t.Fatalf("retries %d, commits %d, rows %d; want 2, 1, 1", obs.n(evRetry), obs.n(evCommitted), b.count(t, "id = 1"))
	}

	// Exhausted: every attempt raises.
	batch = &pgx.Batch{}
	batch.Queue(`DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40P01'; END $$`)
	err := pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{MaxAttempts: 2, BaseBackoff: time.Millisecond}, batch)
	if n, ok := pgtx.AttemptsOf(err); !ok || n != 2 || !errors.Is(err, pgtx.ErrTooManyAttempts) || !pgtx.Classify(err).Deadlock {
		t.Fatalf("err = %v, want ErrTooManyAttempts after 2 deadlocks", err)
	}
}

func TestRunBatchInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	for name, call := range map[string]func() error{
		"nil db":      func() error { return pgtx.RunBatch(b.ctx, nil, pgtx.Options{}, insertBatch(b.table, 1, 1)) },
		"a pgx.Tx":    func() error { return pgtx.RunBatch(b.ctx, tx, pgtx.Options{}, insertBatch(b.table, 1, 1)) },
		"nil batch":   func() error { return pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, nil) },
		"empty batch": func() error { return pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, &pgx.Batch{}) },
		"bad options": func() error {
			return pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{MaxAttempts: -1}, insertBatch(b.table, 1, 1))
		},
		"bad isolation": func() error {
			return pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{IsoLevel: "chaos"}, insertBatch(b.table, 1, 1))
		},
	} {
		if err := call(); !errors.Is(err, pgtx.ErrInvalidOptions) {
			t.Errorf("%s: err = %v, want ErrInvalidOptions", name, err)
		}
	}
	if n := b.count(t, "true"); n != 0 {
		t.Fatalf("invalid calls wrote %d rows", n)
	}
}

// TestRunBatchCallbackError: a callback's own error cannot stop the COMMIT
// already sent; it is reported as a *ResultError and Classify says committed.
func TestRunBatchCallbackError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	errMine := errors.New("mine")
	batch := insertBatch(b.table, 1, 1)
	batch.QueuedQueries[0].Exec(func(pgconn.CommandTag) error { return errMine })
	var later int
	batch.Queue(`SELECT v FROM `+b.table+` WHERE id = $1`, 1).QueryRow(func(r pgx.Row) error { return r.Scan(&later) })
	err := pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, batch)
	var re *pgtx.ResultError
	if !errors.As(err, &re) || re.Index != 0 || !errors.Is(err, errMine) || pgtx.Classify(err).NotCommitted {
		t.Fatalf("err = %v (NotCommitted %v), want a *ResultError at 0 wrapping errMine, committed", err, pgtx.Classify(err).NotCommitted)
	}
	if later != 1 || b.count(t, "id = 1") != 1 {
		t.Fatalf("later callback read %d, rows %d; want 1 and 1", later, b.count(t, "id = 1"))
	}
}

// TestRunBatchQueryRowScanError: a QueryRow callback whose Scan fails on
// the client (a text column scanned into an int) is the callback's own
// error like an Exec callback's: the transaction committed, so RunBatch
// returns a *ResultError, never an unknown outcome, with or without
// ResolveCommit, and the later callbacks still read their results.
func TestRunBatchQueryRowScanError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, opts := range []pgtx.Options{{}, {ResolveCommit: true}} {
		id := 10 + i
		batch := &pgx.Batch{}
		var v int
		batch.Queue(`INSERT INTO `+b.table+` VALUES ($1, 7) RETURNING 'note-' || v`, id).
			QueryRow(func(r pgx.Row) error { return r.Scan(&v) })
		// A Query callback failing the same way, after it: the first
		// callback error is the one reported.
		batch.Queue(`SELECT 'x' FROM generate_series(1, 3)`).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var n int
				if err := rows.Scan(&n); err != nil {
					return err
				}
			}
			return rows.Err()
		})
		var later int
		batch.Queue(`SELECT v FROM `+b.table+` WHERE id = $1`, id).QueryRow(func(r pgx.Row) error { return r.Scan(&later) })
		err := pgtx.RunBatch(b.ctx, b.pool, opts, batch)
		var re *pgtx.ResultError
		if !errors.As(err, &re) || re.Index != 0 || pgtx.Classify(err).OutcomeUnknown || pgtx.Classify(err).NotCommitted {
			t.Fatalf("ResolveCommit %v: err = %v (unknown %v), want a *ResultError at 0, committed",
				opts.ResolveCommit, err, pgtx.Classify(err).OutcomeUnknown)
		}
		if later != 7 || b.count(t, fmt.Sprintf("id = %d", id)) != 1 {
			t.Fatalf("ResolveCommit %v: later callback read %d, rows %d; want 7 and 1", opts.ResolveCommit, later, b.count(t, fmt.Sprintf("id = %d", id)))
		}
	}
}

// armedSync returns a rule that, once armed, handles the next Sync with
// act (after waiting for ready, when set) and then disarms.
func armedSync(armed *atomic.Bool, act faultproxy.Action, ready func()) faultproxy.Rule {
	return func(m faultproxy.Message) faultproxy.Action {
		if m.Type != 'S' || !armed.CompareAndSwap(true, false) {
			return faultproxy.Forward
		}
		if ready != nil {
			ready()
		}
		return act
	}
}

func TestRunBatchCutBeforeSendIsNotCommitted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, px := proxied(t)
	var armed atomic.Bool
	px.SetRule(func(m faultproxy.Message) faultproxy.Action {
		if m.Type == 'B' && armed.CompareAndSwap(true, false) {
			return faultproxy.CutBefore
		}
		return faultproxy.Forward
	})
	// A closed connection: nothing leaves the client.
	c, err := pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn := c.Hijack()
	_ = conn.Close(b.ctx)
	err = pgtx.RunBatch(b.ctx, conn, pgtx.Options{}, insertBatch(b.table, 1, 1))
	if err == nil || !pgtx.Classify(err).NotCommitted || !errors.Is(err, pgconn.ErrConnClosed) {
		t.Fatalf("closed connection: err = %v, want a not-committed conn-closed error", err)
	}
	// The proxy drops the batch before the server sees it. The client
	// wrote it, so for the client the outcome is unknown; with
	// ResolveCommit the transaction id never arrived, so it stays unknown.
	c, err = pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	armed.Store(true)
	err = pgtx.RunBatch(b.ctx, c.Conn(), pgtx.Options{ResolveCommit: true, ResolveDB: b.pool}, insertBatch(b.table, 1, 2))
	var ce *pgtx.CommitError
	if !errors.Is(err, pgtx.ErrCommitOutcomeUnknown) || !errors.As(err, &ce) || ce.Resolution != "the transaction id never arrived" {
		t.Fatalf("cut before the server: err = %v, want unknown without a transaction id", err)
	}
	if n := b.count(t, "id IN (1, 2)"); n != 0 {
		t.Fatalf("%d rows committed after cuts before the batch", n)
	}
}

func TestRunBatchCutAfterSendIsUnknownThenResolved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, px := proxied(t)
	var armed atomic.Bool
	// pgx prepares a batch's statements in a round trip of their own the
	// first time a connection sees them: each run gets a connection warmed
	// with the batch's shape.
	warm := func(opts pgtx.Options) *pgx.Conn {
		c, err := pool.Acquire(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Release)
		if err := pgtx.RunBatch(b.ctx, c.Conn(), opts, insertBatch(b.table, 0, -1)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.pool.Exec(b.ctx, `DELETE FROM `+b.table); err != nil {
			t.Fatal(err)
		}
		return c.Conn()
	}

	// The whole batch reaches the server, the answer never comes back.
	var obs counter
	opts := pgtx.Options{Observer: obs.observer()}
	conn := warm(opts)
	px.SetRule(armedSync(&armed, faultproxy.CutAfter, nil))
	armed.Store(true)
	err := pgtx.RunBatch(b.ctx, conn, opts, insertBatch(b.table, 1, 1))
	var ce *pgtx.CommitError
	if !errors.Is(err, pgtx.ErrCommitOutcomeUnknown) || !errors.As(err, &ce) || pgtx.Classify(err).NotCommitted {
		t.Fatalf("cut after send: err = %v, want ErrCommitOutcomeUnknown", err)
	}
	if obs.n(evAttempt) != 2 || obs.n(evCommitUnknown) != 1 || b.count(t, "id = 1") != 1 {
		t.Fatalf("attempts %d, unknown events %d, rows %d; want 2 (warm-up and run), 1, 1 (it committed, unseen)",
			obs.n(evAttempt), obs.n(evCommitUnknown), b.count(t, "id = 1"))
	}

	// With ResolveCommit the transaction id arrives before COMMIT runs; the
	// cut comes once the commit is visible, before its answer is read.
	seen := testwait.Context(t, b.ctx, testwait.Step) // the commit becomes visible within it
	committed := func() {
		for seen.Err() == nil {
			var n int
			if err := b.pool.QueryRow(seen, `SELECT count(*) FROM `+b.table+` WHERE id = 2`).Scan(&n); err == nil && n == 1 {
				// The id row the server flushed before COMMIT is on its
				// way through the proxy; let it reach the client before
				// the cut (the cut stops the forwarding at once).
				time.Sleep(200 * time.Millisecond)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var obs2 counter
	opts = pgtx.Options{Observer: obs2.observer(), ResolveCommit: true, ResolveDB: b.pool}
	conn = warm(opts)
	px.SetRule(armedSync(&armed, faultproxy.CutBefore, committed))
	armed.Store(true)
	if err := pgtx.RunBatch(b.ctx, conn, opts, insertBatch(b.table, 1, 2)); err != nil {
		t.Fatalf("resolution: err = %v, want nil (committed)", err)
	}
	if obs2.n(evCommitUnknown) != 1 || obs2.n(evResolved) != 1 || b.count(t, "id = 2") != 1 {
		t.Fatalf("unknown %d, resolved %d, rows %d; want 1, 1, 1", obs2.n(evCommitUnknown), obs2.n(evResolved), b.count(t, "id = 2"))
	}
}

func TestRunBatchModes(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, b bundle, pool *pgxpool.Pool) {
		opts := pgtx.Options{ResolveCommit: true, ResolveDB: b.pool, LockTimeout: time.Second}
		for i := range 3 {
			if err := pgtx.RunBatch(b.ctx, pool, opts, insertBatch(b.table, 1, 2*i+1, 2*i+2)); err != nil {
				t.Fatal(err)
			}
			err := pgtx.RunBatch(b.ctx, pool, opts, insertBatch(b.table, 5, 100+i, 2*i+1))
			var se *pgtx.StatementError
			if !errors.As(err, &se) || se.Index != 1 {
				t.Fatalf("duplicate at 1: err = %v, want a *StatementError at 1", err)
			}
		}
		if n, m := b.count(t, "v = 1"), b.count(t, "v = 5"); n != 6 || m != 0 {
			t.Fatalf("rows: %d committed, %d of aborted batches; want 6, 0", n, m)
		}
	}
	for _, mode := range append([]pgx.QueryExecMode{pgx.QueryExecModeCacheStatement}, pgtest.ExecModes...) {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			run(t, b, pgtest.NewPool(t, pgtest.WithExecMode(mode)))
		})
	}
	t.Run("PgBouncer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		run(t, b, pgtest.PgBouncerPool(t, func(c *pgxpool.Config) { c.MaxConns = 2 }))
	})
}

// pair is a pgx.RowScanner: it decodes a whole row itself.
type pair struct {
	id, v   int
	scanned bool
}

func (p *pair) ScanRow(rows pgx.Rows) error {
	p.scanned = true
	return rows.Scan(&p.id, &p.v)
}

// TestRunBatchCallbackRowScanner: a callback that scans its row into one
// pgx.RowScanner reads it through the scanner's ScanRow, as pgx's own
// QueryRow and Rows.Scan do, in both QueryRow and Query callbacks.
func TestRunBatchCallbackRowScanner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var one, each pair
	batch := insertBatch(b.table, 3, 21)
	batch.Queue(`SELECT id, v FROM `+b.table+` WHERE id = $1`, 21).QueryRow(func(r pgx.Row) error { return r.Scan(&one) })
	batch.Queue(`SELECT id, v FROM `+b.table+` WHERE id = $1`, 21).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&each); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err := pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, batch); err != nil {
		t.Fatal(err)
	}
	for _, p := range []pair{one, each} {
		if !p.scanned || p.id != 21 || p.v != 3 {
			t.Fatalf("row scanner %+v; want ScanRow called with (21, 3)", p)
		}
	}
}

// TestRunBatchCutRunsNoLaterCallback: when the connection breaks after the
// batch left, the callback of the statement being read sees the break, and
// the callbacks of the statements after it are never run: their results
// never arrived. The first statement's rows outgrow the server's output
// buffer, so the client is reading them when the connection is cut.
func TestRunBatchCutRunsNoLaterCallback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, px := proxied(t)
	var calls []int
	var firstErr error
	reading := make(chan struct{}, 1) // the first callback has a row
	batch := func(v int, ids ...int) *pgx.Batch {
		nb := &pgx.Batch{}
		nb.Queue(`SELECT g, repeat('x', 100) FROM generate_series(1, 5000) AS g`).Query(func(rows pgx.Rows) error {
			calls = append(calls, 0)
			for rows.Next() {
				select {
				case reading <- struct{}{}:
				default:
				}
			}
			firstErr = rows.Err()
			return rows.Err()
		})
		for i, id := range ids {
			nb.Queue(`INSERT INTO `+b.table+` VALUES ($1, $2) RETURNING id`, id, v).Query(func(rows pgx.Rows) error {
				calls = append(calls, i+1)
				for rows.Next() {
				}
				return rows.Err()
			})
		}
		return nb
	}
	c, err := pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	// Warm the connection with the batch's shape (pgx prepares new
	// statements in a round trip of their own).
	if err := pgtx.RunBatch(b.ctx, c.Conn(), pgtx.Options{}, batch(0, -1, -2)); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 3 || firstErr != nil {
		t.Fatalf("warm-up: callbacks %v (first saw %v); want all three", calls, firstErr)
	}
	calls = nil
	<-reading
	// The cut: the Sync is held until the client reads the first rows, then
	// dropped with the connection.
	wait := testwait.Context(t, b.ctx, testwait.Step)
	var armed atomic.Bool
	px.SetRule(armedSync(&armed, faultproxy.CutBefore, func() {
		select {
		case <-reading:
		case <-wait.Done():
		}
	}))
	armed.Store(true)
	err = pgtx.RunBatch(b.ctx, c.Conn(), pgtx.Options{}, batch(1, 1, 2))
	if !errors.Is(err, pgtx.ErrCommitOutcomeUnknown) {
		t.Fatalf("cut while reading: err = %v, want ErrCommitOutcomeUnknown", err)
	}
	if wait.Err() != nil {
		t.Fatal("the first callback never read a row")
	}
	if len(calls) != 1 || calls[0] != 0 || firstErr == nil {
		t.Fatalf("callbacks run %v (first saw %v); want only the first, seeing the break", calls, firstErr)
	}
}

// TestRunBatchRefusesTransactionControl: a statement of the caller's batch
// that would end RunBatch's transaction before its COMMIT is refused with
// ErrInvalidOptions, nothing sent. The server would run such a batch
// without an error: after the caller's ROLLBACK the later statements run
// in a transaction of their own, RunBatch's COMMIT answers COMMIT (with a
// warning), and the first statements' work is gone — shown here on the
// same batch sent by hand. ROLLBACK TO a savepoint keeps the transaction
// and commits.
func TestRunBatchRefusesTransactionControl(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var rt roundtrip.Counter
	pool := pgtest.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = &rt })

	// What the check prevents: BEGIN, insert 1, ROLLBACK, insert 2, COMMIT.
	raw := insertBatch(b.table, 1, 1)
	raw.Queue(`ROLLBACK`)
	raw.Queue(`INSERT INTO ` + b.table + ` VALUES (2, 1)`)
	raw.Queue(`COMMIT`)
	raw.QueuedQueries = append([]*pgx.QueuedQuery{{SQL: `BEGIN`}}, raw.QueuedQueries...)
	if err := b.pool.SendBatch(b.ctx, raw).Close(); err != nil {
		t.Fatalf("the batch sent by hand: %v, want no error", err)
	}
	if n1, n2 := b.count(t, "id = 1"), b.count(t, "id = 2"); n1 != 0 || n2 != 1 {
		t.Fatalf("by hand: rows 1 and 2 = %d, %d; want 0 (rolled back), 1 (committed alone)", n1, n2)
	}

	for i, stmt := range []string{`ROLLBACK`, `commit`, `END`, `ABORT`, `COMMIT AND CHAIN`, `PREPARE TRANSACTION 'pgtx_test'`,
		`/* done */ ROLLBACK`, `SELECT 1; ROLLBACK`} {
		for pos := range 3 {
			id := 100 + 10*i + pos
			batch := insertBatch(b.table, 2, id, id+1000)
			batch.QueuedQueries = slices.Insert(batch.QueuedQueries, pos, &pgx.QueuedQuery{SQL: stmt})
			rt.Store(0)
			err := pgtx.RunBatch(b.ctx, pool, pgtx.Options{}, batch)
			if !errors.Is(err, pgtx.ErrInvalidOptions) || !strings.Contains(err.Error(), fmt.Sprintf("statement %d of the batch is", pos)) {
				t.Fatalf("%q at %d: err = %v; want ErrInvalidOptions naming statement %d", stmt, pos, err, pos)
			}
			if n := rt.Load(); n != 0 {
				t.Fatalf("%q: %d round trips, want none: nothing is sent", stmt, n)
			}
		}
	}
	if n := b.count(t, "v = 2"); n != 0 {
		t.Fatalf("refused batches wrote %d rows", n)
	}

	keep := insertBatch(b.table, 3, 10)
	keep.Queue(`SAVEPOINT s`)
	keep.Queue(`INSERT INTO ` + b.table + ` VALUES (11, 3)`)
	keep.Queue(`ROLLBACK TO SAVEPOINT s`)
	keep.Queue(`INSERT INTO ` + b.table + ` VALUES (12, 3)`)
	if err := pgtx.RunBatch(b.ctx, pool, pgtx.Options{}, keep); err != nil {
		t.Fatal(err)
	}
	if n, m := b.count(t, "id IN (10, 12) AND v = 3"), b.count(t, "id = 11"); n != 2 || m != 0 {
		t.Fatalf("ROLLBACK TO: rows 10 and 12: %d, row 11: %d; want 2, 0", n, m)
	}
}
