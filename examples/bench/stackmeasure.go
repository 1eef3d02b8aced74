package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The components whose CPU time -stack reads, in the table's order; the
// load generator (this process) is shown apart from the total.
const (
	cpuPostgres = iota
	cpuService
	cpuNATS
	cpuRedis
	cpuLoad
	nComponents
)

var componentNames = [nComponents]string{"PostgreSQL", "service", "nats-server", "redis-server", "load generator"}

// snapshot is what the start and the end of a window read.
type snapshot struct {
	at      time.Time
	cpu     [nComponents]time.Duration
	lsn     uint64 // the nodes' WAL positions added up
	nodeCPU []time.Duration
	nodeLSN []uint64
}

// stmtLine is one statement of pg_stat_statements over a window.
type stmtLine struct {
	calls      int64
	totalMS    float64
	rows       int64
	walBytes   float64
	normalized string
}

// rateResult is one offered rate's measurements over its window.
type rateResult struct {
	offered       int
	window        time.Duration
	orders        int64 // order rows created in the window
	clicks        int   // clicks scheduled in the window
	late, notSent int64
	status        map[int32]int64 // every click's answer, warm-up included
	accepted      int64           // window clicks answered 202
	ordered       int64           // window clicks whose order was created (by the end of the drain)
	lat           []time.Duration // click (scheduled time) → order row created, window clicks
	cpu           [nComponents]time.Duration
	walBytes      int64
	wal           []walShare // the window's WAL by relation (a throwaway single server only)
	stmts         []stmtLine
	stmtsTotalMS  float64      // every statement's time, for the shares
	nodes         []nodeWindow // per PostgreSQL node (Citus: coordinator first, then the workers)
}

func (r *rateResult) ordersPerSec() float64 { return ratio(float64(r.orders), r.window.Seconds()) }

// perOrder is d per order of the window, in µs.
func (r *rateResult) perOrder(d time.Duration) float64 {
	return ratio(float64(d.Microseconds()), float64(r.orders))
}

// totalCPU is the stack's CPU time: every component but the load generator.
// walPerOrder is the window's WAL bytes per order created in it.
func (r *rateResult) walPerOrder() float64 { return ratio(float64(r.walBytes), float64(r.orders)) }

// walOf is the window's WAL bytes (pg_waldump) of table, in any schema,
// and its indexes.
func (r *rateResult) walOf(table string) int64 {
	var n int64
	for _, s := range r.wal {
		rel, _, _ := strings.Cut(s.name, "/")
		if rel == table || strings.HasSuffix(rel, "."+table) {
			n += s.bytes
		}
	}
	return n
}

func (r *rateResult) totalCPU() time.Duration {
	return r.cpu[cpuPostgres] + r.cpu[cpuService] + r.cpu[cpuNATS] + r.cpu[cpuRedis]
}

func (r *rateResult) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	slices.Sort(r.lat)
	return r.lat[min(len(r.lat)-1, int(p*float64(len(r.lat))))]
}

// measureRate offers rate clicks/s of new buyers for o.warmup (untimed)
// then o.duration (the window), reads CPU, WAL and pg_stat_statements at
// the window's two ends, waits for the queue to drain and matches each
// window click to its order row.
func (sr *stackRun) measureRate(ctx context.Context, rate int) (rateResult, error) {
	o := sr.o
	n := int(float64(rate) * (o.warmup + o.duration).Seconds())
	first := sr.buyer + 1
	sr.buyer += int64(n)
	tokens, err := sr.svc.mintTokens(first, n)
	if err != nil {
		return rateResult{}, err
	}
	load := clickLoad{url: "http://" + sr.svc.addr + "/orders", client: newLoadClient(), rate: rate, first: first, tokens: tokens}
	start := time.Now().Add(100 * time.Millisecond)
	done := make(chan *clicks, 1)
	go func() { done <- load.run(ctx, start) }()
	time.Sleep(time.Until(start.Add(o.warmup)))
	if err := sr.resetStatements(ctx); err != nil {
		return rateResult{}, err
	}
	s0, err := sr.snapshot(ctx)
	if err != nil {
		return rateResult{}, err
	}
	time.Sleep(time.Until(start.Add(o.warmup + o.duration)))
	s1, err := sr.snapshot(ctx)
	if err != nil {
		return rateResult{}, err
	}
	r := rateResult{offered: rate, window: s1.at.Sub(s0.at), walBytes: int64(s1.lsn - s0.lsn), status: map[int32]int64{}}
	for i := range r.cpu {
		r.cpu[i] = s1.cpu[i] - s0.cpu[i]
	}
	if r.nodes, err = sr.nodeWindows(ctx, s0, s1, 5); err != nil {
		return r, err
	}
	r.stmts, r.stmtsTotalMS = r.nodes[0].stmts, r.nodes[0].stmtsMS
	if sr.srv.Owned() && len(sr.nodes) == 1 {
		if r.wal, err = walByRelation(ctx, sr.pool, sr.srv.BinDir(), filepath.Join(sr.srv.Dir(), "data", "pg_wal"), s0.lsn, s1.lsn); err != nil {
			return r, err
		}
	}
	c := <-done
	if err := sr.drain(ctx, c); err != nil {
		return r, err
	}
	return r, sr.matchOrders(ctx, c, s0.at, s1.at, &r)
}

// snapshot reads every component's CPU time and the WAL positions.
func (sr *stackRun) snapshot(ctx context.Context) (snapshot, error) {
	s := snapshot{at: time.Now()}
	var err error
	if s.nodeCPU, s.nodeLSN, err = sr.readNodes(ctx); err != nil {
		return s, fmt.Errorf("PostgreSQL: %w", err)
	}
	var pg time.Duration
	for i := range s.nodeCPU {
		pg += s.nodeCPU[i]
		s.lsn += s.nodeLSN[i]
	}
	s.cpu = [nComponents]time.Duration{pg, processCPUOf(sr.svc.pid()), processCPUOf(sr.nats.PID()), processCPUOf(sr.redis.PID()), processCPU()}
	return s, nil
}

// parseLSN parses a pg_lsn's text, "hi/lo" in hex, into a byte position.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad LSN %q", s)
	}
	return h<<32 | l, nil
}

// readOnlyStatement is the SQL test of a pg_stat_statements row for a
// read: a SELECT or WITH that writes nothing, locks no row and sets no
// setting (the order path's set_config of its lock_timeout). During a
// -stack window those are the operator view's checks (live audit and
// reconciliation) and figures, and any other read (the order path has
// none but a duplicate's lookup): their share of the statement time is
// an upper bound of what watching the sale costs PostgreSQL.
const readOnlyStatement = `query ~* '^\s*(SELECT|WITH)\M' AND query !~* '\m(INSERT|UPDATE|DELETE)\M|\mSKIP\s+LOCKED\M|\mFOR\s+(NO\s+KEY\s+)?(UPDATE|SHARE)\M|^\s*SELECT\s+set_config\('`

// statements is a window's pg_stat_statements, since the last reset.
type statements struct {
	top      []stmtLine // the statements that took the most execution time
	allMS    float64    // every statement's execution time
	allCalls int64
	readMS   float64    // the read-only statements' (readOnlyStatement)
	readTop  []stmtLine // the read-only statements that took the most
}

// topStatements reads the n statements that took the most execution time
// since the last pg_stat_statements_reset, the n read-only ones that did,
// and the time and calls of all and of the read-only ones.
func topStatements(ctx context.Context, pool *pgxpool.Pool, n int) (st statements, err error) {
	rows, err := pool.Query(ctx, `SELECT calls, total_exec_time, rows, wal_bytes, regexp_replace(left(query, 110), '\s+', ' ', 'g'),
		sum(total_exec_time) OVER (), sum(calls) OVER (), coalesce(sum(total_exec_time) FILTER (WHERE `+readOnlyStatement+`) OVER (), 0),
		`+readOnlyStatement+`
		FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC`)
	if err != nil {
		return st, err
	}
	defer rows.Close()
	for rows.Next() {
		var l stmtLine
		var wal, calls pgtype.Numeric
		var readOnly bool
		if err := rows.Scan(&l.calls, &l.totalMS, &l.rows, &wal, &l.normalized, &st.allMS, &calls, &st.readMS, &readOnly); err != nil {
			return st, err
		}
		wf, _ := wal.Float64Value()
		l.walBytes = wf.Float64
		cf, _ := calls.Float64Value()
		st.allCalls = int64(cf.Float64)
		if len(st.top) < n {
			st.top = append(st.top, l)
		}
		if readOnly && len(st.readTop) < n {
			st.readTop = append(st.readTop, l)
		}
	}
	return st, rows.Err()
}

// drain waits until every click c's load got a 202 for has its order
// row (the buyers are new and the stock ample: each accepted click ends in
// an order once the queue has drained), or until no order has been
// created for 15 seconds, at most two minutes.
func (sr *stackRun) drain(ctx context.Context, c *clicks) error {
	var accepted int64
	for _, st := range c.status {
		if st == 202 {
			accepted++
		}
	}
	q := "SELECT count(*) FROM " + pgx.Identifier{stackSchema, "orders"}.Sanitize() + " WHERE user_id BETWEEN $1 AND $2"
	last, moved := int64(-1), time.Now()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		var n int64
		if err := sr.pool.QueryRow(ctx, q, c.first, c.first+int64(len(c.status))-1).Scan(&n); err != nil {
			return err
		}
		if n >= accepted {
			return nil
		}
		if n != last {
			last, moved = n, time.Now()
		} else if time.Since(moved) >= 15*time.Second {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Fprintf(stderr, "bench: stack: %d clicks were answered 202, %d orders were created\n", accepted, last)
	return nil
}

// matchOrders counts the window's orders and matches each click scheduled
// in [t0, t1) to its buyer's order row: click → order is the row's
// created_at (statement_timestamp() of the order INSERT, in the
// transaction that commits it) minus the click's scheduled time.
func (sr *stackRun) matchOrders(ctx context.Context, c *clicks, t0, t1 time.Time, r *rateResult) error {
	orders := pgx.Identifier{stackSchema, "orders"}.Sanitize()
	if err := sr.pool.QueryRow(ctx, "SELECT count(*) FROM "+orders+" WHERE created_at >= $1 AND created_at < $2", t0, t1).Scan(&r.orders); err != nil {
		return err
	}
	r.late = c.late.Load()
	inWindow := func(i int) bool { s := c.sched(i); return !s.Before(t0) && s.Before(t1) }
	for i, st := range c.status {
		r.status[st]++
		if st == -1 {
			r.notSent++
		}
		if inWindow(i) {
			r.clicks++
			if st == 202 {
				r.accepted++
			}
		}
	}
	rows, err := sr.pool.Query(ctx, "SELECT user_id, created_at FROM "+orders+" WHERE user_id BETWEEN $1 AND $2",
		c.first, c.first+int64(len(c.status))-1)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var user int64
		var at time.Time
		if err := rows.Scan(&user, &at); err != nil {
			return err
		}
		if i := int(user - c.first); inWindow(i) {
			r.ordered++
			r.lat = append(r.lat, at.Sub(c.sched(i)))
		}
	}
	return rows.Err()
}
