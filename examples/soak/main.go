// Command soak runs the seckill example flow under sustained load and
// prints, after every round, what must stay bounded: the size of the inbox
// and outbox tables (purged every round) and of the hot bucket table, their
// dead tuples, autovacuum runs, the cost of an outbox claim (buffers
// touched, and its latency) and the order transactions' latency.
//
//	go run ./examples/soak -duration 30m -svg .
//	go run ./examples/soak -rows 10000000 -duration 10m
//
// With -archive the retention jobs archive (inbox.Store.Archive,
// outbox.Store.ArchiveSent) instead of purging, and every round also
// prints the rows archived, the time and the WAL per archived row; -rows N
// (which implies -archive) first preloads N rows of history (half SENT
// events, half processed inbox rows) for the first round to move.
//
// It uses SECKILL_DATABASE_URL when set (then it works in a schema of its
// own, dropped at the end unless -keep); otherwise a throwaway cluster with
// an eager autovacuum (autovacuum_naptime = 1s), removed at exit. To
// measure the bucket table's row versions it runs CREATE EXTENSION IF NOT
// EXISTS pgstattuple (a contrib module shipped with PostgreSQL), which on
// the database of SECKILL_DATABASE_URL stays after the run; without the
// privilege the row versions print as -1. At the
// end it prints the first sample after the warm-up next to the last and
// runs the flow's audit; it exits 1 if the audit fails.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/soak"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgharness"
)

func main() {
	duration := flag.Duration("duration", 2*time.Minute, "how long to run")
	users := flag.Int("users", 300, "buyers per round")
	workers := flag.Int("workers", 8, "consumers")
	schema := flag.String("schema", fmt.Sprintf("soak_%d", time.Now().Unix()), "schema to work in")
	keep := flag.Bool("keep", false, "keep the schema at the end")
	svgDir := flag.String("svg", "", "also write table sizes, the claim's cost and the backlog over time as SVG charts into this directory")
	archive := flag.Bool("archive", false, "archive the inbox and the outbox instead of purging them")
	rows := flag.Int64("rows", 0, "preload this many rows of history (half events, half inbox rows) for the archive to move (implies -archive)")
	flag.Parse()
	if err := run(*duration, *users, *workers, *schema, *keep, *svgDir, *archive || *rows > 0, *rows); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(duration time.Duration, users, workers int, schema string, keep bool, svgDir string, archive bool, rows int64) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	srv, err := pgharness.Start(ctx, pgharness.Options{MaxConnections: 60, Settings: soak.ServerSettings})
	if err != nil {
		return err
	}
	defer srv.Stop()
	cfg, err := pgxpool.ParseConfig(srv.URL)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(workers + 4)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if !srv.Owned() && !keep {
		defer pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}
	fmt.Printf("soak: %v, %d buyers a round, %d consumers, schema %s, archive %v, %d rows of history\n", duration, users, workers, schema, archive, rows)
	began := time.Now()
	samples, err := soak.Run(ctx, soak.Config{Pool: pool, Schema: schema, Duration: duration, Users: users, Workers: workers,
		Archive: archive, Backlog: rows, Sample: func(s soak.Sample) {
			if s.Round == 1 && rows > 0 {
				fmt.Printf("preloaded %d rows of history in %v\n", rows, (time.Since(began) - s.Elapsed).Round(time.Second))
			}
			fmt.Println(s)
		}})
	if err != nil && ctx.Err() == nil {
		return err
	}
	if len(samples) == 0 {
		return fmt.Errorf("no round finished")
	}
	if svgDir != "" {
		if err := soak.WriteSVG(svgDir, samples); err != nil {
			return err
		}
		fmt.Printf("charts: %s in %s\n", strings.Join(soak.PlotFiles, ", "), svgDir)
	}
	first, last := samples[min(2, len(samples)-1)], samples[len(samples)-1]
	fmt.Printf("\nafter round %d: inbox %s, outbox %s, buckets %s (row versions %d B), claim %d buffers %v\n",
		first.Round, kb(first.InboxBytes), kb(first.OutboxBytes), kb(first.BucketBytes), first.BucketVersionBytes, first.ClaimBlocks, first.ClaimLatency.Round(time.Microsecond))
	fmt.Printf("after round %d: inbox %s, outbox %s, buckets %s (row versions %d B), claim %d buffers %v (%d orders, %d autovacuums)\n",
		last.Round, kb(last.InboxBytes), kb(last.OutboxBytes), kb(last.BucketBytes), last.BucketVersionBytes, last.ClaimBlocks, last.ClaimLatency.Round(time.Microsecond), last.Orders, last.Autovacuums)
	// The audit reads every order and ledger row: minutes after a long run.
	actx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	began = time.Now()
	checks, err := last.Flow.Audit(actx)
	if err != nil {
		return err
	}
	fmt.Printf("audit of %d orders took %v\n", last.Orders, time.Since(began).Round(time.Millisecond))
	for _, c := range checks {
		status := "PASS"
		if !c.Pass {
			status = "FAIL"
		}
		fmt.Printf("audit %s [%s] %s: %s\n", status, c.Invariant, c.Name, c.Detail)
	}
	if !flow.Passed(checks) {
		return fmt.Errorf("audit failed")
	}
	return nil
}

func kb(b int64) string { return fmt.Sprintf("%dkB", b/1024) }
