package pgtx_test

// RunInTx through PgBouncer in transaction pooling mode: every statement or
// transaction may run on another server connection, and a server
// connection serves many clients one transaction after another. These
// tests prove RunInTx is correct there, with the pgx setting the harness
// chooses (default_query_exec_mode=exec), and document what breaks
// without it.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/faultproxy"
	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/pgtx"
)

// ownBouncer starts a PgBouncer of the test's own, in transaction mode
// with poolSize server connections, in front of the process's server.
func ownBouncer(t *testing.T, ctx context.Context, poolSize int) *pgharness.PgBouncer {
	t.Helper()
	pb, err := pgharness.StartPgBouncer(ctx, pgtest.Server(t), pgharness.PgBouncerOptions{DefaultPoolSize: poolSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pb.Stop() })
	return pb
}

// bouncerPool returns a pool of maxConns client connections through pb.
func bouncerPool(t *testing.T, pb *pgharness.PgBouncer, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pb.PoolConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func connect(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func TestPgBouncerCommitAndRollback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := pgtest.PgBouncerPool(t, nil)
	if err := pgtx.RunInTx(b.ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES ($1, $2)`, 1, 10)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	errBusiness := errors.New("business rule says no")
	err := pgtx.RunInTx(b.ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES ($1, $2)`, 2, 20); err != nil {
			return err
		}
		return errBusiness
	})
	if !errors.Is(err, errBusiness) {
		t.Fatalf("RunInTx = %v, want the fn's error", err)
	}
	if n := b.count(t, "id = 1 AND v = 10"); n != 1 {
		t.Fatalf("committed row count = %d, want 1", n)
	}
	if n := b.count(t, "id = 2"); n != 0 {
		t.Fatalf("rolled-back row count = %d, want 0", n)
	}
}

// TestPgBouncerRetriesSerializationFailure: the write skew of
// TestRetriesRealSerializationFailure, through PgBouncer, with BEGIN in its
// own round trip and deferred into the first statement's pipeline.
func TestPgBouncerRetriesSerializationFailure(t *testing.T) {
	t.Parallel()
	for _, deferBegin := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeferBegin=%v", deferBegin), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			writeSkewIsRetried(t, b, pgtest.PgBouncerPool(t, nil), pgtx.Options{DeferBegin: deferBegin})
		})
	}
}

// TestPgBouncerRetriesDeadlock: the deadlock of TestRetriesRealDeadlock,
// through PgBouncer, with BEGIN in its own round trip and deferred.
func TestPgBouncerRetriesDeadlock(t *testing.T) {
	t.Parallel()
	for _, deferBegin := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeferBegin=%v", deferBegin), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			deadlockIsRetried(t, b, pgtest.PgBouncerPool(t, nil), pgtx.Options{DeferBegin: deferBegin})
		})
	}
}

// TestPgBouncerLockTimeoutApplied: Options.LockTimeout (SET LOCAL in the
// BEGIN round trip) takes effect through PgBouncer.
func TestPgBouncerLockTimeoutApplied(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := pgtest.PgBouncerPool(t, nil)
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	holder, err := b.pool.Begin(b.ctx) // directly on the server
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background())
	if _, err := holder.Exec(b.ctx, `UPDATE `+b.table+` SET v = 1 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	var obs counter
	err = pgtx.RunInTx(b.ctx, pool, pgtx.Options{LockTimeout: 50 * time.Millisecond, Observer: obs.observer()}, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `UPDATE `+b.table+` SET v = 2 WHERE id = 1`)
		return err
	})
	if !pgtx.Classify(err).LockTimeout || obs.n(evAttempt) != 1 {
		t.Fatalf("err = %v (attempts %d), want one attempt ending in a lock timeout", err, obs.n(evAttempt))
	}
}

// TestPgBouncerSetLocalDoesNotLeak runs on a PgBouncer with ONE server
// connection, so every client below shares the same server session (the
// backend pid proves it). Options.LockTimeout, applied with SET LOCAL, ends
// with its transaction: the next transaction, from another client, sees
// the server's setting. A plain SET — which a session-minded library or a
// connection AfterConnect hook might run — outlives the transaction and
// reaches whichever client runs next on that server connection: through
// transaction pooling, session state is shared state. Use SET LOCAL (or
// set_config(name, value, true)) only.
func TestPgBouncerSetLocalDoesNotLeak(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 2*time.Minute)
	var base string
	if err := pgtest.Pool(t).QueryRow(ctx, `SELECT current_setting('lock_timeout')`).Scan(&base); err != nil {
		t.Fatal(err)
	}
	pb := ownBouncer(t, ctx, 1)
	a, c := connect(t, ctx, pb.URL), connect(t, ctx, pb.URL)
	type seen struct {
		pid         uint32
		lockTimeout string
	}
	look := func(q pgtx.Querier) (s seen, err error) {
		err = q.QueryRow(ctx, `SELECT pg_backend_pid(), current_setting('lock_timeout')`).Scan(&s.pid, &s.lockTimeout)
		return s, err
	}
	var inside, after seen
	if err := pgtx.RunInTx(ctx, a, pgtx.Options{LockTimeout: 1234 * time.Millisecond}, func(tx pgx.Tx) (err error) {
		inside, err = look(tx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if inside.lockTimeout != "1234ms" {
		t.Fatalf("lock_timeout inside RunInTx = %q, want 1234ms", inside.lockTimeout)
	}
	if err := pgtx.RunInTx(ctx, c, pgtx.Options{}, func(tx pgx.Tx) (err error) {
		after, err = look(tx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if after.pid != inside.pid {
		t.Fatalf("second client ran on backend %d, want %d (one server connection)", after.pid, inside.pid)
	}
	if after.lockTimeout != base {
		t.Fatalf("SET LOCAL leaked: next client's lock_timeout = %q, want the server's %q", after.lockTimeout, base)
	}

	// The counter-example: a plain SET on client a changes client c's
	// session.
	if _, err := a.Exec(ctx, `SET lock_timeout = '4321ms'`); err != nil {
		t.Fatal(err)
	}
	leaked, err := look(c)
	if err != nil {
		t.Fatal(err)
	}
	if leaked.pid != inside.pid || leaked.lockTimeout != "4321ms" {
		t.Fatalf("after a plain SET on another client: backend %d lock_timeout %q; want backend %d with the leaked 4321ms",
			leaked.pid, leaked.lockTimeout, inside.pid)
	}
}

// TestPgBouncerManyConcurrentTransactions: 200 clients × 20 transactions
// over a PgBouncer with 10 server connections. Each transaction increments
// one of 10 hot counters and records the value it got; every value is
// handed out exactly once, the counters add up, and no more than 10 server
// backends ever ran them.
func TestPgBouncerManyConcurrentTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const clients, perClient, counters, serverConns = 200, 20, 10, 10
	ledger := pgx.Identifier{b.schema, "ledger"}.Sanitize()
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table+` SELECT g, 0 FROM generate_series(0, `+strconv.Itoa(counters-1)+`) g;
		CREATE TABLE `+ledger+` (counter int NOT NULL, v int NOT NULL, client int NOT NULL, pid int NOT NULL, PRIMARY KEY (counter, v))`); err != nil {
		t.Fatal(err)
	}
	pool := bouncerPool(t, ownBouncer(t, b.ctx, serverConns), clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				id := (c + i) % counters
				err := pgtx.RunInTx(b.ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
					var v int
					// This test is about pooling, not durability: no WAL
					// flush at commit (SET LOCAL, so nothing leaks).
					if _, err := tx.Exec(b.ctx, `SET LOCAL synchronous_commit = off`); err != nil {
						return err
					}
					if err := tx.QueryRow(b.ctx, `UPDATE `+b.table+` SET v = v + 1 WHERE id = $1 RETURNING v`, id).Scan(&v); err != nil {
						return err
					}
					_, err := tx.Exec(b.ctx, `INSERT INTO `+ledger+` VALUES ($1, $2, $3, pg_backend_pid())`, id, v, c)
					return err
				})
				if err != nil {
					errs <- fmt.Errorf("client %d tx %d: %w", c, i, err)
					return
				}
			}
		})
	}
	testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var total, rows, distinctPids, gaps int
	if err := b.pool.QueryRow(b.ctx, `SELECT (SELECT sum(v) FROM `+b.table+`), (SELECT count(*) FROM `+ledger+`),
		(SELECT count(DISTINCT pid) FROM `+ledger+`),
		(SELECT count(*) FROM `+b.table+` t WHERE t.v <> (SELECT count(*) FROM `+ledger+` l WHERE l.counter = t.id AND l.v BETWEEN 1 AND t.v))`).
		Scan(&total, &rows, &distinctPids, &gaps); err != nil {
		t.Fatal(err)
	}
	if total != clients*perClient || rows != clients*perClient || gaps != 0 {
		t.Fatalf("counters sum %d, ledger rows %d, counters with gaps %d; want %d, %d, 0", total, rows, gaps, clients*perClient, clients*perClient)
	}
	if distinctPids < 1 || distinctPids > serverConns {
		t.Fatalf("transactions ran on %d server backends, want 1..%d", distinctPids, serverConns)
	}
}

// TestPgBouncerResolveCommit: a fault proxy between pgx and PgBouncer cuts
// the client connection around COMMIT; Options.ResolveCommit asks
// pg_xact_status through PgBouncer on another client connection and finds
// the truth both ways.
func TestPgBouncerResolveCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pb := pgtest.PgBouncer(t)
	px, err := faultproxy.Start(net.JoinHostPort("127.0.0.1", strconv.Itoa(pb.Port())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	pool := pgtest.PgBouncerPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.Port = uint16(px.Port())
		c.MaxConns = 4
	})

	// Cut after COMMIT reached the server: committed, though the client
	// never heard so.
	px.SetRule(cutCommitOnce(faultproxy.CutAfter))
	var obs counter
	if err := pgtx.RunInTx(b.ctx, pool, pgtx.Options{ResolveCommit: true, Observer: obs.observer()}, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (1, 0)`)
		return err
	}); err != nil {
		t.Fatalf("RunInTx with resolution = %v, want nil (the transaction committed)", err)
	}
	if obs.n(evCommitUnknown) != 1 || obs.n(evResolved) != 1 || px.Cuts() != 1 {
		t.Fatalf("events %v, cuts %d; want one unknown commit resolved, one cut", obs.counts, px.Cuts())
	}
	if n := b.count(t, "id = 1"); n != 1 {
		t.Fatalf("row count = %d, want 1", n)
	}

	// Cut before COMMIT left the proxy: PgBouncer sees its client vanish in
	// the middle of a transaction and closes the server connection, so the
	// server aborts it.
	px.SetRule(cutCommitOnce(faultproxy.CutBefore))
	err = pgtx.RunInTx(b.ctx, pool, pgtx.Options{ResolveCommit: true}, func(tx pgx.Tx) error {
		_, err := tx.Exec(b.ctx, `INSERT INTO `+b.table+` VALUES (2, 0)`)
		return err
	})
	var ce *pgtx.CommitError
	if !errors.As(err, &ce) || ce.Unknown || ce.Resolution != "aborted" || ce.XID == 0 || !pgtx.Classify(err).NotCommitted {
		t.Fatalf("err = %v, want a resolved, not-committed *CommitError", err)
	}
	if n := b.count(t, "id = 2"); n != 0 {
		t.Fatalf("row count = %d, want 0", n)
	}
}

// TestPgBouncerNamedPreparedStatementsFail documents why the harness's URL
// sets default_query_exec_mode: with pgx's default mode, cache_statement,
// every client connection prepares a named statement ("stmtcache_<hash of
// the SQL>") on whatever server connection it happens to use. Through
// transaction pooling (PgBouncer 1.18 does not track prepared statements;
// 1.21+ can, with max_prepared_statements) the next client running the same
// SQL on that server connection fails: 42P05, the statement already
// exists. With a pool of more than one server connection the same mistake
// shows up at random, as 42P05 or as 26000 (the statement does not exist
// on the connection the client lands on); one server connection makes it
// deterministic. The modes that use no named statement work.
func TestPgBouncerNamedPreparedStatementsFail(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 2*time.Minute)
	pb := ownBouncer(t, ctx, 1)
	run := func(mode pgx.QueryExecMode) [2]error {
		var errs [2]error
		sql := `SELECT $1::int + 1 -- ` + mode.String()
		for i := range errs {
			cfg, err := pgx.ParseConfig(pb.URL)
			if err != nil {
				t.Fatal(err)
			}
			cfg.DefaultQueryExecMode = mode
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var n int
			errs[i] = conn.QueryRow(ctx, sql, 41).Scan(&n)
			if errs[i] == nil && n != 42 {
				errs[i] = fmt.Errorf("got %d", n)
			}
			_ = conn.Close(ctx)
		}
		return errs
	}
	errs := run(pgx.QueryExecModeCacheStatement)
	var pgErr *pgconn.PgError
	if errs[0] != nil || !errors.As(errs[1], &pgErr) || pgErr.Code != pgerrcode.DuplicatePreparedStatement ||
		!strings.Contains(pgErr.Message, "stmtcache_") {
		t.Fatalf("cache_statement: first client %v, second client %v; want nil, then 42P05 on stmtcache_…", errs[0], errs[1])
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeSimpleProtocol} {
		if errs := run(mode); errs[0] != nil || errs[1] != nil {
			t.Fatalf("%v: %v, %v; want both clients to succeed", mode, errs[0], errs[1])
		}
	}
}
