package pgharness_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/testwait"
)

func TestPgBouncerMissingIsOneClearSentence(t *testing.T) {
	t.Setenv(pgharness.EnvPgBouncer, t.TempDir()+"/no-such-pgbouncer")
	if _, err := pgharness.FindPgBouncer(); !errors.Is(err, pgharness.ErrNoPgBouncer) {
		t.Fatalf("FindPgBouncer = %v, want ErrNoPgBouncer", err)
	}
	// The binary is looked for before anything is started or written.
	_, err := pgharness.StartPgBouncer(context.Background(), &pgharness.Server{URL: "postgres://postgres@127.0.0.1:1/postgres"}, pgharness.PgBouncerOptions{})
	if !errors.Is(err, pgharness.ErrNoPgBouncer) {
		t.Fatalf("StartPgBouncer = %v, want ErrNoPgBouncer", err)
	}
	msg := pgharness.ErrNoPgBouncer.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "apt-get install pgbouncer") {
		t.Fatalf("message %q should be one line naming what to install", msg)
	}
}

func TestPgBouncerRejectsBadOptions(t *testing.T) {
	srv := &pgharness.Server{URL: "postgres://postgres@127.0.0.1:1/postgres"}
	for _, opts := range []pgharness.PgBouncerOptions{
		{PoolMode: "statement"},
		{DefaultPoolSize: -1},
		{MaxClientConn: -1},
	} {
		if _, err := pgharness.StartPgBouncer(context.Background(), srv, opts); err == nil {
			t.Fatalf("StartPgBouncer(%+v) = nil error", opts)
		}
	}
	if _, err := pgharness.StartPgBouncer(context.Background(), nil, pgharness.PgBouncerOptions{}); err == nil {
		t.Fatal("StartPgBouncer(nil target) = nil error")
	}
}

// backendPID returns the pid of the server process that runs a statement
// sent on conn.
func backendPID(t *testing.T, ctx context.Context, conn *pgx.Conn) uint32 {
	t.Helper()
	var pid uint32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

func setting(t *testing.T, ctx context.Context, conn *pgx.Conn, name string) string {
	t.Helper()
	var v string
	if err := conn.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPgBouncerModes starts one server and, in front of it, PgBouncer in
// transaction mode and in session mode, each with a single server
// connection, and checks what each mode promises.
func TestPgBouncerModes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := pgharness.Start(ctx, pgharness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	connect := func(t *testing.T, url string) *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}

	t.Run("transaction", func(t *testing.T) {
		pb, err := pgharness.StartPgBouncer(ctx, srv, pgharness.PgBouncerOptions{DefaultPoolSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer pb.Stop()
		if pb.Mode() != pgharness.PoolTransaction || pb.Port() == 0 || pb.Port() == srv.Port() {
			t.Fatalf("mode %q port %d (server %d)", pb.Mode(), pb.Port(), srv.Port())
		}
		cfg, err := pb.PoolConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeExec || cfg.ConnConfig.TLSConfig != nil {
			t.Fatalf("PoolConfig: exec mode %v, TLS %v; want exec without TLS", cfg.ConnConfig.DefaultQueryExecMode, cfg.ConnConfig.TLSConfig != nil)
		}
		// Two clients open at once share the one server connection: the
		// server connection goes back to the pool after every statement.
		a, b := connect(t, pb.URL), connect(t, pb.URL)
		pa, pbid := backendPID(t, ctx, a), backendPID(t, ctx, b)
		if pa != pbid {
			t.Fatalf("two clients ran on backends %d and %d, want one shared backend", pa, pbid)
		}
		// ... and a transaction keeps it: b waits until a commits.
		tx, err := a.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
			t.Fatal(err)
		}
		done := make(chan uint32, 1)
		go func() {
			var pid uint32
			_ = b.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
			done <- pid
		}()
		select {
		case pid := <-done:
			t.Fatalf("a second client ran (on backend %d) while the only server connection was in a transaction", pid)
		case <-time.After(200 * time.Millisecond): // b is queued, as expected
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if pid := testwait.Recv(t, done, "the blocked call to return"); pid != pa {
			t.Fatalf("queued client ran on backend %d, want %d", pid, pa)
		}

		dir := pb.Dir()
		if err := pb.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := pb.Stop(); err != nil { // idempotent
			t.Fatalf("second Stop: %v", err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Stop left %s behind (stat: %v)", dir, err)
		}
		if c, err := pgx.Connect(ctx, pb.URL); err == nil {
			c.Close(ctx)
			t.Fatal("pgbouncer still answers after Stop")
		}
	})

	t.Run("session", func(t *testing.T) {
		pb, err := pgharness.StartPgBouncer(ctx, srv, pgharness.PgBouncerOptions{PoolMode: pgharness.PoolSession, DefaultPoolSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer pb.Stop()
		// A session keeps its server connection and its settings...
		a := connect(t, pb.URL)
		if _, err := a.Exec(ctx, `SET lock_timeout = '1234ms'`); err != nil {
			t.Fatal(err)
		}
		if got := setting(t, ctx, a, "lock_timeout"); got != "1234ms" {
			t.Fatalf("lock_timeout in the same session = %q, want 1234ms", got)
		}
		pid := backendPID(t, ctx, a)
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		// ... and the next session on the same server connection starts
		// clean (server_reset_query = DISCARD ALL).
		b := connect(t, pb.URL)
		if got := backendPID(t, ctx, b); got != pid {
			t.Fatalf("next session on backend %d, want %d (pool of one)", got, pid)
		}
		if got := setting(t, ctx, b, "lock_timeout"); got != "0" {
			t.Fatalf("lock_timeout in the next session = %q, want 0 (reset)", got)
		}
	})
}
