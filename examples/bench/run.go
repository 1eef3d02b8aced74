package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/orderid"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/roundtrip"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

var stderr io.Writer = os.Stderr

type cellKey struct {
	variant   string
	buckets   int
	consumers int
}

type agg struct {
	orders, errors int64
	elapsed        time.Duration
	lat            []time.Duration
	rt             int64
	waits          waitSample
	cpu            time.Duration
}

// cpuPerOrder is the client's CPU time per order, in µs.
func (a *agg) cpuPerOrder() float64 {
	if a.orders == 0 {
		return 0
	}
	return float64(a.cpu.Microseconds()) / float64(a.orders)
}

func (a *agg) ordersPerSec() float64 {
	if a.elapsed <= 0 {
		return 0
	}
	return float64(a.orders) / a.elapsed.Seconds()
}

func (a *agg) pct(p float64) time.Duration {
	if len(a.lat) == 0 {
		return 0
	}
	slices.Sort(a.lat)
	return a.lat[min(len(a.lat)-1, int(p*float64(len(a.lat))))]
}

func (a *agg) rtPerOrder() float64 {
	if a.orders == 0 {
		return 0
	}
	return float64(a.rt) / float64(a.orders+a.errors)
}

func run(ctx context.Context, o options) error {
	began := time.Now()
	srv, err := pgharness.Start(ctx, serverOptions(o))
	if err != nil {
		return err
	}
	defer srv.Stop()
	if os.Getenv(pgharness.EnvURL) == "" {
		fmt.Fprintln(stderr, "bench: started a throwaway PostgreSQL; set", pgharness.EnvURL, "to use your own")
	}
	var rt roundtrip.Counter
	pool, err := newPool(ctx, srv.URL, o.poolSize, &rt)
	if err != nil {
		return err
	}
	defer pool.Close()
	sconn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		return err
	}
	defer sconn.Close(context.Background())
	sampler := &waitSampler{conn: sconn, app: benchApp}

	if o.statements {
		if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
			return err
		}
	}
	if o.cpuprofile != "" {
		stop, err := startCPUProfile(o.cpuprofile)
		if err != nil {
			return err
		}
		defer stop()
	}
	vs, err := pickVariants(o.variants)
	if err != nil {
		return err
	}
	rs := newOrderRuns(pool, o, vs, &rt, sampler)
	if err := rs.warmUp(ctx); err != nil {
		return err
	}
	if err := rs.runRounds(ctx); err != nil {
		return err
	}

	ob, err := runOutbox(ctx, pool, o)
	if err != nil {
		return err
	}

	// Report.
	out := os.Stdout
	if err := rs.report(out); err != nil {
		return err
	}
	reportOutbox(out, o, ob)
	fmt.Fprintf(out, "\nfinished in %s\n\n", time.Since(began).Round(time.Second))
	rs.printResult(out, ob)
	return rs.auditErr()
}

// serverOptions are the options of the server the bench runs on:
// pg_stat_statements loaded with -statements.
func serverOptions(o options) pgharness.Options {
	var popts pgharness.Options
	if o.statements {
		popts.Settings = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all"}
	}
	return popts
}

// startCPUProfile starts a Go CPU profile into path; stop ends it.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, err
	}
	return pprof.StopCPUProfile, nil
}

// pickVariants returns the variants the comma-separated names name, in
// their order.
func pickVariants(names string) ([]variant, error) {
	var vs []variant
	for _, name := range strings.Split(names, ",") {
		found := false
		for _, v := range allVariants() {
			if v.name == strings.TrimSpace(name) {
				vs, found = append(vs, v), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown variant %q", name)
		}
	}
	return vs, nil
}

// orderRuns are the order transaction runs: what every run shares, and
// what the runs gather for the report.
type orderRuns struct {
	pool    *pgxpool.Pool
	o       options
	vs      []variant
	rt      *roundtrip.Counter
	sampler *waitSampler
	ids     orderid.Generator
	users   atomic.Int64

	results   map[cellKey]*agg
	audits    map[string][]string // variant → failures
	auditRuns map[string]int
}

func newOrderRuns(pool *pgxpool.Pool, o options, vs []variant, rt *roundtrip.Counter, sampler *waitSampler) *orderRuns {
	return &orderRuns{pool: pool, o: o, vs: vs, rt: rt, sampler: sampler,
		results: map[cellKey]*agg{}, audits: map[string][]string{}, auditRuns: map[string]int{}}
}

// warmUp runs every variant once, untimed, first: a fresh server pays
// once for what every later run finds ready (WAL segments created and
// zero-filled, caches filled), and whichever variant ran first used to
// pay for all of it.
func (rs *orderRuns) warmUp(ctx context.Context) error {
	o := rs.o
	wo := o
	wo.duration, wo.statements = 2*o.warmup, false
	for _, v := range rs.vs {
		fmt.Fprintf(stderr, "bench: warm-up %-4s (untimed)\n", v.name)
		schema := "bench_warmup_" + strings.ReplaceAll(v.name, "-", "_")
		if _, _, err := runVariant(ctx, rs.pool, schema, v, o.bucketSet[len(o.bucketSet)-1], o.consumerSet[len(o.consumerSet)-1],
			wo, &rs.ids, &rs.users, rs.rt, rs.sampler); err != nil {
			return err
		}
	}
	return nil
}

// runRounds runs o.rounds rounds of every cell (buckets × consumers), each
// cell running every variant.
func (rs *orderRuns) runRounds(ctx context.Context) error {
	o, vs := rs.o, rs.vs
	cell := 0
	for r := range o.rounds {
		inRound := 0
		for _, b := range o.bucketSet {
			for _, c := range o.consumerSet {
				cell++
				// Rotate the order of the variants with the round and the
				// cell: every variant goes first as often as any other.
				off := (r + inRound) % len(vs)
				inRound++
				for i := range vs {
					v := vs[(i+off)%len(vs)]
					if v.tokens && b != o.bucketSet[0] {
						continue // the bucket count does not apply: measured once per consumer count
					}
					if err := rs.runOne(ctx, r, cell, v, b, c); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// runOne runs variant v in cell number cell of round r and adds its
// result to the cell's.
func (rs *orderRuns) runOne(ctx context.Context, r, cell int, v variant, b, c int) error {
	o := rs.o
	schema := fmt.Sprintf("bench_%s_%d", strings.ReplaceAll(v.name, "-", "_"), cell)
	fmt.Fprintf(stderr, "bench: round %d/%d  %-4s  buckets=%-2d consumers=%-2d ", r+1, o.rounds, v.name, b, c)
	res, fails, err := runVariant(ctx, rs.pool, schema, v, b, c, o, &rs.ids, &rs.users, rs.rt, rs.sampler)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%7.0f orders/s  audit %s\n", float64(res.orders)/res.elapsed.Seconds(), verdict(fails))
	rs.audits[v.name] = append(rs.audits[v.name], fails...)
	rs.auditRuns[v.name]++
	k := cellKey{v.name, b, c}
	a := rs.results[k]
	if a == nil {
		a = &agg{}
		rs.results[k] = a
	}
	a.orders += res.orders
	a.errors += res.errors
	a.elapsed += res.elapsed
	a.lat = append(a.lat, res.lat...)
	a.rt += res.rt
	a.cpu += res.cpu
	a.waits.add(res.lockWaits)
	return nil
}

// report prints the order table (and writes its chart with -svg), the
// audits and, with -waits, the wait events.
func (rs *orderRuns) report(out io.Writer) error {
	o, vs := rs.o, rs.vs
	fmt.Fprintf(out, "\n## Order transaction (%d rounds × %s per cell, interleaved, one pool of %d)\n\n", o.rounds, o.duration, o.poolSize)
	fmt.Fprintln(out, "| variant | buckets | consumers | orders/s | p50 ms | p99 ms | round trips/order | client CPU µs/order | lock waiters (mean) | errors |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var plotRows []orderRow
	for _, b := range o.bucketSet {
		for _, c := range o.consumerSet {
			for _, v := range vs {
				a := rs.results[cellKey{v.name, b, c}]
				if a == nil {
					continue // kit-tokens: in the cells of the first bucket count only
				}
				bs := fmt.Sprint(b)
				if v.tokens {
					bs = "tokens"
				}
				fmt.Fprintf(out, "| %s | %s | %d | %.0f | %.1f | %.1f | %.2f | %.0f | %.2f | %d |\n", v.name, bs, c, a.ordersPerSec(),
					ms(a.pct(0.50)), ms(a.pct(0.99)), a.rtPerOrder(), a.cpuPerOrder(), a.waits.meanLockWaiters(), a.errors)
				if !v.tokens {
					plotRows = append(plotRows, orderRow{v.name, b, c, a.ordersPerSec()})
				}
			}
		}
	}
	if err := writeOrdersSVG(*svgPath, plotRows, 0); err != nil {
		return err
	}
	fmt.Fprintln(out)
	for _, v := range vs {
		what := "every invariant of flow.Service.Audit"
		if v.name == "raw" || strings.HasPrefix(v.name, "limit-") {
			what = "one order per user, bucket conservation, allocated = orders"
		}
		fmt.Fprintf(out, "- audit %s after each of its %d runs (%s): %s %s\n", v.name, rs.auditRuns[v.name], what, verdict(rs.audits[v.name]), strings.Join(rs.audits[v.name], "; "))
	}
	if o.waits {
		fmt.Fprintln(out, "\n### Wait events sampled (share of active backend samples)")
		for _, b := range o.bucketSet {
			for _, v := range vs {
				c := o.consumerSet[len(o.consumerSet)-1]
				a := rs.results[cellKey{v.name, b, c}]
				if a == nil {
					continue
				}
				fmt.Fprintf(out, "- %s, %d buckets, %d consumers: %s\n", v.name, b, c, topWaits(a.waits, 6))
			}
		}
	}
	return nil
}

// reportOutbox prints the outbox table.
func reportOutbox(out io.Writer, o options, ob outboxResult) {
	fmt.Fprintf(out, "\n## Outbox (%d relays / loops, batch %d)\n\n", o.relays, o.batch)
	fmt.Fprintln(out, "| measure | value |")
	fmt.Fprintln(out, "|---|---:|")
	fmt.Fprintf(out, "| relay (outbox.Relay, no-op publisher), events/s | %.0f |\n", ob.relayRate)
	fmt.Fprintf(out, "| relay in InTx mode (claim, publish, mark in one transaction), events/s | %.0f |\n", ob.relayTxRate)
	fmt.Fprintf(out, "| hand-written claim + mark-sent loop, events/s | %.0f |\n", ob.rawRate)
	for _, w := range riverWorkers {
		fmt.Fprintf(out, "| River (no-op worker, MaxWorkers %d), jobs/s | %.0f |\n", w, ob.riverRates[w])
	}
	fmt.Fprintf(out, "| relay draining %d pending, events/s | %.0f |\n", smallBacklog, ob.drainSmall)
	fmt.Fprintf(out, "| relay draining %d pending, events/s | %.0f |\n", o.backlog, ob.drainLarge)
	fmt.Fprintf(out, "| claim of %d, p50 with no history, ms | %.2f |\n", o.batch, ms(ob.claimNone))
	fmt.Fprintf(out, "| claim of %d, p50 with %d SENT rows, ms | %.2f |\n", o.batch, o.history, ms(ob.claimHist))
}

// ratio is num/den, or 0 when den is 0.
func ratio(num, den float64) float64 {
	if den == 0 {
		return 0
	}
	return num / den
}

// rate is the orders/s of variant v in the cell of b buckets and c
// consumers, 0 when the cell was not measured.
func (rs *orderRuns) rate(v string, b, c int) float64 {
	if a := rs.results[cellKey{v, b, c}]; a != nil {
		return a.ordersPerSec()
	}
	return 0
}

// printResult prints the RESULT line.
func (rs *orderRuns) printResult(out io.Writer, ob outboxResult) {
	rate := rs.rate
	// Round trips of a fresh kit order, over every cell.
	var krt, kn int64
	for k, a := range rs.results {
		if k.variant == "kit" {
			krt += a.rt
			kn += a.orders + a.errors
		}
	}
	// The kit over the textbook sequence (variant "seed") in its worst cell.
	flowVsSeedMin := 0.0
	for _, b := range rs.o.bucketSet {
		for _, c := range rs.o.consumerSet {
			r := ratio(rate("kit", b, c), rate("seed", b, c))
			if flowVsSeedMin == 0 || r < flowVsSeedMin {
				flowVsSeedMin = r
			}
		}
	}
	cpuKit := 0.0
	if a := rs.results[cellKey{"kit", 64, 32}]; a != nil {
		cpuKit = a.cpuPerOrder()
	}
	// The kit on a SKU of inventory tokens against the single-row
	// decrement's limit (limit-min, 1 bucket) and against the kit on 64
	// buckets, at 32 consumers.
	tokens := rs.rate("kit-tokens", rs.o.bucketSet[0], 32)
	fmt.Fprintf(out, "RESULT flow_vs_seed_min=%.2f flow_vs_seed_b1=%.2f flow_vs_seed_b64=%.2f flow_vs_limit_b1=%.2f flow_vs_limit_b64=%.2f limit_full_vs_min_b1=%.2f flow_vs_raw_b64=%.2f roundtrips=%.2f cpu_us_per_order=%.0f outbox_events_per_s=%.0f outbox_vs_raw=%.2f outbox_vs_river=%s outbox_intx_events_per_s=%.0f outbox_intx_vs_river=%s drain_backlog_ratio=%s claim_history_ratio=%.2f tokens_vs_limit_min_b1=%s tokens_vs_buckets_b64=%s\n",
		flowVsSeedMin, ratio(rate("kit", 1, 32), rate("seed", 1, 32)), ratio(rate("kit", 64, 32), rate("seed", 64, 32)),
		ratio(rate("kit", 1, 32), rate("limit-full", 1, 32)), ratio(rate("kit", 64, 32), rate("limit-full", 64, 32)),
		ratio(rate("limit-full", 1, 32), rate("limit-min", 1, 32)),
		ratio(rate("kit", 64, 32), rate("raw", 64, 32)), ratio(float64(krt), float64(kn)), cpuKit,
		ob.relayRate, ratio(ob.relayRate, ob.rawRate), optRatio(ob.relayRate, ob.riverRate),
		ob.relayTxRate, optRatio(ob.relayTxRate, ob.riverRate),
		optRatio(ob.drainLarge, ob.drainSmall), ratio(float64(ob.claimHist), float64(ob.claimNone)),
		tokensRatio(tokens, rate("limit-min", 1, 32)), tokensRatio(tokens, rate("kit", 64, 32)))
}

// auditErr is the error of the first variant whose audit failed.
func (rs *orderRuns) auditErr() error {
	for _, v := range rs.vs {
		if len(rs.audits[v.name]) > 0 {
			return errors.New("audit failed for " + v.name)
		}
	}
	return nil
}

// optRatio is num/den with two decimals, or "n/a" when den was not
// measured.
func optRatio(num, den float64) string {
	if den == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", num/den)
}

// tokensRatio is optRatio, and "n/a" too when kit-tokens (num) was not
// measured.
func tokensRatio(num, den float64) string {
	if num == 0 {
		return "n/a"
	}
	return optRatio(num, den)
}

func verdict(fails []string) string {
	if len(fails) > 0 {
		return "FAIL"
	}
	return "PASS"
}

// runVariant runs one variant in a new schema holding one SKU of b
// buckets: a warm-up (every connection prepares its statements), the timed
// run, then the audit, and drops the schema.
func runVariant(ctx context.Context, pool *pgxpool.Pool, schema string, v variant, b, c int, o options,
	ids *orderid.Generator, users *atomic.Int64, rt *roundtrip.Counter, sampler *waitSampler) (cellResult, []string, error) {
	drop := func() error {
		_, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		return err
	}
	if err := drop(); err != nil {
		return cellResult{}, nil, err
	}
	fcfg := flow.Config{
		Schema: schema,
		Item: flow.SKU{ActivityID: 1, SKUID: 1, Title: "bench item", UnitPrice: 9900, Currency: "CNY",
			Stock: 1_000_000, Buckets: int16(b)},
		TxOptions: pgtx.Options{Name: "place_order"},
	}
	if v.cfg != nil {
		v.cfg(&fcfg)
	}
	svc, err := flow.New(ctx, pool, fcfg)
	if err != nil {
		return cellResult{}, nil, fmt.Errorf("%s: set up: %w", v.name, err)
	}
	// Every run starts right after a checkpoint, so that none of them pays
	// for one the previous run's writes made due (a checkpoint flushes the
	// dirty buffers and makes the next change of every page log a full
	// page image). CHECKPOINT needs superuser or pg_checkpoint: a server
	// of SECKILL_DATABASE_URL may refuse it, and the runs then go without.
	_, _ = pool.Exec(ctx, "CHECKPOINT")
	if _, err := runCell(ctx, svc, v, o.poolSize, o.warmup, ids, users, rt, sampler); err != nil {
		return cellResult{}, nil, err
	}
	stmts := o.statements && b == o.bucketSet[len(o.bucketSet)-1] && c == o.consumerSet[len(o.consumerSet)-1] && !o.statementsDone[v.name]
	if stmts {
		if _, err := pool.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
			return cellResult{}, nil, err
		}
	}
	res, err := timedCell(ctx, svc, v, c, o, ids, users, rt, sampler)
	if err != nil {
		return res, nil, err
	}
	if stmts {
		o.statementsDone[v.name] = true
		if err := printStatements(ctx, pool, v.name, res.orders); err != nil {
			return res, nil, err
		}
	}
	var fails []string
	if v.name == "raw" || strings.HasPrefix(v.name, "limit-") {
		lines, pass, err := auditRaw(ctx, svc)
		if err != nil {
			return res, nil, err
		}
		if !pass {
			fails = append(fails, schema+": "+strings.Join(lines, ", "))
		}
	} else {
		if err := drainOutbox(ctx, svc); err != nil {
			return res, nil, err
		}
		checks, err := svc.Audit(ctx)
		if err != nil {
			return res, nil, err
		}
		if !flow.Passed(checks) {
			for _, c := range checks {
				if !c.Pass {
					fails = append(fails, fmt.Sprintf("%s: %s: %s", schema, c.Name, c.Detail))
				}
			}
		}
	}
	if len(fails) == 0 {
		return res, nil, drop()
	}
	return res, fails, nil // keep the schema for inspection
}

// timedCell is runCell for o.duration, with o.measure (when set) read at
// its two ends: the servers' CPU time and WAL over the run.
func timedCell(ctx context.Context, svc *flow.Service, v variant, c int, o options, ids *orderid.Generator,
	users *atomic.Int64, rt *roundtrip.Counter, sampler *waitSampler) (cellResult, error) {
	var cpu0 time.Duration
	var wal0 uint64
	if o.measure != nil {
		var err error
		if cpu0, wal0, err = o.measure(ctx); err != nil {
			return cellResult{}, err
		}
	}
	res, err := runCell(ctx, svc, v, c, o.duration, ids, users, rt, sampler)
	if err != nil || o.measure == nil {
		return res, err
	}
	cpu1, wal1, err := o.measure(ctx)
	res.serverCPU, res.walBytes = cpu1-cpu0, int64(wal1-wal0)
	return res, err
}

// printStatements prints the statements that took the most server time
// in the run just finished, per order.
func printStatements(ctx context.Context, pool *pgxpool.Pool, name string, orders int64) error {
	rows, err := pool.Query(ctx, `SELECT calls, total_exec_time + total_plan_time, total_plan_time / greatest(calls, 1), shared_blks_hit + shared_blks_read, wal_bytes,
		regexp_replace(left(query, 90), '\s+', ' ', 'g')
		FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC LIMIT 12`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(stderr, "\n  %s: server time per order by statement (%d orders)\n", name, orders)
	for rows.Next() {
		var calls, blks int64
		var total, mean float64
		var wal pgtype.Numeric
		var q string
		if err := rows.Scan(&calls, &total, &mean, &blks, &wal, &q); err != nil {
			return err
		}
		wf, _ := wal.Float64Value()
		fmt.Fprintf(stderr, "  %8.3f ms/order  %7d calls  %6.3f plan ms/call  %5.1f blks/call %6.0f WAL B/call  %s\n",
			total/float64(max(orders, 1)), calls, mean, float64(blks)/float64(max(calls, 1)), wf.Float64/float64(max(calls, 1)), q)
	}
	fmt.Fprintln(stderr)
	return rows.Err()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func topWaits(w waitSample, n int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range w.waitCount {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	var parts []string
	for i, e := range all {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", e.k, 100*float64(e.v)/float64(max(w.active, 1))))
	}
	return strings.Join(parts, ", ")
}

// auditRaw checks what the minimal transaction can keep: one order per
// user, bucket conservation, allocated stock = orders.
func auditRaw(ctx context.Context, svc *flow.Service) ([]string, bool, error) {
	q := func(sql string) string { return strings.ReplaceAll(sql, "{s}", pgx.Identifier{svc.Schema}.Sanitize()) }
	var dup, broken, allocated, orders int64
	err := svc.Pool.QueryRow(ctx, q(`SELECT
		(SELECT count(*) FROM (SELECT 1 FROM {s}.orders GROUP BY activity_id, sku_id, user_id HAVING count(*) > 1) d),
		(SELECT count(*) FROM {s}.sku_inventory WHERE total_stock <> available_stock + allocated_stock OR available_stock < 0),
		(SELECT coalesce(sum(allocated_stock), 0) FROM {s}.sku_inventory),
		(SELECT count(*) FROM {s}.orders)`)).Scan(&dup, &broken, &allocated, &orders)
	lines := []string{fmt.Sprintf("%d orders, %d duplicated users, %d broken buckets, %d allocated", orders, dup, broken, allocated)}
	return lines, err == nil && dup == 0 && broken == 0 && allocated == orders, err
}

// drainOutbox publishes every pending event of svc's outbox to a no-op
// publisher, so that the audit's "nothing left unpublished" holds.
func drainOutbox(ctx context.Context, svc *flow.Service) error {
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	r, err := outbox.NewRelay(svc.Pool, outbox.RelayConfig{
		Store: svc.Outbox, Publish: noop(nil), Owner: "bench-drain", BatchSize: 500,
		PollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond, DisableListen: true,
	})
	if err != nil {
		return err
	}
	go func() { errc <- r.Run(dctx) }()
	for {
		st, err := svc.Outbox.Stats(ctx, svc.Pool)
		if err != nil {
			return err
		}
		if st.Pending+st.Sending+st.Retry == 0 {
			cancel()
			return <-errc
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// noop is a publisher that accepts every message and counts them.
func noop(n *atomic.Int64) func(context.Context, []outbox.Message) []error {
	return func(_ context.Context, msgs []outbox.Message) []error {
		if n != nil {
			n.Add(int64(len(msgs)))
		}
		return make([]error, len(msgs))
	}
}

var _ *pgxpool.Pool
