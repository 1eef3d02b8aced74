package pgtx_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/faultproxy"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/pgtx"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// kind names what a test counts of the Observer's hooks.
type kind int

const (
	evAttempt       kind = iota + 1 // AttemptStart
	evRetry                         // AttemptEnd with Retry
	evCommitUnknown                 // AttemptEnd with CommitLost
	evResolved                      // AttemptEnd with CommitLost and a known outcome
	evCommitted                     // TxEnd, committed
	evFailed                        // TxEnd, not committed
)

// counter counts an Observer's hooks (see observer) by kind and keeps
// the events.
type counter struct {
	mu      sync.Mutex
	counts  map[kind]int
	hooks   []string // hook names in order
	attempt []pgtx.Event
	tx      []pgtx.Event
}

func (c *counter) add(hook string, ks ...kind) {
	if c.counts == nil {
		c.counts = map[kind]int{}
	}
	for _, k := range ks {
		c.counts[k]++
	}
	c.hooks = append(c.hooks, hook)
}

func (c *counter) TxStart(ctx context.Context, _ pgtx.Event) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add("tx_start")
	return ctx
}

func (c *counter) AttemptStart(ctx context.Context, _ pgtx.Event) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add("attempt_start", evAttempt)
	return ctx
}

func (c *counter) AttemptEnd(_ context.Context, e pgtx.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ks []kind
	if e.Retry {
		ks = append(ks, evRetry)
	}
	if e.CommitLost {
		ks = append(ks, evCommitUnknown)
		if !pgtx.Classify(e.Err).OutcomeUnknown {
			ks = append(ks, evResolved)
		}
	}
	c.add("attempt_end", ks...)
	c.attempt = append(c.attempt, e)
}

func (c *counter) TxEnd(_ context.Context, e pgtx.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch outcome := pgtx.Classify(e.Err); {
	case outcome.Committed:
		c.add("tx_end", evCommitted)
	case outcome.NotCommitted:
		c.add("tx_end", evFailed)
	default:
		c.add("tx_end")
	}
	c.tx = append(c.tx, e)
}

// observer is the pgtx.Observer of c's hooks.
func (c *counter) observer() pgtx.Observer {
	return pgtx.Observer{TxStart: c.TxStart, AttemptStart: c.AttemptStart, AttemptEnd: c.AttemptEnd, TxEnd: c.TxEnd}
}

func (c *counter) n(k kind) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[k]
}

type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	table  string // quoted schema-qualified table "items"
}

// setup creates a fresh schema with a table items(id int primary key, v int).
func setup(t testing.TB) bundle {
	t.Helper()
	ctx := pgtest.Context(t, testwait.Step) // every test takes seconds; a broken guard fails in 30 s
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	table := pgx.Identifier{schema, "items"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()+`;
		CREATE TABLE `+table+` (id int PRIMARY KEY, v int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return bundle{ctx: ctx, pool: pool, schema: schema, table: table}
}

func (b bundle) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+b.table+` WHERE `+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// raise runs a DO block that raises a real server error with SQLSTATE code.
func raise(ctx context.Context, tx pgx.Tx, code string) error {
	_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '`+code+`'; END $$`)
	return err
}

func TestRetriesRealSerializationFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writeSkewIsRetried(t, b, b.pool, pgtx.Options{})
}

// writeSkewIsRetried runs the classic write skew (two doctors on call, each
// transaction takes its doctor off call if the other is still on) under
// Serializable through pool with opts, and checks that RunInTx retried the
// refused transaction and both committed.
func writeSkewIsRetried(t *testing.T, b bundle, pool pgtx.TxBeginner, opts pgtx.Options) {
	t.Helper()
	// Two doctors on call; each transaction takes its doctor off call if
	// the other is still on: classic write skew, which Serializable
	// refuses for one of the two.
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 1), (2, 1)`); err != nil {
		t.Fatal(err)
	}
	var obs counter
	var barrier sync.WaitGroup
	barrier.Add(2)
	opts.IsoLevel, opts.Observer, opts.MaxAttempts = pgx.Serializable, obs.observer(), 5
	run := func(id int) error {
		first := true
		return pgtx.RunInTx(b.ctx, pool, opts,
			func(tx pgx.Tx) error {
				var onCall int
				if err := tx.QueryRow(b.ctx, `SELECT count(*) FROM `+b.table+` WHERE v = $1`, 1).Scan(&onCall); err != nil {
					return err
				}
				if first { // both read before either writes
					first = false
					barrier.Done()
					if !testwait.Within(&barrier, testwait.Step) {
						return errors.New("the other transaction never read")
					}
				}
				if onCall < 2 {
					return nil
				}
				_, err := tx.Exec(b.ctx, `UPDATE `+b.table+` SET v = 0 WHERE id = $1`, id)
				return err
			})
	}
	errs := make(chan error, 2)
	for id := 1; id <= 2; id++ {
		go func() { errs <- run(id) }()
	}
	for range 2 {
		if err := testwait.Recv(t, errs, "the transaction to return"); err != nil {
			t.Fatalf("RunInTx: %v", err)
		}
	}
	if got := b.count(t, "v = 1"); got != 1 {
		t.Fatalf("doctors on call = %d, want 1 (write skew must not commit)", got)
	}
	// At least one transaction was refused and ran again (Serializable may
	// refuse both on the first round); both ended committed.
	retries := obs.n(evRetry)
	if retries < 1 {
		t.Fatalf("retries = %d, want at least 1", retries)
	}
	if a, c := obs.n(evAttempt), obs.n(evCommitted); a != 2+retries || c != 2 {
		t.Fatalf("attempts = %d, commits = %d, want %d and 2", a, c, 2+retries)
	}
	for _, e := range obs.attempt {
		if e.Retry && !pgtx.Classify(e.Err).SerializationFailure {
			t.Fatalf("retry cause = %v, want serialization failure", e.Err)
		}
	}
}

func TestRetriesRealDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deadlockIsRetried(t, b, b.pool, pgtx.Options{})
}

// deadlockIsRetried makes two transactions lock two rows in opposite orders
// through pool with opts; the server kills one, RunInTx runs it again, both
// commit.
func deadlockIsRetried(t *testing.T, b bundle, pool pgtx.TxBeginner, opts pgtx.Options) {
	t.Helper()
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0), (2, 0)`); err != nil {
		t.Fatal(err)
	}
	var obs counter
	var barrier sync.WaitGroup
	barrier.Add(2)
	opts.Observer = obs.observer()
	run := func(firstID, secondID int) error {
		first := true
		return pgtx.RunInTx(b.ctx, pool, opts, func(tx pgx.Tx) error {
			if _, err := tx.Exec(b.ctx, `SELECT set_config('deadlock_timeout', $1, true)`, "50ms"); err != nil {
				return err
			}
			if _, err := tx.Exec(b.ctx, `UPDATE `+b.table+` SET v = v + 1 WHERE id = $1`, firstID); err != nil {
				return err
			}
			if first { // each holds its first row before taking the other's
				first = false
				barrier.Done()
				if !testwait.Within(&barrier, testwait.Step) {
					return errors.New("the other transaction never read")
				}
			}
			_, err := tx.Exec(b.ctx, `UPDATE `+b.table+` SET v = v + 1 WHERE id = $1`, secondID)
			return err
		})
	}
	errs := make(chan error, 2)
	go func() { errs <- run(1, 2) }()
	go func() { errs <- run(2, 1) }()
	for range 2 {
		if err := testwait.Recv(t, errs, "the transaction to return"); err != nil {
			t.Fatalf("RunInTx: %v", err)
		}
	}
	if got := b.count(t, "v = 2"); got != 2 {
		t.Fatalf("rows updated twice = %d, want 2 (both transactions committed once)", got)
	}
	// At least one transaction was chosen as the deadlock victim and ran
	// again. Under load the victim's retry can take the contested row before
	// the other transaction wakes and deadlock once more, so more than one
	// retry is possible; every retry must be for a deadlock (checked below)
	// and both transactions end committed.
	retries := obs.n(evRetry)
	if retries < 1 || obs.n(evCommitted) != 2 || obs.n(evAttempt) != 2+retries {
		t.Fatalf("retries = %d, commits = %d, attempts = %d; want >= 1, 2, 2+retries",
			retries, obs.n(evCommitted), obs.n(evAttempt))
	}
	for _, e := range obs.attempt {
		if e.Retry && !pgtx.Classify(e.Err).Deadlock {
			t.Fatalf("retry cause = %v, want deadlock", e.Err)
		}
	}
}

func TestAttemptsExhausted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var obs counter
	runs := 0
	err := pgtx.RunInTx(b.ctx, b.pool, pgtx.Options{MaxAttempts: 3, BaseBackoff: time.Millisecond, Observer: obs.observer()},
		func(tx pgx.Tx) error {
			runs++
			if _, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES ($1, 0)`, runs); err != nil {
				return err
			}
			return raise(b.ctx, tx, "40001")
		})
	if n, ok := pgtx.AttemptsOf(err); !errors.Is(err, pgtx.ErrTooManyAttempts) || !ok || n != 3 || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("err = %v, want ErrTooManyAttempts after 3 attempts", err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("err does not unwrap to the 40001 PgError: %v", err)
	}
	if !strings.Contains(err.Error(), "3 attempts") {
		t.Fatalf("message %q does not say how many attempts ran", err)
	}
	if runs != 3 || obs.n(evRetry) != 2 || obs.n(evFailed) != 1 {
		t.Fatalf("runs=%d retries=%d failed=%d, want 3, 2, 1", runs, obs.n(evRetry), obs.n(evFailed))
	}
	if n := b.count(t, "true"); n != 0 {
		t.Fatalf("%d rows committed by failed attempts", n)
	}
}

func TestContextCancelledDuringBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	runs := 0
	obs := pgtx.Observer{AttemptEnd: func(_ context.Context, e pgtx.Event) {
		if e.Retry {
			cancel() // the caller gives up while RunInTx waits
		}
	}}
	err := pgtx.RunInTx(ctx, b.pool, pgtx.Options{BaseBackoff: time.Hour, MaxBackoff: time.Hour, Observer: obs},
		func(tx pgx.Tx) error {
			runs++
			return raise(ctx, tx, "40P01")
		})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if !pgtx.Classify(err).Deadlock {
		t.Fatalf("err = %v, want it to also carry the last cause (40P01)", err)
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times after cancellation, want 1", runs)
	}
}

func TestNonRetryableErrorsReturnedAsIs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	var obs counter
	err := pgtx.RunInTx(b.ctx, b.pool, pgtx.Options{Observer: obs.observer()}, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`)
		return fmt.Errorf("insert: %w", err)
	})
	constraint, ok := pgtx.UniqueViolationOf(err)
	if !ok || constraint != "items_pkey" {
		t.Fatalf("UniqueViolation(%v) = %q, %v; want items_pkey", err, constraint, ok)
	}
	if obs.n(evAttempt) != 1 || obs.n(evRetry) != 0 {
		t.Fatalf("attempts=%d retries=%d, want 1 and 0", obs.n(evAttempt), obs.n(evRetry))
	}
	if pgtx.Classify(err).Retryable || pgtx.Classify(err).OutcomeUnknown || !pgtx.Classify(err).NotCommitted {
		t.Fatalf("classification of %v is wrong", err)
	}

	// 40003 (statement_completion_unknown) is in the same class as 40001 but must not be retried.
	runs := 0
	err = pgtx.RunInTx(b.ctx, b.pool, pgtx.Options{}, func(tx pgx.Tx) error { runs++; return raise(b.ctx, tx, "40003") })
	if runs != 1 || pgtx.Classify(err).Retryable {
		t.Fatalf("40003: runs = %d, Retryable = %v; want 1, false", runs, pgtx.Classify(err).Retryable)
	}

	// An application error comes back unchanged.
	sentinel := errors.New("business rule")
	if err := pgtx.RunInTx(b.ctx, b.pool, pgtx.Options{}, func(pgx.Tx) error { return sentinel }); err != sentinel {
		t.Fatalf("err = %v, want the sentinel itself", err)
	}
}

func TestPanicRollsBackAndRepanics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := pgtest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want boom", p)
			}
		}()
		_ = pgtx.RunInTx(b.ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`); err != nil {
				return err
			}
			panic("boom")
		})
		t.Fatal("RunInTx returned instead of panicking")
	}()
	if n := b.count(t, "true"); n != 0 {
		t.Fatalf("panicking transaction left %d rows", n)
	}
	// The only connection went back to the pool, idle and usable.
	if err := pgtx.RunInTx(b.ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (2, 0)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRollbackSurvivesCancelledContext: fn cancels the caller's ctx while
// it holds a row lock and returns the ctx error; RunInTx's ROLLBACK still
// runs (on a context detached from the cancellation), so the connection is
// left idle and open — a single *pgx.Conn that nobody closes, and a pool's
// only connection, which the pool keeps — and the lock is released at
// once. Were ROLLBACK skipped, the *pgx.Conn would stay in its transaction
// holding the lock, and the pool would destroy its connection (a new
// backend would answer next).
func TestRollbackSurvivesCancelledContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Conn(t)
	pool := pgtest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	for _, tc := range []struct {
		name string
		db   pgtx.TxBeginner
		pid  func() uint32 // the backend that answers db after RunInTx
	}{
		{"conn", conn, func() uint32 { return conn.PgConn().PID() }},
		{"pool", pool, func() uint32 {
			// Were ROLLBACK skipped, the only connection would never come
			// back to the pool.
			ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
			defer cancel()
			c, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatalf("pool: the connection did not come back after RunInTx: %v", err)
			}
			defer c.Release()
			return c.Conn().PgConn().PID()
		}},
	} {
		ctx, cancel := context.WithCancel(b.ctx)
		var pid uint32
		err := pgtx.RunInTx(ctx, tc.db, pgtx.Options{}, func(tx pgx.Tx) error {
			pid = tx.Conn().PgConn().PID()
			if _, err := tx.Exec(ctx, `SELECT * FROM `+b.table+` WHERE id = 1 FOR UPDATE`); err != nil {
				return err
			}
			cancel()
			return ctx.Err()
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: err = %v", tc.name, err)
		}
		if tc.name == "conn" {
			if conn.IsClosed() || conn.PgConn().TxStatus() != 'I' {
				t.Fatalf("conn: closed %v, transaction status %q after RunInTx, want open and idle: ROLLBACK did not run", conn.IsClosed(), conn.PgConn().TxStatus())
			}
		}
		if got := tc.pid(); got != pid {
			t.Fatalf("%s: backend %d answers after RunInTx, want the same %d: the connection was dropped instead of rolled back", tc.name, got, pid)
		}
		// The row lock is gone: NOWAIT succeeds.
		if _, err := b.pool.Exec(b.ctx, `SELECT * FROM `+b.table+` WHERE id = 1 FOR UPDATE NOWAIT`); err != nil {
			t.Fatalf("%s: row still locked after the cancelled transaction: %v", tc.name, err)
		}
	}
}

func TestOptionsAppliedWithSetLocal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	opts := pgtx.Options{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly, LockTimeout: 75 * time.Millisecond, StatementTimeout: 1500 * time.Millisecond}
	err := pgtx.RunInTx(b.ctx, b.pool, opts, func(tx pgx.Tx) error {
		var iso, ro, lt, st string
		if err := tx.QueryRow(b.ctx, `SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only'),
			current_setting('lock_timeout'), current_setting('statement_timeout')`).Scan(&iso, &ro, &lt, &st); err != nil {
			return err
		}
		if iso != "repeatable read" || ro != "on" || lt != "75ms" || st != "1500ms" {
			return fmt.Errorf("settings = %s, %s, %s, %s", iso, ro, lt, st)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// SET LOCAL ends with the transaction.
	var lt string
	if err := b.pool.QueryRow(b.ctx, `SHOW lock_timeout`).Scan(&lt); err != nil || lt != "0" {
		t.Fatalf("lock_timeout after the transaction = %q (%v), want the server default 0", lt, err)
	}
	// Default: Read Committed.
	if err := pgtx.RunInTx(b.ctx, b.pool, pgtx.Options{}, func(tx pgx.Tx) error {
		var iso string
		if err := tx.QueryRow(b.ctx, `SHOW transaction_isolation`).Scan(&iso); err != nil {
			return err
		}
		if iso != "read committed" {
			return fmt.Errorf("isolation = %s", iso)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestLockAndStatementTimeoutsClassified(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	holder, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background())
	if _, err := holder.Exec(b.ctx, `UPDATE `+b.table+` SET v = 1 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	var obs counter
	err = pgtx.RunInTx(b.ctx, b.pool, pgtx.Options{LockTimeout: 20 * time.Millisecond, Observer: obs.observer()}, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `UPDATE `+b.table+` SET v = 2 WHERE id = 1`)
		return err
	})
	if !pgtx.Classify(err).LockTimeout || pgtx.Classify(err).Retryable || obs.n(evAttempt) != 1 {
		t.Fatalf("err = %v (attempts %d), want one attempt ending in a lock timeout", err, obs.n(evAttempt))
	}
	err = pgtx.RunInTx(b.ctx, b.pool, pgtx.Options{StatementTimeout: 20 * time.Millisecond}, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `SELECT pg_sleep(30)`)
		return err
	})
	if !pgtx.Classify(err).StatementTimeout || pgtx.Classify(err).LockTimeout {
		t.Fatalf("err = %v, want a statement timeout", err)
	}
}

func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	for _, o := range []pgtx.Options{
		{MaxAttempts: -1}, {BaseBackoff: -1}, {MaxBackoff: -1}, {LockTimeout: -time.Second},
		{StatementTimeout: -1}, {RollbackTimeout: -1}, {ResolveTimeout: -1},
	} {
		called := false
		err := pgtx.RunInTx(ctx, pool, o, func(pgx.Tx) error { called = true; return nil })
		if !errors.Is(err, pgtx.ErrInvalidOptions) || called {
			t.Errorf("RunInTx(%+v) = %v, called=%v; want ErrInvalidOptions before running fn", o, err, called)
		}
	}
	if err := pgtx.RunInTx(ctx, nil, pgtx.Options{}, func(pgx.Tx) error { return nil }); !errors.Is(err, pgtx.ErrInvalidOptions) {
		t.Errorf("nil db: %v", err)
	}
}

func TestBackoffBoundsAndJitter(t *testing.T) {
	t.Parallel()
	base, maxWait := 10*time.Millisecond, 200*time.Millisecond
	for attempt := 1; attempt <= 10; attempt++ {
		want := base << (attempt - 1)
		if want > maxWait {
			want = maxWait
		}
		seen := map[time.Duration]bool{}
		for range 200 {
			d := pgtx.Backoff(attempt, base, maxWait)
			if d < want/2 || d > want {
				t.Fatalf("Backoff(%d) = %v, want within [%v, %v]", attempt, d, want/2, want)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Fatalf("Backoff(%d) drew only %d distinct values in 200 draws: no jitter", attempt, len(seen))
		}
	}
}

// proxied returns a pool whose connections go through a fault proxy.
func proxied(t *testing.T) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	px, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	pool := pgtest.NewPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.Host = "127.0.0.1"
		c.ConnConfig.Port = uint16(px.Port())
		c.ConnConfig.TLSConfig = nil
		c.ConnConfig.Fallbacks = nil
		c.MaxConns = 4
	})
	return pool, px
}

// cutCommitOnce cuts the first COMMIT it sees with action.
func cutCommitOnce(action faultproxy.Action) faultproxy.Rule {
	var done atomic.Bool
	return func(m faultproxy.Message) faultproxy.Action {
		if strings.EqualFold(strings.TrimSpace(m.Query()), "commit") && done.CompareAndSwap(false, true) {
			return action
		}
		return faultproxy.Forward
	}
}

func TestCommitOutcomeUnknownWhenCutAfterCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, px := proxied(t)
	px.SetRule(cutCommitOnce(faultproxy.CutAfter))
	var obs counter
	runs := 0
	err := pgtx.RunInTx(b.ctx, pool, pgtx.Options{Observer: obs.observer()}, func(tx pgx.Tx) error {
		runs++
		_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`)
		return err
	})
	var ce *pgtx.CommitError
	if !errors.Is(err, pgtx.ErrCommitOutcomeUnknown) || !errors.As(err, &ce) || !ce.Unknown {
		t.Fatalf("err = %v, want ErrCommitOutcomeUnknown", err)
	}
	if pgtx.Classify(err).Retryable || pgtx.Classify(err).NotCommitted || runs != 1 {
		t.Fatalf("unknown commit was treated as retryable or not committed (runs=%d)", runs)
	}
	if obs.n(evCommitUnknown) != 1 || obs.n(evCommitted) != 0 {
		t.Fatalf("events: %v", obs.counts)
	}
	// The server did commit: this is exactly why the outcome must not be
	// reported as a failure.
	if n := b.count(t, "id = 1"); n != 1 {
		t.Fatalf("row count = %d, want 1: the COMMIT reached the server", n)
	}
	if px.Cuts() != 1 {
		t.Fatalf("proxy cut %d connections, want 1", px.Cuts())
	}
}

func TestResolveCommitFindsCommitted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, px := proxied(t)
	px.SetRule(cutCommitOnce(faultproxy.CutAfter))
	var obs counter
	err := pgtx.RunInTx(b.ctx, pool, pgtx.Options{ResolveCommit: true, Observer: obs.observer()}, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`)
		return err
	})
	if err != nil {
		t.Fatalf("RunInTx with resolution = %v, want nil (the transaction committed)", err)
	}
	if obs.n(evCommitUnknown) != 1 || obs.n(evResolved) != 1 {
		t.Fatalf("events: %v", obs.counts)
	}
	for _, e := range obs.attempt {
		if e.CommitLost && !pgtx.Classify(e.Err).Committed {
			t.Fatalf("resolution reported %+v, want committed", pgtx.Classify(e.Err))
		}
	}
	if n := b.count(t, "id = 1"); n != 1 {
		t.Fatalf("row count = %d, want 1", n)
	}
}

func TestResolveCommitFindsAborted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, px := proxied(t)
	// The COMMIT leaves the client but never reaches the server: the client
	// cannot know, the server aborts the transaction when the connection
	// drops.
	px.SetRule(cutCommitOnce(faultproxy.CutBefore))
	err := pgtx.RunInTx(b.ctx, pool, pgtx.Options{ResolveCommit: true}, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`)
		return err
	})
	var ce *pgtx.CommitError
	if !errors.As(err, &ce) || ce.Unknown || ce.Resolution != "aborted" || ce.XID == 0 {
		t.Fatalf("err = %v, want a resolved, not-committed *CommitError", err)
	}
	if !pgtx.Classify(err).NotCommitted || pgtx.Classify(err).OutcomeUnknown {
		t.Fatalf("classification of %v is wrong", err)
	}
	if n := b.count(t, "id = 1"); n != 0 {
		t.Fatalf("row count = %d, want 0", n)
	}
	// Without resolution the same cut is (rightly) unknown.
	px.SetRule(cutCommitOnce(faultproxy.CutBefore))
	err = pgtx.RunInTx(b.ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (2, 0)`)
		return err
	})
	if !pgtx.Classify(err).OutcomeUnknown {
		t.Fatalf("err = %v, want unknown without resolution", err)
	}
}

func TestCutBeforeCommitIsSentIsNotCommitted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, px := proxied(t)
	err := pgtx.RunInTx(b.ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`); err != nil {
			return err
		}
		px.CutAll()
		// The connection is gone; a careless fn that ignores the error
		// still reaches COMMIT, which then never leaves the client.
		_, _ = tx.Exec(b.ctx, `SELECT 1`)
		return nil
	})
	var ce *pgtx.CommitError
	if !errors.As(err, &ce) || ce.Unknown {
		t.Fatalf("err = %v, want a known not-committed *CommitError", err)
	}
	if !pgtx.Classify(err).NotCommitted || !pgconn.SafeToRetry(err) {
		t.Fatalf("err = %v should be safe to retry", err)
	}
	if n := b.count(t, "id = 1"); n != 0 {
		t.Fatalf("row count = %d, want 0", n)
	}
}

// A transaction whose only effect gets its transaction id at COMMIT (here a
// NOTIFY) has no id before COMMIT. When that COMMIT never reaches the
// server, resolution has nothing to ask about and must not call it
// committed: the outcome stays unknown. A read-only transaction without an
// id is the one case whose outcome provably does not matter.
func TestResolveCommitWithoutTransactionID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, px := proxied(t)
	px.SetRule(cutCommitOnce(faultproxy.CutBefore))
	err := pgtx.RunInTx(b.ctx, pool, pgtx.Options{ResolveCommit: true}, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `NOTIFY pgtx_resolve_test`)
		return err
	})
	var ce *pgtx.CommitError
	if !pgtx.Classify(err).OutcomeUnknown || !errors.As(err, &ce) || ce.XID != 0 || ce.Resolution != "no transaction id before COMMIT" {
		t.Fatalf("NOTIFY-only transaction whose COMMIT was lost: %v, want an unknown outcome", err)
	}

	px.SetRule(cutCommitOnce(faultproxy.CutBefore))
	err = pgtx.RunInTx(b.ctx, pool, pgtx.Options{ResolveCommit: true, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var n int
		return tx.QueryRow(b.ctx, `SELECT count(*) FROM `+b.table).Scan(&n)
	})
	if err != nil {
		t.Fatalf("read-only transaction whose COMMIT was lost: %v, want nil", err)
	}
	if px.Cuts() != 2 {
		t.Fatalf("proxy cut %d connections, want 2", px.Cuts())
	}
}

// hookKey marks the contexts the start hooks return.
type hookKey string

// spanHook checks that every end hook gets the context its start hook
// returned, as a tracer's span would ride on it.
type spanHook struct {
	counter
	wrong []string
}

// observer is the pgtx.Observer of h's hooks (not of its counter's).
func (h *spanHook) observer() pgtx.Observer {
	return pgtx.Observer{TxStart: h.TxStart, AttemptStart: h.AttemptStart, AttemptEnd: h.AttemptEnd, TxEnd: h.TxEnd}
}

func (h *spanHook) TxStart(ctx context.Context, e pgtx.Event) context.Context {
	h.counter.TxStart(ctx, e)
	return context.WithValue(ctx, hookKey("tx"), e.Name)
}

func (h *spanHook) AttemptStart(ctx context.Context, e pgtx.Event) context.Context {
	if ctx.Value(hookKey("tx")) != e.Name {
		h.wrong = append(h.wrong, "attempt_start without the tx context")
	}
	h.counter.AttemptStart(ctx, e)
	return context.WithValue(ctx, hookKey("attempt"), e.Attempt)
}

func (h *spanHook) AttemptEnd(ctx context.Context, e pgtx.Event) {
	if ctx.Value(hookKey("attempt")) != e.Attempt || ctx.Value(hookKey("tx")) != e.Name {
		h.wrong = append(h.wrong, "attempt_end without its attempt's context")
	}
	h.counter.AttemptEnd(ctx, e)
}

func (h *spanHook) TxEnd(ctx context.Context, e pgtx.Event) {
	if ctx.Value(hookKey("tx")) != e.Name || ctx.Value(hookKey("attempt")) != nil {
		h.wrong = append(h.wrong, "tx_end without the tx context (or with an attempt's)")
	}
	h.counter.TxEnd(ctx, e)
}

// TestObserverHooks: the hooks of one call come in order, each end hook
// gets its start hook's context, attempts are reported per attempt and
// the outcome once; a panic in fn ends both the attempt and the call
// before it propagates.
func TestObserverHooks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	obs := &spanHook{}
	runs := 0
	err := pgtx.RunInTx(b.ctx, b.pool, pgtx.Options{Name: "buy", Observer: obs.observer(), BaseBackoff: time.Millisecond}, func(tx pgx.Tx) error {
		runs++
		if runs < 3 {
			return raise(b.ctx, tx, "40001")
		}
		_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`)
		return err
	})
	if err != nil || runs != 3 {
		t.Fatalf("RunInTx = %v after %d runs", err, runs)
	}
	want := []string{"tx_start", "attempt_start", "attempt_end", "attempt_start", "attempt_end", "attempt_start", "attempt_end", "tx_end"}
	if !slices.Equal(obs.hooks, want) || len(obs.wrong) > 0 {
		t.Fatalf("hooks %v (%v), want %v", obs.hooks, obs.wrong, want)
	}
	for i, e := range obs.attempt {
		last := i == len(obs.attempt)-1
		if e.Attempt != i+1 || e.Retry == last || pgtx.Classify(e.Err).Committed != last || (e.Err == nil) != last ||
			(e.Retry && (e.Backoff <= 0 || !pgtx.Classify(e.Err).SerializationFailure)) {
			t.Errorf("attempt %d: %+v", i+1, e)
		}
	}
	if end := obs.tx[0]; end.Attempt != 3 || !pgtx.Classify(end.Err).Committed || end.Err != nil || end.Name != "buy" {
		t.Errorf("tx end %+v, want 3 attempts, committed", end)
	}
	if obs.n(evCommitted) != 1 || b.count(t, "id = 1") != 1 {
		t.Fatalf("committed %d, rows %d; want 1, 1", obs.n(evCommitted), b.count(t, "id = 1"))
	}

	// A panic: the attempt and the call end, not committed, then the panic
	// goes on.
	p := &counter{}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the panic", r)
			}
		}()
		_ = pgtx.RunInTx(b.ctx, b.pool, pgtx.Options{Observer: p.observer()}, func(tx pgx.Tx) error { panic("boom") })
	}()
	if !slices.Equal(p.hooks, []string{"tx_start", "attempt_start", "attempt_end", "tx_end"}) ||
		!pgtx.Classify(p.attempt[0].Err).NotCommitted || !pgtx.Classify(p.tx[0].Err).NotCommitted || p.tx[0].Err == nil {
		t.Fatalf("after a panic: hooks %v, attempt %+v, tx %+v", p.hooks, p.attempt, p.tx)
	}
}

// TestUniqueViolationOfCitusShard: a unique violation relayed by a Citus
// coordinator has no constraint field and its message names the shard's
// constraint (the table's constraint with "_<shard id>" appended; the
// context says where the command ran); UniqueViolationOf names the
// table's constraint. The error is the one
// Citus 13.2 returned for a duplicate buyer in a distributed schema. A
// constraint of plain PostgreSQL whose name ends in digits keeps them.
func TestUniqueViolationOfCitusShard(t *testing.T) {
	t.Parallel()
	// As pgx receives it from the coordinator: no constraint field.
	citus := &pgconn.PgError{Code: "23505",
		Message: `duplicate key value violates unique constraint "uq_orders_user_sku_102402"`,
		Where:   "while executing command on 127.0.0.1:57102"}
	for _, c := range []struct {
		err  error
		want string
	}{
		{citus, "uq_orders_user_sku"},
		{fmt.Errorf("batch: %w", citus), "uq_orders_user_sku"},
		{&pgconn.PgError{Code: "23505", ConstraintName: "uq_part_2024"}, "uq_part_2024"},
		{&pgconn.PgError{Code: "23505", ConstraintName: "pk_7", Where: "while executing command on h:1"}, "pk"},
		{&pgconn.PgError{Code: "23505", ConstraintName: "plain", Where: "while executing command on h:1"}, "plain"},
	} {
		got, ok := pgtx.UniqueViolationOf(c.err)
		if !ok || got != c.want {
			t.Errorf("UniqueViolationOf(%v) = %q, %v; want %q", c.err, got, ok, c.want)
		}
	}
	if _, ok := pgtx.UniqueViolationOf(&pgconn.PgError{Code: "23503", ConstraintName: "fk_1"}); ok {
		t.Error("a foreign key violation reported as unique")
	}
}

// TestObserverNilHooks: a nil hook does nothing; with the start hooks nil
// the end hooks get the caller's ctx, and each set hook keeps its rhythm
// (AttemptEnd per attempt, TxEnd once per call).
func TestObserverNilHooks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.WithValue(b.ctx, hookKey("caller"), "yes")
	var attempts, retries, ends int
	var wrong []string
	obs := pgtx.Observer{
		AttemptEnd: func(hctx context.Context, e pgtx.Event) {
			if hctx.Value(hookKey("caller")) != "yes" {
				wrong = append(wrong, "attempt_end without the caller's ctx")
			}
			attempts++
			if e.Retry {
				retries++
			}
		},
		TxEnd: func(hctx context.Context, e pgtx.Event) {
			if hctx.Value(hookKey("caller")) != "yes" || e.Attempt != 2 || e.Err != nil {
				wrong = append(wrong, fmt.Sprintf("tx_end %+v", e))
			}
			ends++
		},
	}
	runs := 0
	err := pgtx.RunInTx(ctx, b.pool, pgtx.Options{Observer: obs, BaseBackoff: time.Millisecond}, func(tx pgx.Tx) error {
		runs++
		if runs < 2 {
			return raise(ctx, tx, "40001")
		}
		return nil
	})
	if err != nil || attempts != 2 || retries != 1 || ends != 1 || len(wrong) > 0 {
		t.Fatalf("RunInTx = %v; attempts %d, retries %d, ends %d (%v); want nil, 2, 1, 1", err, attempts, retries, ends, wrong)
	}
	// The zero Observer observes nothing and changes nothing.
	if err := pgtx.RunInTx(ctx, b.pool, pgtx.Options{Observer: pgtx.Observer{}}, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("RunInTx with the zero Observer = %v", err)
	}
}
