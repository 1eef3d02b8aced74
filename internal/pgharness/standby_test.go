package pgharness_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/testwait"
)

func connect(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestStandbyFailover builds a synchronous standby, commits a row on the
// primary, crashes the primary and promotes the standby: the row is there,
// the promoted server is on timeline 2 the moment it accepts writes, and a
// multi-host URL with target_session_attrs=read-write finds it.
func TestStandbyFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary, err := pgharness.StartThrowaway(ctx, pgharness.Options{MaxConnections: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := primary.StartStandby(ctx, pgharness.StandbyOptions{Synchronous: true, Name: "sb1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := standby.Stop(); err != nil {
			t.Errorf("stop the standby: %v", err)
		}
		if _, err := os.Stat(standby.Dir()); !os.IsNotExist(err) {
			t.Errorf("standby directory still there after Stop: %v", err)
		}
	})
	url := pgharness.MultiHostURL(primary, standby)
	c := connect(t, ctx, url)
	var port int
	if err := c.QueryRow(ctx, `SELECT current_setting('port')::int`).Scan(&port); err != nil || port != primary.Port() {
		t.Fatalf("multi-host URL reached port %d (%v), want the primary's %d", port, err, primary.Port())
	}
	var sync string
	if err := c.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication WHERE application_name = 'sb1'`).Scan(&sync); err != nil || sync != "sync" {
		t.Fatalf("sync_state %q (%v), want sync", sync, err)
	}
	if _, err := c.Exec(ctx, `CREATE TABLE t (id int); INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	// A standby refuses writes; the multi-host URL never picks it while the
	// primary is up.
	sc := connect(t, ctx, standby.URL)
	if _, err := sc.Exec(ctx, `INSERT INTO t VALUES (2)`); err == nil {
		t.Fatal("the standby accepted a write")
	}

	if err := primary.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	n := connect(t, ctx, url)
	var walfile string
	if err := n.QueryRow(ctx, `SELECT pg_walfile_name(pg_current_wal_lsn())`).Scan(&walfile); err != nil {
		t.Fatal(err)
	}
	if walfile[:8] != "00000002" {
		t.Fatalf("WAL file %s right after promotion, want timeline 2", walfile)
	}
	if err := n.QueryRow(ctx, `SELECT current_setting('port')::int`).Scan(&port); err != nil || port != standby.Port() {
		t.Fatalf("after failover the multi-host URL reached port %d (%v), want the standby's %d", port, err, standby.Port())
	}
	var rows int
	if err := n.QueryRow(ctx, `SELECT count(*) FROM t WHERE id = 1`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("committed row on the promoted standby: %d (%v), want 1", rows, err)
	}
	if _, err := n.Exec(ctx, `INSERT INTO t VALUES (3)`); err != nil {
		t.Fatalf("the promoted standby refuses writes: %v", err)
	}
}

// TestArchiveFailing turns the archive_command off and on: failures are
// counted in pg_stat_archiver and nothing is archived; once it works again
// the held segments are archived.
func TestArchiveFailing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := pgharness.StartThrowaway(ctx, pgharness.Options{MaxConnections: 20, Archive: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	c := connect(t, ctx, srv.URL)
	if err := srv.SetArchiveFailing(true); err != nil {
		t.Fatal(err)
	}
	var seg string
	if err := c.QueryRow(ctx, `SELECT pg_walfile_name(pg_switch_wal())`).Scan(&seg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, c, `SELECT failed_count > 0 AND last_failed_wal = $1 FROM pg_stat_archiver`, seg)
	if _, err := os.Stat(filepath.Join(srv.ArchiveDir(), seg)); !os.IsNotExist(err) {
		t.Fatalf("segment %s archived while archiving fails (%v)", seg, err)
	}
	if err := srv.SetArchiveFailing(false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, c, `SELECT last_archived_wal >= $1 FROM pg_stat_archiver`, seg)
	if _, err := os.Stat(filepath.Join(srv.ArchiveDir(), seg)); err != nil {
		t.Fatalf("segment %s not in the archive once archiving works: %v", seg, err)
	}
	plain, err := pgharness.StartThrowaway(ctx, pgharness.Options{MaxConnections: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()
	if err := plain.SetArchiveFailing(true); err == nil {
		t.Fatal("SetArchiveFailing on a server without Options.Archive succeeded")
	}
}

func waitFor(t *testing.T, ctx context.Context, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	ctx = testwait.Context(t, ctx, testwait.Step)
	for {
		var ok *bool
		if err := c.QueryRow(ctx, sql, args...).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok != nil && *ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never held: %v", sql, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestHoldReplicationThenKill: with replication held, an asynchronous
// primary acknowledges a commit the standby never receives; the primary
// crashes, the standby is killed (its held receiver too), restarted and
// promoted: the acknowledged row is not there, the one before the hold is.
func TestHoldReplicationThenKill(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary, err := pgharness.StartThrowaway(ctx, pgharness.Options{MaxConnections: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := primary.StartStandby(ctx, pgharness.StandbyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	if err := primary.ReleaseReplication(); err == nil {
		t.Fatal("ReleaseReplication without a hold succeeded")
	}
	c := connect(t, ctx, primary.URL)
	if _, err := c.Exec(ctx, `CREATE TABLE t (id int); INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	var lsn string
	if err := c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	sc := connect(t, ctx, standby.URL)
	waitFor(t, ctx, sc, `SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn`, lsn)
	if err := standby.HoldReplication(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `INSERT INTO t VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	if err := primary.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	n := connect(t, ctx, standby.URL)
	var ids []int32
	rows, err := n.Query(ctx, `SELECT id FROM t ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("rows on the promoted standby %v, want [1]: the commit made during the hold never reached it", ids)
	}
}

// TestStopWithReplicationHeld: a standby whose WAL receiver is frozen
// still stops cleanly (Stop lets the receiver go first).
func TestStopWithReplicationHeld(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary, err := pgharness.StartThrowaway(ctx, pgharness.Options{MaxConnections: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := primary.StartStandby(ctx, pgharness.StandbyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.HoldReplication(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Stop(); err != nil {
		t.Fatalf("Stop with replication held: %v", err)
	}
	if _, err := os.Stat(standby.Dir()); !os.IsNotExist(err) {
		t.Fatalf("standby directory still there after Stop: %v", err)
	}
}

// TestKillWhileClientsConnect: Kill, then Restart, while clients keep
// opening connections, so the postmaster is forking backends as it is
// killed. Restart must not find the old shared memory still attached (a
// backend forked after Kill listed the children would hold it: "pre-
// existing shared memory block is still in use").
func TestKillWhileClientsConnect(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := pgharness.StartThrowaway(ctx, pgharness.Options{MaxConnections: 40})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var opened atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				if c, err := pgx.Connect(cctx, s.URL); err == nil {
					opened.Add(1)
					_ = c.Close(cctx)
				}
				ccancel()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	for round := range 5 {
		for before := opened.Load(); opened.Load() < before+20; {
			select {
			case <-ctx.Done():
				t.Fatalf("round %d: clients stopped connecting: %v", round, ctx.Err())
			case <-time.After(time.Millisecond):
			}
		}
		if err := s.Kill(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := s.Restart(ctx); err != nil {
			t.Fatalf("round %d: restart after Kill: %v", round, err)
		}
	}
}
