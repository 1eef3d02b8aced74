// Command bench measures the seckill order flow and the outbox side by
// side, interleaved in one process on one pool, so that machine noise
// cancels out of the ratios it reports.
//
// Order transactions, for 1 and 64 buckets at 8 and 32 concurrent
// consumers:
//
//   - raw:  the minimal transaction, hand-written: conditional bucket
//     UPDATE + order INSERT, one statement per round trip;
//   - seed: the textbook statement sequence the kit started from (inbox,
//     reservation insert and lock, order, bucket decrement, item, ledger,
//     reservation ORDERED, outbox), one statement per round trip, hand-written;
//   - kit:  flow.Service.PlaceOrder, the transaction examples/seckill runs;
//   - kit-tokens: the same on a SKU provisioned as inventory tokens (one
//     row per unit, claimed with FOR UPDATE SKIP LOCKED), measured once
//     per consumer count beside the 1- and 64-bucket cells.
//
// Each variant has its own schema (the same DDL: the kit's migrations);
// every (round, buckets, consumers) cell provisions a new SKU and runs the
// three variants one after the other in an order that rotates with the
// round. Round trips are counted with a pgx tracer; lock waits by sampling
// pg_stat_activity from a connection of its own. At the end every variant's
// schema is audited (raw: the invariants it can satisfy).
//
// The limits: limit-min (bucket UPDATE + order INSERT as one statement,
// implicit commit: the hot row's physical limit) and limit-full (every row
// the kit's fresh path writes, in one statement: the limit for the kit's
// own work). Every cell reports the client's CPU time per order
// (getrusage around the run).
//
// Outbox: relay throughput (outbox.Relay, no-op publisher; every event
// checked published and SENT) against a hand-written claim + mark-sent loop
// at the same batch size and concurrency, and against River (jobs inserted
// first, then worked by a no-op worker, same count, same pool, MaxWorkers
// 1,000 and 4,000, the best taken); the relay draining a backlog of
// 1,000,000 pending events against 10,000; and the claim latency over
// 1,000,000 SENT rows of history against none.
//
// It prints a markdown table and, last, one RESULT line. -quick finishes in
// under 5 minutes on 2 cores.
//
// -stack measures the whole stack instead: the example service in -serve
// mode (a child process) on a throwaway PostgreSQL, redis-server and
// nats-server -js, under open-loop clicks of new buyers at each rate of
// -stack-rates, beside the kit alone (the kit variant, 64 buckets, 32
// consumers) on the same PostgreSQL. Per rate: orders/s, click → order
// latency, each component's CPU per order from /proc, WAL per order and
// the window's top statements from pg_stat_statements; then its own RESULT
// line. See the README, "The whole stack".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seckillkit/seckill/internal/pgharness"
)

type options struct {
	quick       bool
	duration    time.Duration // per cell and variant
	warmup      time.Duration
	rounds      int
	poolSize    int
	history     int
	events      int
	backlog     int
	relays      int
	batch       int
	claimProbes int
	waits       bool
	statements  bool
	variants    string
	cpuprofile  string
	stack       bool
	stackRates  []int
	stackStock  int
	stackCitus  bool
	stackProf   string   // with -stack: the service's CPU profile
	stackInTx   []int    // with -stack: the rates measured again with the relays in InTx mode
	stackFloor  bool     // with -stack: measure the floor of the parts around PostgreSQL
	stackOff    []string // with -stack: the service's flags that each turn one of its savings off
	stackOffAt  []int    // with -stack: the rates measured with each of stackOff
	// measure, when set, is read at both ends of each variant's timed
	// window: the servers' CPU time and WAL position (-stack's kit alone).
	measure func(context.Context) (cpu time.Duration, wal uint64, err error)

	bucketSet, consumerSet []int
	statementsDone         map[string]bool
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad list %q", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func main() {
	o := options{statementsDone: map[string]bool{}}
	flag.BoolVar(&o.quick, "quick", false, "short run (under 5 minutes on 2 cores)")
	flag.DurationVar(&o.duration, "duration", 0, "time per variant and cell (default 8s, -quick 3s)")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "untimed warm-up before each timed run (every connection prepares its statements)")
	flag.IntVar(&o.rounds, "rounds", 0, "interleaved rounds (default 3, -quick 2)")
	flag.IntVar(&o.poolSize, "pool", 40, "pool size shared by every variant")
	flag.IntVar(&o.history, "history", 1_000_000, "SENT rows of outbox history for the claim latency test")
	flag.IntVar(&o.events, "events", 0, "events per outbox throughput run (default 40000, -quick 20000)")
	flag.IntVar(&o.backlog, "backlog", 0, "pending events of the drain-at-scale run, compared with 10,000 (default 1000000, -quick 200000)")
	flag.IntVar(&o.relays, "relays", 2, "outbox relays (and raw loops)")
	flag.IntVar(&o.batch, "batch", 200, "outbox claim batch size")
	flag.IntVar(&o.claimProbes, "claim-probes", 0, "claims timed per history size (default 400, -quick 200)")
	flag.BoolVar(&o.waits, "waits", false, "print the wait events sampled per variant")
	flag.BoolVar(&o.statements, "statements", false, "load pg_stat_statements (throwaway server) and print each variant's costliest statements (64 buckets, 32 consumers, first round)")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a Go CPU profile of the order runs to this file")
	flag.StringVar(&o.variants, "variants", "raw,limit-min,limit-full,seed,kit,kit-tokens", "order variants, in order: raw, limit-min (bucket UPDATE + order INSERT as one statement), limit-full (every row of the kit's fresh path in one statement), seed, kit, kit-notify (the flow with NOTIFY), kit-ungated (no per-bucket bound), kit-tokens (the kit on a SKU of inventory tokens; run in the cells of the first bucket count only)")
	buckets := flag.String("buckets", "1,64", "bucket counts to measure (the RESULT line needs 1 and 64)")
	consumers := flag.String("consumers", "8,32", "consumer counts to measure (the RESULT line needs 32)")
	parseStack := stackFlags(&o)
	flag.Parse()
	var err error
	if o.bucketSet, err = intList(*buckets); err == nil {
		o.consumerSet, err = intList(*consumers)
	}
	if err == nil {
		err = parseStack()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	def := func(v *int, full, quick int) {
		if *v == 0 {
			*v = full
			if o.quick {
				*v = quick
			}
		}
	}
	if o.duration == 0 {
		o.duration = 8 * time.Second
		if o.quick {
			o.duration = 3 * time.Second
		}
	}
	def(&o.rounds, 3, 2)
	def(&o.events, 40000, 20000)
	def(&o.backlog, 1_000_000, 200_000)
	def(&o.claimProbes, 400, 200)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runner := run
	if o.stack {
		runner = runStack
	}
	if err := runner(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// stackFlags defines the flags of the -stack mode into o; the function it
// returns, called after flag.Parse, parses their lists.
func stackFlags(o *options) (parse func() error) {
	flag.BoolVar(&o.stack, "stack", false, "measure the example service's real stack (PostgreSQL, redis-server, nats-server -js, the service in -serve mode) under fixed offered rates, beside the kit alone, instead of the order and outbox runs")
	rates := flag.String("stack-rates", "150,300,600,1200", "with -stack: the offered rates of clicks/s, in order (the last should saturate the stack)")
	flag.IntVar(&o.stackStock, "stack-stock", 10_000_000, "with -stack: units on sale (enough that nothing sells out)")
	flag.StringVar(&o.stackProf, "stack-cpuprofile", "", "with -stack: write the service's CPU profile over every rate to this file (its -cpuprofile)")
	inTxRates := flag.String("stack-relay-in-tx", "300", "with -stack: after the rates above, run the service again on a fresh sale with its outbox relays in InTx mode (its -relay-in-tx) at these offered rates, each of which must be one of -stack-rates, and print both relay modes side by side; \"none\" to skip")
	flag.BoolVar(&o.stackFloor, "stack-floor", true, "with -stack: before the service starts, measure on the same redis-server and nats-server the least CPU an order's HTTP request, three Redis scripts and two JetStream messages take, and print the most stack_vs_kit can be over it")
	offFlags := flag.String("stack-off", "none", "with -stack: the service's flags that each turn one of its savings off (e.g. -event-two-step,-jetstream-fetch); for each, the service runs again on a fresh sale with it at the rates of -stack-off-rates, then once more with none of them, and the report puts every run side by side; \"none\" to skip")
	offRates := flag.String("stack-off-rates", "", "with -stack: the offered rates of the -stack-off runs, each of which must be one of -stack-rates (default: 300 when it is one, and the last)")
	flag.BoolVar(&o.stackCitus, "stack-citus", false, "with -stack: "+pgharness.EnvURL+" is a Citus coordinator (schema-based sharding; every node on this machine, each with pg_stat_statements): the kit and the service run their sale in a distributed schema, and each node's CPU, WAL and statements are read")
	return func() error {
		var err error
		if o.stackRates, err = intList(*rates); err != nil {
			return err
		}
		if *inTxRates != "none" && *inTxRates != "" {
			if o.stackInTx, err = intList(*inTxRates); err != nil {
				return err
			}
			for _, r := range o.stackInTx {
				if !slices.Contains(o.stackRates, r) {
					return fmt.Errorf("-stack-relay-in-tx rate %d is not one of -stack-rates %s", r, *rates)
				}
			}
		}
		if *offFlags != "none" && *offFlags != "" {
			o.stackOff, o.stackOffAt, err = offSwitches(*offFlags, *offRates, o.stackRates)
		}
		return err
	}
}
