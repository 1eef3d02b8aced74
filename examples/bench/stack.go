package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/orderid"
	"github.com/seckillkit/seckill/examples/internal/stackharness"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/roundtrip"
)

// stackSchema is the schema the example service runs its sale in (its
// -schema): the bench's own name, dropped before and after the run, since
// a server of SECKILL_DATABASE_URL may hold other schemas.
const stackSchema = "bench_stack_sale"

// stackRun is the -stack mode: the example service on the throwaway
// servers, and what the measurements read.
type stackRun struct {
	o     options
	pool  *pgxpool.Pool     // the bench's own: the kit-alone flow and the measurements
	srv   *pgharness.Server // the server the bench started (or reached through its URL)
	nodes []pgNode          // the PostgreSQL servers: the one, or Citus's coordinator then its workers
	redis *stackharness.Redis
	nats  *stackharness.NATS
	svc   *serviceProc
	buyer int64 // the last buyer id used
}

// runStack runs the -stack mode on one throwaway PostgreSQL: the kit
// alone at saturation (64 buckets, 32 consumers), the example service's
// real stack at each offered rate, the kit alone again once the service
// has stopped; it prints a table per rate and its own RESULT line, whose
// stack_vs_kit is against the mean of the two kit runs.
func runStack(ctx context.Context, o options) error {
	began := time.Now()
	if o.stackCitus && os.Getenv(pgharness.EnvURL) == "" {
		return fmt.Errorf("-stack-citus measures the Citus coordinator of %s (and its workers, on this machine)", pgharness.EnvURL)
	}
	srv, err := pgharness.Start(ctx, pgharness.Options{Settings: []string{
		"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top"}})
	if err != nil {
		return err
	}
	defer srv.Stop()
	var rt roundtrip.Counter
	var params map[string]string
	if o.stackCitus { // every schema the bench creates is distributed, whole on one worker
		params = map[string]string{"citus.enable_schema_based_sharding": "on"}
	}
	pool, err := newPoolWith(ctx, srv.URL, o.poolSize, &rt, params)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return fmt.Errorf("-stack reads pg_stat_statements (a throwaway server loads it; a server of %s must have it in shared_preload_libraries): %w", pgharness.EnvURL, err)
	}
	sr := &stackRun{o: o, pool: pool, srv: srv}
	if sr.nodes, err = stackNodes(ctx, pool, o.stackCitus); err != nil {
		return err
	}
	defer closeNodes(sr.nodes)
	var kit [2]kitResult // the kit alone before and after the stack
	if kit[0], err = sr.kitAlone(ctx, &rt, 0); err != nil {
		return err
	}
	if err := sr.startBrokers(ctx); err != nil {
		return err
	}
	defer func() { sr.stopBrokers() }()
	floor, err := sr.floor(ctx)
	if err != nil {
		return err
	}
	dropSale := func() error {
		_, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{stackSchema}.Sanitize()+" CASCADE")
		return err
	}
	if err := dropSale(); err != nil {
		return err
	}
	defer func() { _ = dropSale() }()
	results, err := sr.rates(ctx)
	if err != nil {
		return err
	}
	inTx, err := sr.relayInTx(ctx, dropSale)
	if err != nil {
		return err
	}
	offs, err := sr.savingsOff(ctx, dropSale)
	if err != nil {
		return err
	}
	// The kit runs alone again, without the service's background work.
	if kit[1], err = sr.kitAlone(ctx, &rt, 1); err != nil {
		return err
	}
	out := os.Stdout
	reportStack(out, o, kit, results)
	reportRelayModes(out, results, inTx)
	reportSavings(out, results, offs)
	reportFloor(out, floor, kit, saturated(results))
	fmt.Fprintf(out, "\nfinished in %s\n\n", time.Since(began).Round(time.Second))
	printStackResult(out, o, kit, results, inTx, floor)
	return nil
}

// floor measures the floor (-stack-floor; nil without it).
func (sr *stackRun) floor(ctx context.Context) (*floorResult, error) {
	if !sr.o.stackFloor {
		return nil, nil
	}
	fmt.Fprintln(stderr, "bench: the floor: HTTP, Redis, JetStream, the relay and an inbox with no work of the service's")
	f, err := sr.measureFloor(ctx, sr.o.duration, floorEvents)
	if err != nil {
		return nil, err
	}
	return &f, nil
}

// rates starts the service (with -stack-cpuprofile's profile) on the
// sale, measures each rate of -stack-rates, and stops it.
func (sr *stackRun) rates(ctx context.Context) ([]rateResult, error) {
	o := sr.o
	var err error
	if sr.svc, err = startService(ctx, sr.srv.URL, sr.redis, sr.nats, o.stackStock, o.stackCitus, o.stackProf); err != nil {
		return nil, err
	}
	defer sr.svc.stop()
	var results []rateResult
	for _, rate := range o.stackRates {
		r, err := sr.measureRate(ctx, rate)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(stderr, "bench: stack %5d/s offered: %6.0f orders/s, p99 %.0f ms\n", rate, r.ordersPerSec(), ms(r.pct(0.99)))
		results = append(results, r)
	}
	return results, nil
}

// startBrokers starts a throwaway redis-server and nats-server -js.
func (sr *stackRun) startBrokers(ctx context.Context) error {
	var err error
	if sr.redis, err = stackharness.StartThrowawayRedis(ctx); err != nil {
		return err
	}
	if sr.nats, err = stackharness.StartThrowawayNATS(ctx); err != nil {
		sr.redis.Stop()
		sr.redis = nil
	}
	return err
}

// stopBrokers stops the servers of startBrokers (those started).
func (sr *stackRun) stopBrokers() {
	if sr.redis != nil {
		sr.redis.Stop()
	}
	if sr.nats != nil {
		sr.nats.Stop()
	}
	sr.redis, sr.nats = nil, nil
}

// relayInTx runs the service again on a fresh sale, with its outbox
// relays in InTx mode (-relay-in-tx), at the rates of -stack-relay-in-tx:
// the switch's worth, beside the lease-mode windows of the same rates.
func (sr *stackRun) relayInTx(ctx context.Context, dropSale func() error) ([]rateResult, error) {
	return sr.again(ctx, dropSale, "relays in InTx mode", sr.o.stackInTx, "-relay-in-tx")
}

// again runs the service again on a fresh sale with the extra flags, at
// rates (none: nothing runs), labelled label in the progress lines.
// A fresh sale: dropSale empties PostgreSQL's, and the redis-server and
// nats-server are new (the streams would otherwise still hold the last
// windows' events, which the new service's consumers would go on
// writing inbox rows for).
func (sr *stackRun) again(ctx context.Context, dropSale func() error, label string, rates []int, flags ...string) ([]rateResult, error) {
	o := sr.o
	if len(rates) == 0 {
		return nil, nil
	}
	if err := dropSale(); err != nil {
		return nil, err
	}
	sr.stopBrokers()
	if err := sr.startBrokers(ctx); err != nil {
		return nil, err
	}
	var err error
	if sr.svc, err = startService(ctx, sr.srv.URL, sr.redis, sr.nats, o.stackStock, o.stackCitus, "", flags...); err != nil {
		return nil, err
	}
	defer sr.svc.stop()
	var results []rateResult
	for _, rate := range rates {
		r, err := sr.measureRate(ctx, rate)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(stderr, "bench: stack %5d/s offered, %s: %6.0f orders/s, p99 %.0f ms\n", rate, label, r.ordersPerSec(), ms(r.pct(0.99)))
		results = append(results, r)
	}
	return results, nil
}

// offRun is the service run with one of its savings off (flag), or with
// every saving on when flag is "".
type offRun struct {
	flag    string
	results []rateResult
}

// savingsOff runs the service once per flag of -stack-off, each turning
// one of its savings off, then once more with every saving on: the last
// run brackets the off runs with the first windows, so a drift of the
// machine over the runs shows.
func (sr *stackRun) savingsOff(ctx context.Context, dropSale func() error) ([]offRun, error) {
	if len(sr.o.stackOff) == 0 {
		return nil, nil
	}
	var runs []offRun
	for _, f := range append(slices.Clone(sr.o.stackOff), "") {
		label, flags := "every saving on, again", []string(nil)
		if f != "" {
			label, flags = f, []string{f}
		}
		rs, err := sr.again(ctx, dropSale, label, sr.o.stackOffAt, flags...)
		if err != nil {
			return nil, err
		}
		runs = append(runs, offRun{flag: f, results: rs})
	}
	return runs, nil
}

// offSwitches parses -stack-off (the service's boolean flags, each with its
// leading dash) and -stack-off-rates (each one of -stack-rates; "": 300
// when it is one of them, and the last of them, the saturating one).
func offSwitches(flags, rates string, stackRates []int) ([]string, []int, error) {
	var fs []string
	for _, f := range strings.Split(flags, ",") {
		f = strings.TrimSpace(f)
		if !strings.HasPrefix(f, "-") || len(f) < 2 || strings.ContainsAny(f, " \t") {
			return nil, nil, fmt.Errorf("-stack-off: %q is not one of the service's flags (write it with its dash, e.g. -event-two-step)", f)
		}
		fs = append(fs, f)
	}
	if rates == "" && len(stackRates) > 0 {
		var at []int
		if last := stackRates[len(stackRates)-1]; last != 300 && slices.Contains(stackRates, 300) {
			at = append(at, 300)
		}
		return fs, append(at, stackRates[len(stackRates)-1]), nil
	}
	at, err := intList(rates)
	if err != nil {
		return nil, nil, fmt.Errorf("-stack-off-rates: %w", err)
	}
	for _, r := range at {
		if !slices.Contains(stackRates, r) {
			return nil, nil, fmt.Errorf("-stack-off-rates rate %d is not one of -stack-rates", r)
		}
	}
	return fs, at, nil
}

// stackNodes are the PostgreSQL servers -stack reads: the one pool
// reaches, or on Citus its coordinator and then every worker.
func stackNodes(ctx context.Context, pool *pgxpool.Pool, citus bool) ([]pgNode, error) {
	first := pgNode{name: "PostgreSQL", pool: pool}
	var err error
	if first.pid, err = postmasterPID(ctx, pool); err != nil {
		return nil, err
	}
	if !citus {
		return []pgNode{first}, nil
	}
	first.name = "coordinator"
	workers, err := citusWorkers(ctx, pool)
	if err != nil {
		return nil, err
	}
	return append([]pgNode{first}, workers...), nil
}

// postmasterPID is the process id of the postmaster: the parent of this
// connection's backend. It fails when the server is not on this machine.
func postmasterPID(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var backend int
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0, err
	}
	t, err := readProcTimes(backend)
	if err != nil {
		return 0, fmt.Errorf("-stack reads PostgreSQL's CPU time from /proc: the server must run on this machine (backend %d: %w)", backend, err)
	}
	return t.ppid, nil
}

// kitResult is one run of the kit alone: its timed window's orders and
// length, and over it the CPU time of PostgreSQL (every node: the
// postmaster's tree, as for the stack) and of this process (the kit's
// client: flow.Service.PlaceOrder and pgx), and the WAL written.
type kitResult struct {
	orders           int64
	window           time.Duration
	pgCPU, clientCPU time.Duration
	walBytes         int64
}

func (k kitResult) ordersPerSec() float64 { return ratio(float64(k.orders), k.window.Seconds()) }

// perOrder is d per order of the window, in µs.
func (k kitResult) perOrder(d time.Duration) float64 {
	return ratio(float64(d.Microseconds()), float64(k.orders))
}

// cpu is the kit's CPU time: PostgreSQL's and its client's.
func (k kitResult) cpu() time.Duration { return k.pgCPU + k.clientCPU }

// kitMean is the mean of the two kit runs' figures per order: orders/s,
// CPU µs per order (PostgreSQL and client), PostgreSQL's alone, WAL bytes.
func kitMean(kit [2]kitResult) (perSec, cpu, pg, wal float64) {
	for _, k := range kit {
		perSec += k.ordersPerSec() / 2
		cpu += k.perOrder(k.cpu()) / 2
		pg += k.perOrder(k.pgCPU) / 2
		wal += ratio(float64(k.walBytes), float64(k.orders)) / 2
	}
	return perSec, cpu, pg, wal
}

// kitAlone runs the bench's kit variant (flow.Service.PlaceOrder, closed
// loop: saturated) at 64 buckets and 32 consumers for o.duration, after
// an untimed warm-up, in a new schema (run tells them apart), and audits
// it; it returns its timed window's figures, with the servers' CPU and
// WAL read at the window's two ends.
func (sr *stackRun) kitAlone(ctx context.Context, rt *roundtrip.Counter, run int) (kitResult, error) {
	o, pool := sr.o, sr.pool
	vs, err := pickVariants("kit")
	if err != nil {
		return kitResult{}, err
	}
	if o.stackCitus { // the stores take Citus's statement shapes, as the service's do
		vs[0].cfg = func(c *flow.Config) { c.Citus = true }
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return kitResult{}, err
	}
	defer conn.Release()
	sampler := &waitSampler{conn: conn.Conn(), app: benchApp}
	var ids orderid.Generator
	var users atomic.Int64
	ko := o
	ko.statements = false
	ko.statementsDone = map[string]bool{}
	ko.measure = func(ctx context.Context) (time.Duration, uint64, error) {
		cpu, lsn, err := sr.readNodes(ctx)
		var c time.Duration
		var l uint64
		for i := range cpu {
			c, l = c+cpu[i], l+lsn[i]
		}
		return c, l, err
	}
	var res cellResult
	for i, d := range []time.Duration{2 * o.warmup, o.duration} {
		ko.duration = d
		fmt.Fprintf(stderr, "bench: kit alone (%s), 64 buckets, 32 consumers (%s)\n", [2]string{"before the stack", "after"}[run], [2]string{"warm-up", "timed"}[i])
		schema := fmt.Sprintf("bench_stack_kit_%d_%d", run, i)
		r, fails, err := runVariant(ctx, pool, schema, vs[0], 64, 32, ko, &ids, &users, rt, sampler)
		if err != nil {
			return kitResult{}, err
		}
		if len(fails) > 0 {
			return kitResult{}, fmt.Errorf("kit alone: audit failed: %s", strings.Join(fails, "; "))
		}
		res = r
	}
	return kitResult{orders: res.orders, window: res.elapsed, pgCPU: res.serverCPU, clientCPU: res.cpu, walBytes: res.walBytes}, nil
}
