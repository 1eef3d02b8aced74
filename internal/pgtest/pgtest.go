// Package pgtest connects the tests of this module to a real PostgreSQL
// server: SECKILL_DATABASE_URL when set, otherwise one throwaway cluster per
// test process (see pgharness). Every test gets a fresh schema.
//
// Each test package wires it up once:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and each test asks for what it needs:
//
//	pool := pgtest.Pool(t)
//	schema := pgtest.Schema(t)
//
// # Query exec mode
//
// SECKILL_QUERY_EXEC_MODE selects pgx's default_query_exec_mode for the
// shared [Pool], for [NewPool] (before the caller's configure func runs, so
// a test can still override it) and for [Conn]: cache_statement (pgx's
// default), cache_describe, describe_exec, exec or simple_protocol. Unset or
// empty keeps what the URL says (default_query_exec_mode in
// SECKILL_DATABASE_URL, else pgx's default). Running the whole suite with exec or simple_protocol
// proves the library works where pgx does not learn parameter types from
// the server, as behind PgBouncer in transaction mode:
//
//	SECKILL_QUERY_EXEC_MODE=exec go test ./...
//
// An unknown value fails every test that asks for a connection.
// [PgBouncerPool] is not affected: it always uses the mode PgBouncer needs.
// [ExecModes] lists the modes for tests that exercise each of them
// explicitly with [NewPool] and [WithExecMode].
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/leakcheck"
	"github.com/seckillkit/seckill/internal/pgharness"
)

var (
	mu       sync.Mutex
	srv      *pgharness.Server
	startErr error
	shared   *pgxpool.Pool

	bouncer    *pgharness.PgBouncer
	bouncerErr error

	atExit []func() // cleanups of ExampleTB, run by Stop
)

// EnvQueryExecMode names the environment variable that selects the query
// exec mode of the connections this package hands out.
const EnvQueryExecMode = "SECKILL_QUERY_EXEC_MODE"

// ExecModes are the query exec modes other than pgx's default, in which
// pgx encodes arguments differently (without server-provided parameter
// types, or from a cached description): what a TestQueryExecModes test
// runs its package's helpers through.
var ExecModes = []pgx.QueryExecMode{
	pgx.QueryExecModeExec,
	pgx.QueryExecModeSimpleProtocol,
	pgx.QueryExecModeCacheDescribe,
}

// ParseExecMode maps a default_query_exec_mode name to pgx's mode. The
// empty string means pgx's default, cache_statement.
func ParseExecMode(s string) (pgx.QueryExecMode, error) {
	switch s {
	case "", "cache_statement":
		return pgx.QueryExecModeCacheStatement, nil
	case "cache_describe":
		return pgx.QueryExecModeCacheDescribe, nil
	case "describe_exec":
		return pgx.QueryExecModeDescribeExec, nil
	case "exec":
		return pgx.QueryExecModeExec, nil
	case "simple_protocol":
		return pgx.QueryExecModeSimpleProtocol, nil
	}
	return 0, fmt.Errorf("pgtest: %s=%q: want one of cache_statement, cache_describe, describe_exec, exec, simple_protocol", EnvQueryExecMode, s)
}

// envExecMode applies SECKILL_QUERY_EXEC_MODE to cfg; an unknown value fails
// the test. Unset or empty leaves cfg as parsed from the URL.
func envExecMode(t testing.TB, cfg *pgx.ConnConfig) {
	t.Helper()
	env := os.Getenv(EnvQueryExecMode)
	if env == "" {
		return
	}
	mode, err := ParseExecMode(env)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
}

// WithExecMode returns a [NewPool] configure func that sets the pool's
// query exec mode.
func WithExecMode(mode pgx.QueryExecMode) func(*pgxpool.Config) {
	return func(cfg *pgxpool.Config) { cfg.ConnConfig.DefaultQueryExecMode = mode }
}

// Main runs the package's tests, then calls [Stop], and fails the run if
// library goroutines are still running.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	if leaked && code == 0 {
		code = 1
	}
	if code == 0 {
		if err := leakcheck.Wait("", 5*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// leaked is set by [Stop] when the shared pool still held a connection.
var leaked bool

// Stop runs the cleanups of [ExampleTB] (last registered first), closes
// the shared pool, and stops the PgBouncer and the throwaway server of
// the process. Later calls of the helpers start new ones.
func Stop() {
	mu.Lock()
	fs := atExit
	atExit = nil
	mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	mu.Lock()
	defer mu.Unlock()
	if shared != nil {
		// A connection a test never released would hold Close forever.
		done := make(chan struct{})
		go func() { shared.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			fmt.Fprintf(os.Stderr, "pgtest: closing the shared pool: %d connections still acquired after 10s: a test never released one\n", shared.Stat().AcquiredConns())
			leaked = true
		}
		shared = nil
	}
	if bouncer != nil {
		if err := bouncer.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: stop pgbouncer:", err)
		}
		bouncer, bouncerErr = nil, nil
	}
	if srv != nil {
		if err := srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: stop server:", err)
		}
		srv, startErr = nil, nil
	}
}

// Server returns the process's server, starting it on first use. The test
// fails at once, with one sentence saying what to install or set, when no
// PostgreSQL is available.
func Server(t testing.TB) *pgharness.Server {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if srv == nil && startErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		srv, startErr = pgharness.Start(ctx, pgharness.Options{})
		cancel()
	}
	if startErr != nil {
		t.Fatal(startErr)
	}
	return srv
}

// URL returns the connection string of the process's server.
func URL(t testing.TB) string { return Server(t).URL }

// Pool returns a pool shared by all tests of the process (up to 64
// connections, in the query exec mode of SECKILL_QUERY_EXEC_MODE). Do not
// close it.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := URL(t)
	mu.Lock()
	defer mu.Unlock()
	if shared == nil {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 64
		envExecMode(t, cfg.ConnConfig)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if shared, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	return shared
}

// NewPool returns a pool of its own, in the query exec mode of
// SECKILL_QUERY_EXEC_MODE and then configured by configure (may be nil),
// closed when the test ends.
func NewPool(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL(t))
	if err != nil {
		t.Fatal(err)
	}
	envExecMode(t, cfg.ConnConfig)
	return openPool(t, cfg, configure)
}

// openPool opens a pool with cfg, configured by configure (may be nil),
// closed when the test ends.
func openPool(t testing.TB, cfg *pgxpool.Config, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	if configure != nil {
		configure(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closePool(t, p) })
	return p
}

// closePool closes p, failing t instead of hanging when a connection is
// still acquired after ten seconds: pgxpool's Close waits for every
// acquired connection, and a connection the code under test never
// released would block the test until the package's timeout.
func closePool(t testing.TB, p *pgxpool.Pool) {
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("pgtest: closing the pool: %d connections still acquired after 10s: one was never released", p.Stat().AcquiredConns())
	}
}

// PgBouncer returns the process's PgBouncer, in transaction pooling mode in
// front of the process's server (see [Server]) with the default options of
// pgharness.StartPgBouncer, starting it on first use; [Main] stops it. The
// test fails at once when PgBouncer cannot be started, e.g. with one
// sentence saying what to install when it is missing. Do not stop it.
func PgBouncer(t testing.TB) *pgharness.PgBouncer {
	t.Helper()
	s := Server(t)
	mu.Lock()
	defer mu.Unlock()
	if bouncer == nil && bouncerErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		bouncer, bouncerErr = pgharness.StartPgBouncer(ctx, s, pgharness.PgBouncerOptions{})
		cancel()
	}
	if bouncerErr != nil {
		t.Fatal(bouncerErr)
	}
	return bouncer
}

// PgBouncerPool returns a pool of its own whose connections go through the
// process's [PgBouncer], configured from PgBouncer.PoolConfig (so with the
// query exec mode transaction pooling needs) and then by configure (may be
// nil), closed when the test ends. PgBouncer's own pool has 20 server
// connections, shared by every test of the process.
func PgBouncerPool(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := PgBouncer(t).PoolConfig()
	if err != nil {
		t.Fatal(err)
	}
	return openPool(t, cfg, configure)
}

// Conn returns a single connection of its own, in the query exec mode of
// SECKILL_QUERY_EXEC_MODE, closed when the test ends.
func Conn(t testing.TB) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(URL(t))
	if err != nil {
		t.Fatal(err)
	}
	envExecMode(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// Schema returns the name of a fresh, not yet created schema for this test
// (migrations create it), and drops it with everything in it when the test
// ends. Set SECKILL_KEEP_SCHEMAS=1 to keep the schemas of failed tests.
func Schema(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '_'
	}, t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	name = "t_" + name + "_" + hex.EncodeToString(b)
	pool := Pool(t)
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("SECKILL_KEEP_SCHEMAS") != "" {
			t.Logf("pgtest: kept schema %s", name)
			return
		}
		// A lock still held by a transaction the test leaked (the test has
		// failed then) must not hold the cleanup up: the schema stays, in
		// a throwaway cluster.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`)
			return err
		})
		if err != nil {
			t.Logf("pgtest: drop schema %s: %v", name, err)
		}
	})
	return name
}

// Context returns a context for one test: cancelled when the test ends,
// and bounded by timeout as a safety net against hangs (not a speed check).
func Context(t testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// exampleT adapts testing.TB for Example functions, which get no *testing.T:
// a failure panics with the message, and cleanups run in [Main] (or
// [Stop]) before the shared pool closes.
type exampleT struct {
	testing.TB
	name string
}

func (e exampleT) Helper()                   {}
func (e exampleT) Name() string              { return e.name }
func (e exampleT) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (e exampleT) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (e exampleT) Failed() bool              { return false }
func (e exampleT) Logf(string, ...any)       {}
func (e exampleT) Cleanup(f func()) {
	mu.Lock()
	defer mu.Unlock()
	atExit = append(atExit, f)
}

// ExampleTB returns a testing.TB for an Example function named name: the
// helpers of this package accept it; a failure panics with its message,
// and what it registers with Cleanup runs when [Main] ends the process
// (the schemas of [Schema] are dropped then). Only Helper, Name, Fatal,
// Fatalf, Failed, Logf and Cleanup may be called on it.
func ExampleTB(name string) testing.TB { return exampleT{name: name} }
