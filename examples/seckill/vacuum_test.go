package main

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
)

// GET /metrics shows what holds vacuum back: while a transaction keeps a
// snapshot open, the age of the oldest xmin held by a backend grows with
// every transaction after it; once it ends, the age falls back. The dead
// tuples and the HOT and non-HOT updates of the bucket table are there too.
// Not parallel: the gauge is the oldest xmin of the whole cluster, and a
// sibling test's snapshot would be counted with the holder's.
func TestMetricsShowXminHeldBack(t *testing.T) {
	ctx := pgtest.Context(t, 2*time.Minute)
	cfg := smallConfig(t)
	useStack(t, &cfg, stackMemory, false)
	pool := pgtest.Pool(t)
	a, err := newAPI(ctx, pool, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	srv := serveTest(t, a) // /metrics from the operators' face

	holder, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT 1`); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	// 300 transactions that take a transaction id each.
	for range 300 {
		if _, err := pool.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
			t.Fatal(err)
		}
	}
	held := value(scrape(t, srv.URL), "seckill_db_oldest_xmin_age", "holder", "backend")
	if held < 300 {
		t.Fatalf("oldest backend xmin age %v while a snapshot is held across 300 transactions, want at least 300", held)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Another process's short transaction may still hold an old snapshot
	// for a moment (autovacuum, a test of another package on a shared
	// server): the age must drop below 300 within a deadline of its own.
	fams := scrape(t, srv.URL)
	for deadline := time.Now().Add(30 * time.Second); ; {
		after := value(fams, "seckill_db_oldest_xmin_age", "holder", "backend")
		if after < 300 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("oldest backend xmin age %v 30s after the snapshot ended, was %v: not released", after, held)
		}
		time.Sleep(100 * time.Millisecond)
		fams = scrape(t, srv.URL)
	}
	if fams["seckill_db_dead_tuples"] == nil || fams["seckill_db_updates"] == nil || fams["seckill_db_inactive_slot_wal_bytes"] == nil {
		t.Fatal("the dead tuples, updates or slot WAL gauges are missing from /metrics")
	}
}
