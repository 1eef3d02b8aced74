package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
)

// activitySchema is the schema of activity i (1-based) of a run over
// several activities: each activity lives in its own schema, which on
// Citus with schema-based sharding is a distributed schema placed whole on
// one worker.
func activitySchema(base string, i int) string {
	if base == "" {
		base = "seckill"
	}
	return fmt.Sprintf("%s_a%d", base, i)
}

// manyResult is what a run over several activities (or on Citus) reports.
type manyResult struct {
	Reports []report
	Schemas []string
	// Citus only: the worker each schema lives on, and the two-phase
	// commits the coordinator recorded from the moment every activity was
	// set up (schemas migrated, stock provisioned) to the end of the run.
	Nodes     []string
	TwoPhase  int64
	Orders    int64
	CitusRuns bool
}

// Passed reports whether every activity passed its audit and
// reconciliation and, on Citus, at most one order transaction in 100 used
// a two-phase commit.
func (m manyResult) Passed() bool {
	for _, r := range m.Reports {
		if !r.Passed() {
			return false
		}
	}
	return len(m.Reports) > 0 && (!m.CitusRuns || m.TwoPhase*100 <= m.Orders)
}

func (m manyResult) print(w io.Writer) {
	for i, r := range m.Reports {
		where := ""
		if i < len(m.Nodes) && m.Nodes[i] != "" {
			where = " on " + m.Nodes[i]
		}
		fmt.Fprintf(w, "== activity %d, schema %s%s\n", i+1, m.Schemas[i], where)
		r.print(w)
	}
	if m.CitusRuns {
		verdict := "PASS"
		if m.TwoPhase*100 > m.Orders {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "citus: %d activities, %d orders, %d two-phase commits during the sale (goal: at most 1 per 100 orders): %s\n",
			len(m.Reports), m.Orders, m.TwoPhase, verdict)
	}
}

// runMany runs cfg.Activities sales at once, activity i in schema
// activitySchema(cfg.Schema, i) with activity id i, each with its own
// service, front door and broker streams, all on pool; then audits and
// reconciles each. hooks (may be nil) go to activity 1. With cfg.Citus,
// pool must reach a Citus coordinator that keeps its two-phase commit
// records (citus.recover_2pc_interval = -1): the run counts them.
func runMany(ctx context.Context, pool *pgxpool.Pool, cfg config, log *slog.Logger, hooks *saleHooks) (manyResult, error) {
	n := max(cfg.Activities, 1)
	res := manyResult{Reports: make([]report, n), Schemas: make([]string, n), CitusRuns: cfg.Citus}
	if cfg.Citus {
		if err := citusReady(ctx, pool); err != nil {
			return res, err
		}
	}
	var (
		setUp  sync.WaitGroup
		ready  = make(chan struct{})
		wg     sync.WaitGroup
		errs   = make([]error, n)
		before int64
	)
	setUp.Add(n)
	for i := range n {
		c := cfg
		c.Activity = int64(i + 1)
		c.Schema = cfg.Schema
		if n > 1 {
			c.Schema = activitySchema(cfg.Schema, i+1)
		}
		c.Seed = cfg.Seed + uint64(i)
		res.Schemas[i] = c.Schema
		var once sync.Once
		h := &saleHooks{}
		if i == 0 && hooks != nil {
			*h = *hooks
		}
		userStarted := h.started
		h.started = func(s *service) {
			once.Do(setUp.Done)
			<-ready // every activity is set up and the count taken
			if userStarted != nil {
				userStarted(s)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer once.Do(setUp.Done) // a run that failed before it started
			res.Reports[i], errs[i] = runSaleHooked(ctx, pool, c, log, nil, h)
		}()
	}
	setUp.Wait()
	var err error
	if cfg.Citus {
		before, err = twoPhaseCommits(ctx, pool)
	}
	close(ready)
	wg.Wait()
	if err != nil {
		return res, err
	}
	for i, e := range errs {
		if e != nil {
			return res, fmt.Errorf("activity %d (schema %s): %w", i+1, res.Schemas[i], e)
		}
	}
	for _, r := range res.Reports {
		res.Orders += r.Created
	}
	if cfg.Citus {
		after, err := twoPhaseCommits(ctx, pool)
		if err != nil {
			return res, err
		}
		res.TwoPhase = after - before
		if res.Nodes, err = schemaNodes(ctx, pool, res.Schemas); err != nil {
			return res, err
		}
	}
	return res, nil
}

// citusReady checks that pool reaches a Citus coordinator that keeps its
// two-phase commit records, which the run counts.
func citusReady(ctx context.Context, pool *pgxpool.Pool) error {
	var version string
	err := pool.QueryRow(ctx, `SELECT extversion FROM pg_extension WHERE extname = 'citus'`).Scan(&version)
	if err != nil {
		return fmt.Errorf("-citus: the database has no citus extension (%w): point %s at a Citus coordinator", err, "SECKILL_DATABASE_URL")
	}
	var interval string
	if err := pool.QueryRow(ctx, `SHOW citus.recover_2pc_interval`).Scan(&interval); err != nil {
		return err
	}
	if interval != "-1" {
		return errors.New("-citus: the coordinator recovers (and so deletes) its two-phase commit records every " + interval +
			`; to count them, run ALTER SYSTEM SET citus.recover_2pc_interval = -1; SELECT pg_reload_conf(); on it first`)
	}
	return nil
}

// twoPhaseCommits counts the distributed transactions that committed with
// two phases, from the coordinator's records: one row per worker
// connection, so rows are grouped by transaction (the gid without its
// connection number).
func twoPhaseCommits(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT count(DISTINCT regexp_replace(gid, '_[0-9]+$', '')) FROM pg_dist_transaction`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count two-phase commits: %w", err)
	}
	return n, nil
}

// schemaNodes names the worker (host:port) that holds each schema's
// tables.
func schemaNodes(ctx context.Context, pool *pgxpool.Pool, schemas []string) ([]string, error) {
	out := make([]string, len(schemas))
	for i, s := range schemas {
		rows, err := pool.Query(ctx, `SELECT DISTINCT nodename || ':' || nodeport FROM citus_shards
			WHERE citus_table_type = 'schema' AND table_name::text LIKE $1 || '.%' ORDER BY 1`, quoteIdentLike(s))
		if err != nil {
			return nil, err
		}
		var nodes []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				rows.Close()
				return nil, err
			}
			nodes = append(nodes, n)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out[i] = strings.Join(nodes, ", ")
	}
	return out, nil
}

// quoteIdentLike is schema s as it prefixes a table name's text, with the
// LIKE wildcards escaped.
func quoteIdentLike(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(s)
}
