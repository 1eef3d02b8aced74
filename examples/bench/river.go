package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// River side by side with the relay: jobs inserted first, then worked by
// a no-op worker, on the same server and the same pool as the relay's run,
// with as many jobs as the relay has events. River is a dependency of the
// examples module only.

// noopArgs is the bench's River job.
type noopArgs struct{}

func (noopArgs) Kind() string { return "bench_noop" }

// noopWorker works a job by doing nothing but counting it, and closes
// done when the target is reached, so that the bench reads river_job only
// once every job was worked (a count(*) scan of the table every few
// milliseconds while River works would slow it down).
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	n      *atomic.Int64
	target int64
	done   chan struct{}
	once   *sync.Once
}

func (w noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	if w.n.Add(1) >= w.target {
		w.once.Do(func() { close(w.done) })
	}
	return nil
}

const riverSchema = "bench_river"

// riverSetup creates River's tables in a schema of their own.
func riverSetup(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+riverSchema+" CASCADE; CREATE SCHEMA "+riverSchema); err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: riverSchema, Logger: quiet})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// drainRiver inserts n jobs, then starts a client with maxWorkers workers
// and returns how long it took from the start until every job was
// completed (checked in river_job, polled from when the worker has seen
// them all: River marks jobs completed in batches after Work returns).
func drainRiver(ctx context.Context, pool *pgxpool.Pool, n, maxWorkers int) (time.Duration, error) {
	if _, err := pool.Exec(ctx, "TRUNCATE "+riverSchema+".river_job"); err != nil {
		return 0, err
	}
	worked := noopWorker{n: new(atomic.Int64), target: int64(n), done: make(chan struct{}), once: new(sync.Once)}
	workers := river.NewWorkers()
	river.AddWorker(workers, worked)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:  riverSchema,
		Logger:  quiet,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers: workers,
	})
	if err != nil {
		return 0, err
	}
	params := make([]river.InsertManyParams, 0, 10_000)
	for left := n; left > 0; left -= len(params) {
		params = params[:0]
		for range min(left, 10_000) {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return 0, err
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+riverSchema+".river_job"); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	select {
	case <-worked.done:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	var done time.Duration
	for {
		var left int64
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+riverSchema+".river_job WHERE state <> 'completed'").Scan(&left); err != nil {
			return 0, err
		}
		if left == 0 {
			done = time.Since(start)
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := client.Stop(sctx); err != nil {
		return done, err
	}
	var completed int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+riverSchema+".river_job WHERE state = 'completed'").Scan(&completed); err != nil {
		return done, err
	}
	if completed != int64(n) {
		return done, fmt.Errorf("river completed %d jobs, want %d", completed, n)
	}
	return done, nil
}
