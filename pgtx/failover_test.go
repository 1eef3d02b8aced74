package pgtx_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/pgtx"
)

// gated is a pgtx.Querier whose QueryRow waits until open is closed.
type gated struct {
	*pgxpool.Pool
	open chan struct{}
}

func (g gated) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	select {
	case <-g.open:
	case <-ctx.Done():
	}
	return g.Pool.QueryRow(ctx, sql, args...)
}

// TestResolveCommitAfterFailover: a COMMIT executes on the primary but
// never reaches its synchronous standby (stopped), so the client waits; the
// primary crashes, the standby is promoted, and the new primary hands the
// same transaction id to a transaction of its own, which commits. The
// resolution of the first transaction's unknown commit, asked on the new
// primary, must not report it committed (its row is not there): the
// timeline differs, the outcome stays unknown.
func TestResolveCommitAfterFailover(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	primary, err := pgharness.StartThrowaway(ctx, pgharness.Options{MaxConnections: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := primary.StartStandby(ctx, pgharness.StandbyOptions{Synchronous: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	admin, err := pgx.Connect(ctx, primary.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	// From now on no commit is acknowledged: the synchronous standby is gone.
	if err := standby.Crash(); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, primary.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	newPrimary := pgtest.NewPool(t, func(c *pgxpool.Config) {
		cc, err := pgconn.ParseConfig(standby.URL)
		if err != nil {
			t.Fatal(err)
		}
		c.ConnConfig.Host, c.ConnConfig.Port = cc.Host, cc.Port
		c.MaxConns = 2
		c.MinConns = 0
	})
	resolveDB := gated{Pool: newPrimary, open: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		done <- pgtx.RunInTx(ctx, conn, pgtx.Options{ResolveCommit: true, ResolveDB: resolveDB, ResolveTimeout: time.Minute},
			func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO t VALUES (1)`)
				return err
			})
	}()
	// The COMMIT ran on the primary and waits for the standby.
	var xid int64
	syncRep := testwait.Context(t, ctx, testwait.Step)
	for {
		err := admin.QueryRow(ctx, `SELECT backend_xid::text::bigint FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&xid)
		if err == nil {
			break
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		select {
		case <-syncRep.Done():
			t.Fatal("the COMMIT never waited for the standby")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := primary.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	// The new primary gives out transaction ids from where its WAL ended:
	// the lost transaction's id goes to a transaction that commits.
	for {
		var next int64
		if err := newPrimary.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&next); err != nil {
			t.Fatal(err)
		}
		if next >= xid {
			break
		}
	}
	var status string
	var rows int
	if err := newPrimary.QueryRow(ctx, `SELECT pg_xact_status($1::bigint::text::xid8), (SELECT count(*) FROM t)`, xid).Scan(&status, &rows); err != nil {
		t.Fatal(err)
	}
	if status != "committed" || rows != 0 {
		t.Fatalf("on the new primary xid %d is %s and t has %d rows: the drill needs the id reused and the row absent", xid, status, rows)
	}
	close(resolveDB.open)
	err = testwait.RecvWithin(t, done, testwait.Long, "RunInTx to resolve the commit")
	var ce *pgtx.CommitError
	if !errors.As(err, &ce) || !pgtx.Classify(err).OutcomeUnknown || uint64(xid) != ce.XID {
		t.Fatalf("RunInTx = %v, want an unknown outcome for xid %d: its COMMIT never reached the new primary", err, xid)
	}
	if !strings.Contains(ce.Resolution, "timeline changed from 00000001 to 00000002") {
		t.Fatalf("resolution %q, want the timeline change named", ce.Resolution)
	}
}

// TestCommitTerminatedWhileWaitingForStandbyIsUnknown: a COMMIT has run on
// the primary and waits for its synchronous standby (held) when the
// backend is terminated (pg_terminate_backend, as a fast shutdown of the
// primary does): the server warns that the transaction committed locally
// and ends the connection with FATAL 57P01. That error answers the COMMIT,
// but it does not mean the COMMIT failed: the outcome is unknown, and the
// row is there.
func TestCommitTerminatedWhileWaitingForStandbyIsUnknown(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	primary, err := pgharness.StartThrowaway(ctx, pgharness.Options{MaxConnections: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := primary.StartStandby(ctx, pgharness.StandbyOptions{Synchronous: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	admin, err := pgx.Connect(ctx, primary.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if err := standby.HoldReplication(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, primary.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- pgtx.RunInTx(ctx, conn, pgtx.Options{}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO t VALUES (1)`)
			return err
		})
	}()
	syncRep := testwait.Context(t, ctx, testwait.Step)
	for {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case <-syncRep.Done():
			t.Fatal("the COMMIT never waited for the standby")
		case <-time.After(10 * time.Millisecond):
		}
	}
	err = testwait.RecvWithin(t, done, testwait.Long, "RunInTx to resolve the commit")
	t.Logf("RunInTx: %v", err)
	var rows int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Fatalf("%d rows on the primary, want 1: the transaction committed locally before the wait", rows)
	}
	if !pgtx.Classify(err).OutcomeUnknown || pgtx.Classify(err).NotCommitted {
		t.Fatalf("RunInTx = %v, want an unknown outcome: the transaction committed (locally) though COMMIT's answer was an error", err)
	}
	if err := standby.ReleaseReplication(); err != nil {
		t.Fatal(err)
	}
}
