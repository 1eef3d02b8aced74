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
)

func TestNoPostgresIsOneClearSentence(t *testing.T) {
	t.Setenv(pgharness.EnvURL, "")
	t.Setenv(pgharness.EnvBinDir, t.TempDir()) // a directory without binaries
	_, err := pgharness.Start(context.Background(), pgharness.Options{})
	if !errors.Is(err, pgharness.ErrNoPostgres) {
		t.Fatalf("Start = %v, want ErrNoPostgres", err)
	}
	msg := pgharness.ErrNoPostgres.Error()
	if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "apt-get install postgresql") || !strings.Contains(msg, pgharness.EnvURL) {
		t.Fatalf("message %q should be one line naming what to install or set", msg)
	}
}

func TestUnreachableURLFails(t *testing.T) {
	t.Setenv(pgharness.EnvURL, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if _, err := pgharness.Start(context.Background(), pgharness.Options{}); err == nil || !strings.Contains(err.Error(), pgharness.EnvURL) {
		t.Fatalf("Start with an unreachable URL = %v, want an error naming %s", err, pgharness.EnvURL)
	}
}

// TestThrowawayCrashKeepsCommits starts a cluster of its own, commits a row,
// crashes the server (immediate shutdown, like a power cut), restarts it and
// finds the row: fsync and synchronous_commit are on.
func TestThrowawayCrashKeepsCommits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := pgharness.StartThrowaway(ctx, pgharness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if !srv.Owned() || srv.Port() == 0 {
		t.Fatalf("throwaway server not owned or has no port")
	}
	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var fsync, sync, user string
	if err := conn.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'), current_user`).Scan(&fsync, &sync, &user); err != nil {
		t.Fatal(err)
	}
	if fsync != "on" || sync != "on" {
		t.Fatalf("fsync=%s synchronous_commit=%s, want both on", fsync, sync)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE durable (id int PRIMARY KEY); INSERT INTO durable SELECT generate_series(1, 1000)`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	if err := srv.Crash(); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, srv.URL); err == nil {
		t.Fatal("server still answers after Crash")
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM durable`).Scan(&n); err != nil || n != 1000 {
		t.Fatalf("after crash recovery: %d rows (err %v), want 1000", n, err)
	}
}

func TestStopRemovesEverything(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := pgharness.StartThrowaway(ctx, pgharness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil { // idempotent
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := pgx.Connect(ctx, srv.URL); err == nil {
		t.Fatal("server still answers after Stop")
	}
	if _, err := os.Stat(srv.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Stop left %s behind (stat: %v)", srv.Dir(), err)
	}
}
