package pgtx_test

import (
	"context"
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

	"github.com/seckillkit/seckill/internal/faultproxy"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/pgtx"
)

// wireConn returns a connection in exec mode mode through a proxy that
// counts the messages that end a round trip: a simple query ('Q') or the
// Sync ('S') that ends a pipeline, prepares included. seen gets the text
// of every simple query or parse.
func wireConn(t *testing.T, ctx context.Context, mode pgx.QueryExecMode, seen func(string)) (*pgx.Conn, *atomic.Int64) {
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
		if q := m.Query(); q != "" {
			seen(q)
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
// connection (cold: pgx prepares or describes first) and on the next
// transaction (warm): BEGIN and the SET LOCALs take one round trip
// together, so a warm RunInTx of one statement takes three (BEGIN, the
// statement, COMMIT), with DeferBegin two, and a RunBatch one, as without
// timeouts; the cold counts are those of the statement alone (pgx's
// prepare of it, or its describe in describe_exec), none for the SET
// LOCALs of a BEGIN of its own. The settings are read inside each
// transaction.
func TestTimeoutsCostNoRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opts := pgtx.Options{LockTimeout: 1234 * time.Millisecond, StatementTimeout: 5 * time.Second}
	type way struct {
		name string
		// want are the round trips, cold and warm, per exec mode (cache
		// statement, cache describe, describe exec, exec, simple protocol).
		want [5][2]int64
		// setText is in every message that sends a SET LOCAL: inlined in
		// BEGIN's simple query; "" for a pipeline, whose statements take
		// the milliseconds as a bind parameter (which pgx itself inlines
		// in the simple protocol mode).
		setText string
		run     func(ctx context.Context, conn *pgx.Conn, id int) (lt, st string, err error)
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
		{"RunInTx", [5][2]int64{{4, 3}, {4, 3}, {4, 4}, {3, 3}, {3, 3}},
			"begin isolation level read committed; SELECT set_config('lock_timeout', '1234', true); SELECT set_config('statement_timeout', '5000', true)", inTx(opts)},
		{"RunInTx DeferBegin", [5][2]int64{{3, 2}, {3, 2}, {3, 3}, {2, 2}, {2, 2}}, "", inTx(deferredOpts)},
		{"RunBatch", [5][2]int64{{2, 1}, {2, 1}, {2, 2}, {1, 1}, {1, 1}}, "", func(ctx context.Context, conn *pgx.Conn, id int) (lt, st string, err error) {
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
		for m, mode := range modes {
			var setMu sync.Mutex
			var sets []string
			conn, trips := wireConn(t, b.ctx, mode, func(q string) {
				if strings.Contains(q, "set_config") {
					setMu.Lock()
					sets = append(sets, q)
					setMu.Unlock()
				}
			})
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
			want := w.setText
			switch {
			case want != "":
			case mode == pgx.QueryExecModeSimpleProtocol:
				want = "SELECT set_config('lock_timeout',  '1234' , true)" // pgx's spacing
			default:
				want = "SELECT set_config('lock_timeout', $1, true)"
			}
			setMu.Lock()
			if !slices.ContainsFunc(sets, func(q string) bool { return strings.Contains(q, want) }) {
				t.Errorf("%s, %v: sent %q, want a message containing %q", w.name, mode, sets, want)
			}
			setMu.Unlock()
			table = append(table, fmt.Sprintf("%-18s %-14v cold %d warm %d", w.name, mode, got[0], got[1]))
			if got != w.want[m] {
				t.Errorf("%s, %v: %d round trips cold, %d warm; want %d and %d", w.name, mode, got[0], got[1], w.want[m][0], w.want[m][1])
			}
		}
	}
	t.Logf("round trips per transaction on the wire:\n%s", strings.Join(table, "\n"))
}

// beginOnly is a TxBeginner that cannot send a batch (a caller's own
// wrapper).
type beginOnly struct{ db pgtx.TxBeginner }

func (b beginOnly) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return b.db.BeginTx(ctx, opts)
}

// The timeouts apply whichever way the transaction begins: BEGIN on its
// own with the SET LOCALs in its message, a TxBeginner that cannot send a
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
