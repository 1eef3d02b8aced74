package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
)

// TestActivitiesRunAtOnce runs two activities at once on the real stack
// (one Redis and one NATS server for both): each sells in its own schema
// under its own activity id, and each passes its own audit and
// reconciliation with counts that add up, so neither's front door keys nor
// broker streams reached the other.
func TestActivitiesRunAtOnce(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 4*time.Minute)
	cfg := smallConfig(t)
	cfg.Activities = 2
	cfg.Stock, cfg.Buyers = 150, 450
	useStack(t, &cfg, stackReal, false)
	pool := pgtest.Pool(t)
	t.Cleanup(func() {
		for i := 1; i <= cfg.Activities; i++ {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{activitySchema(cfg.Schema, i)}.Sanitize()+" CASCADE")
		}
	})
	res, err := runMany(ctx, pool, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Reports) != 2 || res.Schemas[0] == res.Schemas[1] || !res.Passed() {
		t.Fatalf("reports for schemas %v, passed %v", res.Schemas, res.Passed())
	}
	for i, rep := range res.Reports {
		c := cfg
		c.Schema = res.Schemas[i]
		checkSale(t, c, rep)
		var activities []int64
		rows, err := pool.Query(ctx, "SELECT DISTINCT activity_id FROM "+pgx.Identifier{c.Schema, "orders"}.Sanitize())
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var a int64
			if err := rows.Scan(&a); err != nil {
				t.Fatal(err)
			}
			activities = append(activities, a)
		}
		if rows.Err() != nil || len(activities) != 1 || activities[0] != int64(i+1) {
			t.Fatalf("schema %s holds orders of activities %v (%v), want only %d", c.Schema, activities, rows.Err(), i+1)
		}
	}
}

// TestCancelStopsTheSale: a run whose context is cancelled mid-sale (as
// SIGINT or SIGTERM does) returns the cancellation, also when the queue is
// full and every click is answered busy: its consumers have stopped, and
// the buyers must stop retrying. The wait is a hang detector; the run
// returns within moments.
func TestCancelStopsTheSale(t *testing.T) {
	t.Parallel()
	cfg := smallConfig(t)
	cfg.QueueDepth = 4 // full at once when the consumers stop
	useStack(t, &cfg, stackMemory, false)
	ctx, cancel := context.WithCancel(pgtest.Context(t, 4*time.Minute))
	defer cancel()
	hooks := &saleHooks{click: func(i, total int) {
		if i == total/3 {
			cancel()
		}
	}}
	done := make(chan error, 1)
	go func() {
		_, err := runSaleHooked(ctx, pgtest.Pool(t), cfg, nil, nil, hooks)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled sale returned %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the sale was cancelled and has not returned after a minute")
	}
}
