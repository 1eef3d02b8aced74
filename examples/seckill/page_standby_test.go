package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// TestPageStandby runs the service on a throwaway primary with a
// synchronous standby: the operator page's snapshot names the standby with
// its state, sync state and lag, the page in headless Chromium shows it,
// and GET /metrics has every metric of docs/observability.md's table, the
// replication rows included.
func TestPageStandby(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	primary, err := pgharness.StartThrowaway(ctx, pgharness.Options{})
	if err != nil {
		t.Fatalf("start a throwaway PostgreSQL: %v", err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := primary.StartStandby(ctx, pgharness.StandbyOptions{Name: "replica1", Synchronous: true})
	if err != nil {
		t.Fatalf("start a standby: %v", err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	pool, err := pgxpool.New(ctx, primary.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	cfg := smallConfig(t)
	useStack(t, &cfg, stackMemory, false)
	cfg.Stock, cfg.Buckets, cfg.OrderTTL = 4, 1, time.Hour
	a, err := newAPI(ctx, pool, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveTest(t, a)
	t.Cleanup(a.Close)

	resp, next := openStream(t, ctx, srv.URL)
	defer resp.Body.Close()
	for {
		ev := next()
		if len(ev.Data.Standbys) == 0 {
			continue // the standby connected after this snapshot
		}
		sb := ev.Data.Standbys[0]
		if len(ev.Data.Standbys) != 1 || sb.Name != "replica1" || sb.SyncState != "sync" || sb.State != "streaming" || sb.ReplayLag < 0 || sb.LagBytes < 0 {
			t.Fatalf("the page's standbys: %+v, want replica1 streaming, sync", ev.Data.Standbys)
		}
		break
	}
	openPage(t, ctx, srv.URL).eventually("the replication tile naming replica1, sync, with its lag",
		`document.getElementById("replication").dataset.standbys === "1"
			&& /^replica1 \(sync\): \d+\.\d\ds, \d+ B$/.test(document.getElementById("replication").textContent)`)

	// One order, so that the per-event metrics have their series.
	if code, out := do(t, "POST", srv.URL+"/orders", map[string]any{"user_id": 1}); code != http.StatusAccepted {
		t.Fatalf("POST /orders = %d %v", code, out)
	}
	waitQuiet(t, ctx, a)
	for a.Monitor().Audit().Status == "PENDING" {
		if ctx.Err() != nil {
			t.Fatal("the operator page's monitor never audited")
		}
		time.Sleep(20 * time.Millisecond)
	}
	fams := scrapeReported(t, ctx, srv.URL, pool, cfg.Schema)
	if n := value(fams, "seckill_postgres_replication_standbys", "seckill_postgres_standby", "replica1",
		"seckill_postgres_replication_sync_state", "sync"); n != 1 {
		t.Errorf("seckill_postgres_replication_standbys{replica1, sync} = %v, want 1", n)
	}
	checkDocTable(t, ctx, pool, cfg.Schema, fams)
}
