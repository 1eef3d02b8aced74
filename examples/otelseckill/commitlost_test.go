package otelseckill_test

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/otelseckill"
	"github.com/seckillkit/seckill/internal/faultproxy"
	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

// TestTxCommitLost: the connection is cut after the server ran COMMIT and
// before its answer reached the client. Without resolution the call's
// span and duration say unknown (and the row is there: unknown is not
// "not committed"); with resolution they say committed. Both attempts
// carry commit_lost, and the commit_lost counter has one per call by what
// was found.
func TestTxCommitLost(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := seckilltest.New(t)
	b := setup(t)
	table := pgx.Identifier{db.Schema, "item"}.Sanitize()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE `+table+` (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	px, err := faultproxy.Start(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(px.Port())
	cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = nil, nil
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	insert := func(id int, resolve bool) error {
		var done atomic.Bool
		px.SetRule(func(m faultproxy.Message) faultproxy.Action {
			if strings.EqualFold(strings.TrimSpace(m.Query()), "commit") && done.CompareAndSwap(false, true) {
				return faultproxy.CutAfter
			}
			return faultproxy.Forward
		})
		return pgtx.RunInTx(ctx, pool, pgtx.Options{Name: "insert", ResolveCommit: resolve, ResolveDB: db.Pool, Observer: b.obs.Tx},
			func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO `+table+` (id) VALUES ($1)`, id)
				return err
			})
	}
	if err := insert(1, false); !errors.Is(err, pgtx.ErrCommitOutcomeUnknown) {
		t.Fatalf("unresolved: %v, want ErrCommitOutcomeUnknown", err)
	}
	if err := insert(2, true); err != nil {
		t.Fatalf("resolved: %v, want nil (committed)", err)
	}
	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 2 || px.Cuts() != 2 {
		t.Fatalf("%d rows after %d cuts, want 2, 2 (both COMMITs reached the server)", rows, px.Cuts())
	}

	outcomes := map[string]int{}
	for _, s := range b.ended("pgtx insert") {
		o, _ := attr(s, otelseckill.AttrTxOutcome)
		outcomes[o.AsString()]++
		if e, _ := attr(s, "error.type"); o.AsString() == "unknown" && e.AsString() != "commit_outcome_unknown" {
			t.Errorf("unknown call span error.type %q, want commit_outcome_unknown", e.AsString())
		}
	}
	if outcomes["unknown"] != 1 || outcomes["committed"] != 1 {
		t.Errorf("call spans by outcome %v, want 1 unknown, 1 committed", outcomes)
	}
	for _, s := range b.ended(otelseckill.SpanAttempt) {
		if l, _ := attr(s, otelseckill.AttrTxCommitLost); !l.AsBool() {
			t.Errorf("an attempt span without commit_lost")
		}
	}
	rm := collect(t, b.reader)
	lost := find(t, rm, otelseckill.MetricTxCommitLost)
	if u, c := sum(t, lost, otelseckill.AttrTxOutcome.String("unknown")), sum(t, lost, committed); u != 1 || c != 1 {
		t.Errorf("%s: unknown %v, committed %v; want 1, 1", otelseckill.MetricTxCommitLost, u, c)
	}
	dur := find(t, rm, otelseckill.MetricTxDuration)
	if u, c := sum(t, dur, otelseckill.AttrTxOutcome.String("unknown")), sum(t, dur, committed); u != 1 || c != 1 {
		t.Errorf("%s: unknown %v, committed %v; want 1, 1", otelseckill.MetricTxDuration, u, c)
	}
}
