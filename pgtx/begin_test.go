package pgtx_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/faultproxy"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/pgtx"
)

// wireConn returns a connection in exec mode mode through a proxy that
// counts the messages that end a round trip: a simple query ('Q') or the
// Sync ('S') that ends a pipeline, prepares included.
func wireConn(t *testing.T, ctx context.Context, mode pgx.QueryExecMode) (*pgx.Conn, *atomic.Int64) {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	px, err := faultproxy.Start(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	var trips atomic.Int64
	px.SetRule(func(m faultproxy.Message) faultproxy.Action {
		if m.Type == 'Q' || m.Type == 'S' {
			trips.Add(1)
		}
		return faultproxy.Forward
	})
	cfg.Host, cfg.Port, cfg.TLSConfig, cfg.Fallbacks = "127.0.0.1", uint16(px.Port()), nil, nil
	cfg.DefaultQueryExecMode = mode
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn, &trips
}

// TestTimeoutsCostNoRoundTrip counts, on the wire, the round trips of a
// transaction with both timeouts set, in every exec mode, on a new
// connection (cold: pgx may prepare first) and on the next transaction
// (warm): BEGIN and the SET LOCALs take one round trip together, so a
// RunInTx of one statement takes three (BEGIN, the statement, COMMIT),
// with DeferBegin two, and a RunBatch one, as without timeouts. Modes
// that describe every statement (describe_exec) add their describes. The
// settings are read inside each transaction.
func TestTimeoutsCostNoRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opts := pgtx.Options{LockTimeout: 1234 * time.Millisecond, StatementTimeout: 5 * time.Second}
	type way struct {
		name string
		warm int64 // round trips of a warm transaction, without describes
		run  func(ctx context.Context, conn *pgx.Conn, id int) (lt, st string, err error)
	}
	inTx := func(o pgtx.Options) func(ctx context.Context, conn *pgx.Conn, id int) (lt, st string, err error) {
		return func(ctx context.Context, conn *pgx.Conn, id int) (lt, st string, err error) {
			err = pgtx.RunInTx(ctx, conn, o, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, `INSERT INTO `+b.table+` VALUES ($1, 1) RETURNING current_setting('lock_timeout'), current_setting('statement_timeout')`, id).Scan(&lt, &st)
			})
			return lt, st, err
		}
	}
	deferredOpts := opts
	deferredOpts.DeferBegin = true
	ways := []way{
		{"RunInTx", 3, inTx(opts)},
		{"RunInTx DeferBegin", 2, inTx(deferredOpts)},
		{"RunBatch", 1, func(ctx context.Context, conn *pgx.Conn, id int) (lt, st string, err error) {
			bt := &pgx.Batch{}
			bt.Queue(`INSERT INTO `+b.table+` VALUES ($1, 1) RETURNING current_setting('lock_timeout'), current_setting('statement_timeout')`, id).
				QueryRow(func(r pgx.Row) error { return r.Scan(&lt, &st) })
			return lt, st, pgtx.RunBatch(ctx, conn, opts, bt)
		}},
	}
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	id := 0
	var table []string
	for _, w := range ways {
		for _, mode := range modes {
			conn, trips := wireConn(t, b.ctx, mode)
			var got [2]int64
			for run := range got {
				id++
				trips.Store(0)
				lt, st, err := w.run(b.ctx, conn, id)
				if err != nil {
					t.Fatalf("%s, %v: %v", w.name, mode, err)
				}
				got[run] = trips.Load()
				if lt != "1234ms" || st != "5s" {
					t.Fatalf("%s, %v: lock_timeout %q, statement_timeout %q inside; want 1234ms, 5s", w.name, mode, lt, st)
				}
			}
			table = append(table, fmt.Sprintf("%-18s %-14v cold %d warm %d", w.name, mode, got[0], got[1]))
			if mode != pgx.QueryExecModeDescribeExec && got[1] != w.warm {
				t.Errorf("%s, %v: %d round trips warm, want %d", w.name, mode, got[1], w.warm)
			}
		}
	}
	t.Logf("round trips per transaction on the wire:\n%s", strings.Join(table, "\n"))
}

// beginOnly is a TxBeginner that cannot send a batch (a caller's own
// wrapper): RunInTx sends its SET LOCALs after BEGIN, in a round trip of
// their own.
type beginOnly struct{ db pgtx.TxBeginner }

func (b beginOnly) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return b.db.BeginTx(ctx, opts)
}

// The timeouts apply whichever way the transaction begins: BEGIN on its
// own with the SET LOCALs in its pipeline, a TxBeginner that cannot send a
// batch, and a deferred BEGIN whose first call cannot travel behind it
// (Prepare). A timeout the server refuses (lock_timeout is at most
// 2^31-1 ms) fails the transaction before fn runs, nothing committed, and
// every connection goes back to the pool.
func TestTimeoutsApplyOnEveryBegin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opts := pgtx.Options{LockTimeout: 1234 * time.Millisecond, StatementTimeout: 5 * time.Second}
	deferredOpts := opts
	deferredOpts.DeferBegin = true
	read := func(tx pgx.Tx) (lt, st string, err error) {
		err = tx.QueryRow(b.ctx, `SELECT current_setting('lock_timeout'), current_setting('statement_timeout')`).Scan(&lt, &st)
		return lt, st, err
	}
	for _, c := range []struct {
		name string
		db   pgtx.TxBeginner
		opts pgtx.Options
		fn   func(tx pgx.Tx) (lt, st string, err error)
	}{
		{"pool", b.pool, opts, read},
		{"begin only", beginOnly{b.pool}, opts, read},
		{"deferred, Prepare first", b.pool, deferredOpts, func(tx pgx.Tx) (lt, st string, err error) {
			if _, err := tx.Prepare(b.ctx, "timeouts_read", `SELECT 1`); err != nil {
				return "", "", err
			}
			return read(tx)
		}},
	} {
		var lt, st string
		if err := pgtx.RunInTx(b.ctx, c.db, c.opts, func(tx pgx.Tx) (err error) {
			lt, st, err = c.fn(tx)
			return err
		}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if lt != "1234ms" || st != "5s" {
			t.Fatalf("%s: lock_timeout %q, statement_timeout %q inside; want 1234ms, 5s", c.name, lt, st)
		}
		tooLong := c.opts
		tooLong.LockTimeout = 30 * 24 * time.Hour
		ran := false
		err := pgtx.RunInTx(b.ctx, c.db, tooLong, func(tx pgx.Tx) error {
			ran = true
			_, err := tx.Prepare(b.ctx, "too_long", `SELECT 1`)
			return err
		})
		if err == nil || !pgtx.Classify(err).NotCommitted || (ran && !c.opts.DeferBegin) {
			t.Fatalf("%s: a lock_timeout out of range: err %v, fn ran %v; want a not-committed error before fn", c.name, err, ran)
		}
		allReleased(t, b.pool)
	}
}
