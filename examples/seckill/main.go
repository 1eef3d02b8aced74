// Command seckill runs the full flash-sale flow of the seckill kit on the
// real stack — a Redis front door, NATS JetStream, PostgreSQL — and audits
// and reconciles the result.
//
// With no flags it starts a throwaway PostgreSQL, redis-server and
// nats-server -js (or uses SECKILL_DATABASE_URL, SECKILL_REDIS_URL /
// -redis and SECKILL_NATS_URL / -nats), provisions 10,000 units over 64
// buckets, lets 40,000 buyers click (some twice), runs the consumers, the
// outbox relays, the event consumers, payments with duplicate and late
// callbacks and the timeout canceller, drains everything, prints a report,
// checks every invariant and reconciles Redis, PostgreSQL, the ledger and
// the streams. It exits non-zero if a check fails or a difference is
// unexplained. -stack memory runs the same flow with in-process stand-ins
// for Redis and NATS.
//
// During the run it serves the operator view, a live page of the sale,
// on -page (default: a free port on 127.0.0.1; it prints the URL).
//
// With -serve it keeps an HTTP API up instead. The buyers' face, on the
// -serve address:
//
//	POST /orders            Authorization: Bearer <buyer token>, Idempotency-Key   → 202 {"request_id": …, "status": "queued"}
//	GET  /orders/{request}  Authorization: Bearer <buyer token>                    → the order's status
//	POST /payments/callback Seckill-Signature: t=…,v1=… {"order_id": …, "provider_trade_no": …, "callback_id": …, "amount": …, "currency": "CNY"}
//
// The operators' face, on the -page address (loopback only), or on the
// -serve address with "Authorization: Bearer $SECKILL_OPERATOR_TOKEN":
//
//	GET  /          → the operator view (a live page)
//	GET  /events    → its server-sent event stream
//	GET  /audit     → every invariant, checked now in one snapshot (live; ?at_rest=true: strict)
//	GET  /stats     → counters and outbox figures
//	GET  /reconcile → the three-way reconciliation, now
//	GET  /metrics   → the figures, in the Prometheus text format (OpenTelemetry's Prometheus exporter)
//
// -serve reads its keys from SECKILL_BUYER_TOKEN_KEYS and
// SECKILL_CALLBACK_SECRETS (and SECKILL_OPERATOR_TOKEN); -mint-token and
// -sign-callback make a buyer token and a callback signature with them.
// See the example's README, "Security: buyers, callbacks, operators".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"

	"github.com/seckillkit/seckill/examples/internal/stackharness"
	"github.com/seckillkit/seckill/examples/seckill/web"
	"github.com/seckillkit/seckill/internal/pgharness"
)

func main() {
	cfg := defaultConfig()
	flag.IntVar(&cfg.Stock, "stock", cfg.Stock, "units on sale")
	flag.IntVar(&cfg.Buckets, "buckets", cfg.Buckets, "inventory buckets (1-256)")
	flag.IntVar(&cfg.Buyers, "buyers", cfg.Buyers, "distinct buyers who click")
	flag.IntVar(&cfg.Consumers, "consumers", cfg.Consumers, "concurrent queue consumers")
	flag.IntVar(&cfg.Clickers, "clickers", cfg.Clickers, "goroutines the buyers click from")
	flag.IntVar(&cfg.PoolSize, "pool", cfg.PoolSize, "PostgreSQL pool size (order and event consumers, relays, payers and the canceller share it)")
	flag.IntVar(&cfg.Relays, "relays", cfg.Relays, "outbox relays")
	pathFlags(&cfg)
	flag.IntVar(&cfg.Activities, "activities", cfg.Activities, "activities on sale at once, each in its own schema <schema>_a<i> (on Citus: a distributed schema, on one worker)")
	flag.IntVar(&cfg.QueueDepth, "queue-depth", cfg.QueueDepth, "queue bound; a full queue answers busy")
	flag.Float64Var(&cfg.DupRate, "dup-rate", cfg.DupRate, "share of messages the queue delivers twice")
	flag.Float64Var(&cfg.ResendRate, "resend-rate", cfg.ResendRate, "share of reservations re-sent under a new message id")
	flag.Float64Var(&cfg.DoubleClick, "double-click", cfg.DoubleClick, "share of buyers who click twice")
	flag.Float64Var(&cfg.FrontDrift, "front-drift", cfg.FrontDrift, "extra stock the front door believes in (relative)")
	flag.Float64Var(&cfg.FrontForget, "front-forget", cfg.FrontForget, "share of buyers the front door forgets")
	flag.Float64Var(&cfg.PayRate, "pay-rate", cfg.PayRate, "share of orders paid in time")
	flag.Float64Var(&cfg.LatePayRate, "late-pay-rate", cfg.LatePayRate, "share of orders paid after their cancel")
	flag.Float64Var(&cfg.DupCallback, "dup-callback", cfg.DupCallback, "share of payment callbacks delivered twice")
	flag.DurationVar(&cfg.OrderTTL, "order-ttl", cfg.OrderTTL, "time an order may stay unpaid")
	flag.IntVar(&cfg.ReleaseFailures, "release-failures", cfg.ReleaseFailures, "failed front-door releases after which a reservation is MANUAL_REQUIRED (1-1000)")
	flag.StringVar(&cfg.Schema, "schema", cfg.Schema, "PostgreSQL schema")
	flag.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random seed")
	flag.StringVar(&cfg.Stack, "stack", cfg.Stack, `"real" (Redis + NATS JetStream + PostgreSQL) or "memory" (in-process stand-ins for Redis and NATS)`)
	redisURL := flag.String("redis", "", "Redis URL of an existing server, or of a Redis Cluster as redis://host1:port1?addr=host2:port2 (default: "+stackharness.EnvRedisURL+", else a throwaway redis-server)")
	natsURL := flag.String("nats", "", "NATS URL of an existing server with JetStream (default: "+stackharness.EnvNATSURL+", else a throwaway nats-server -js)")
	serve := flag.String("serve", "", "serve the HTTP API on this address (e.g. :8080) instead of running the sale")
	page := flag.String("page", "127.0.0.1:0", `serve the operator view (GET /) on this address during the run ("" for none); with -serve, every operator route (a web.Loopback address)`)
	mint := flag.Int64("mint-token", 0, "print a bearer token for this buyer id, signed with the first key of "+web.EnvBuyerKeys+", and exit")
	tokenTTL := flag.Duration("token-ttl", time.Hour, "with -mint-token: how long the token is valid")
	rateBuyer := flag.Int("rate-buyer", web.DefaultBuyerRate, "POST /orders per second per buyer; more get 429 (-1: no limit)")
	rateAddr := flag.Int("rate-addr", web.DefaultAddrRate, "POST /orders per second per client address; more get 429 (-1: no limit)")
	idemTTL := flag.Duration("idempotency-ttl", 0, "how long an answer stays stored under its Idempotency-Key; must cover the sale (default 24h; the default run's sale: 10m)")
	tolerance := flag.Duration("callback-tolerance", web.DefaultTolerance, "how far a payment callback's signed timestamp may be from now")
	sign := flag.Bool("sign-callback", false, "print the "+web.SignatureHeader+" header for the callback body read from stdin, signed now with the first secret of "+web.EnvCallbackSecrets+", and exit")
	verbose := flag.Bool("v", false, "log warnings and errors to stderr")
	trace := flag.Bool("trace-log", false, "with -v: also log every order transaction (one record each: its ids, attempts, SQLSTATE, rows, durations, commit result) and consumed event, with its trace_id")
	ha := flag.Bool("ha", false, "run the sale on a throwaway Patroni cluster (etcd, a leader and its synchronous standby), with -stack real on a three-node JetStream cluster and a Redis Cluster (unless -redis, -nats), and kill the leader mid-sale")
	failoverAt := flag.Float64("failover-at", 0.5, "with -ha: the share of the clicks after which the leader is killed")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof reads it)")
	flag.Parse()
	if *mint != 0 || *sign {
		if err := web.KeyTool(os.Stdin, os.Stdout, *mint, *tokenTTL, *sign); err != nil {
			fmt.Fprintln(os.Stderr, "seckill:", err)
			os.Exit(1)
		}
		return
	}

	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "seckill:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.RedisURL, cfg.NATSURL = *redisURL, *natsURL
	if cfg.Security, err = web.SecurityFromEnv(*serve != ""); err == nil {
		sec := &cfg.Security
		sec.BuyerRate, sec.AddrRate, sec.IdempotencyTTL, sec.Tolerance = *rateBuyer, *rateAddr, *idemTTL, *tolerance
		level := slog.LevelWarn
		if *trace {
			level = slog.LevelDebug
		}
		if *ha {
			err = runHA(ctx, cfg, *failoverAt, *verbose, level)
		} else {
			err = run(ctx, cfg, *serve, *page, *verbose, level)
		}
	}
	stopProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "seckill:", err)
		os.Exit(1)
	}
}

// startCPUProfile starts a CPU profile written to path ("": none) and
// returns the function that stops it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "seckill: cpu profile:", err)
		}
	}, nil
}

func run(ctx context.Context, cfg config, serve, page string, verbose bool, level slog.Level) error {
	log := slog.New(slog.DiscardHandler)
	switch {
	case verbose:
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	case serve != "": // the error ids of 500 answers reach the log
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	// What a metrics collection could not read (otelseckill's and the
	// service's callbacks) reaches the log, not OpenTelemetry's default
	// logger.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("telemetry", "error", err) }))
	srv, err := pgharness.Start(ctx, pgharness.Options{})
	if err != nil {
		return err
	}
	defer srv.Stop()
	pool, err := openPool(ctx, srv.URL, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	stopStack, err := startStack(ctx, &cfg)
	if err != nil {
		return err
	}
	defer stopStack()

	if serve != "" {
		return serveHTTP(ctx, pool, cfg, serve, page, log)
	}
	if os.Getenv(pgharness.EnvURL) == "" {
		fmt.Fprintln(os.Stderr, "seckill: started a throwaway PostgreSQL; set", pgharness.EnvURL, "to use your own")
	}
	var progress func(string)
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		progress = func(s string) { fmt.Fprintf(os.Stderr, "\r\033[K%s", s) }
	}
	start := time.Now()
	hooks, pageURL, stopPage, err := pageHooks(page)
	if err != nil {
		return err
	}
	defer stopPage()
	if pageURL != "" {
		fmt.Fprintln(os.Stderr, "seckill: operator view on", pageURL)
	}
	if cfg.Activities > 1 || cfg.Citus {
		res, err := runMany(ctx, pool, cfg, log, hooks)
		if err != nil {
			return err
		}
		res.print(os.Stdout)
		fmt.Printf("finished in %.1fs\n", time.Since(start).Seconds())
		if !res.Passed() {
			return errors.New("audit, reconciliation or the two-phase commit count failed")
		}
		return nil
	}
	return runOne(ctx, pool, cfg, log, progress, hooks, start)
}

// runOne runs one activity's sale and prints its report.
func runOne(ctx context.Context, pool *pgxpool.Pool, cfg config, log *slog.Logger, progress func(string), hooks *saleHooks, start time.Time) error {
	rep, err := runSaleHooked(ctx, pool, cfg, log, progress, hooks)
	if progress != nil {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	rep.print(os.Stdout)
	fmt.Printf("finished in %.1fs\n", time.Since(start).Seconds())
	if !rep.Passed() {
		return errors.New("audit or reconciliation failed")
	}
	return nil
}

func serveHTTP(ctx context.Context, pool *pgxpool.Pool, cfg config, addr, opAddr string, log *slog.Logger) error {
	if opAddr != "" && !web.Loopback(opAddr) {
		return fmt.Errorf("-page %q: the operator routes ask for no credentials there, so they are served on a web.Loopback address only (e.g. 127.0.0.1:8081; reach them through a tunnel, or on the -serve address with %s)", opAddr, web.EnvOperatorToken)
	}
	api, err := newAPI(ctx, pool, cfg, log)
	if err != nil {
		return err
	}
	defer api.Close()
	hs := &http.Server{Addr: addr, Handler: api, ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 16 << 10}
	ops := &http.Server{Handler: api.Operator(), ReadHeaderTimeout: 5 * time.Second}
	if opAddr != "" { // "": the operator routes only on addr, with the operator token
		opLn, err := net.Listen("tcp", opAddr)
		if err != nil {
			return fmt.Errorf("-page %s: %w", opAddr, err)
		}
		go func() { _ = ops.Serve(opLn) }()
		fmt.Fprintf(os.Stderr, "seckill: operator view on http://%s/ (%s)\n", opLn.Addr(), strings.Join([]string{"GET /", "GET /audit", "GET /stats", "GET /reconcile", "GET /metrics"}, ", "))
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		_ = ops.Shutdown(sctx)
	}()
	fmt.Fprintf(os.Stderr, "seckill: serving buyers on %s (%s)\n", addr, strings.Join([]string{"POST /orders", "GET /orders/{request_id}", "POST /payments/callback"}, ", "))
	if err := hs.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// openPool opens the run's pool on url: PoolSize connections per activity,
// and with -citus every schema the run creates a distributed schema, whole
// on one worker.
func openPool(ctx context.Context, url string, cfg config) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = int32(cfg.PoolSize * max(cfg.Activities, 1))
	pcfg.ConnConfig.Tracer = poolTracer{} // acquire time and rows written, for the order transaction's log record
	if cfg.Citus {
		pcfg.ConnConfig.RuntimeParams["citus.enable_schema_based_sharding"] = "on"
	}
	return pgxpool.NewWithConfig(ctx, pcfg)
}

// startStack starts the real stack's redis-server and nats-server (unless
// cfg names running ones) and points cfg at them; stop stops what it
// started.
func startStack(ctx context.Context, cfg *config) (stop func(), _ error) {
	switch cfg.Stack {
	case stackMemory:
		return func() {}, nil
	case stackReal:
	default:
		return nil, fmt.Errorf("-stack %q: want %q or %q", cfg.Stack, stackReal, stackMemory)
	}
	rs, err := stackharness.StartRedis(ctx, cfg.RedisURL)
	if err != nil {
		return nil, err
	}
	ns, err := stackharness.StartNATS(ctx, cfg.NATSURL)
	if err != nil {
		rs.Stop()
		return nil, err
	}
	cfg.RedisURL, cfg.NATSURL = rs.URL, ns.URL
	if rs.Owned() || ns.Owned() {
		fmt.Fprintf(os.Stderr, "seckill: started a throwaway redis-server and nats-server -js; use -redis/-nats (or %s/%s) for your own\n",
			stackharness.EnvRedisURL, stackharness.EnvNATSURL)
	}
	return func() { ns.Stop(); rs.Stop() }, nil
}

// pathFlags defines the flags that choose among the ways the service does
// the same work (the relays' mode, the order transaction's form, the event
// consumers' and the JetStream workers' longer ways, Citus's statement
// shapes) into cfg.
func pathFlags(cfg *config) {
	flag.BoolVar(&cfg.RelayInTx, "relay-in-tx", cfg.RelayInTx, "relays publish each batch inside the transaction that claims it (outbox.RelayConfig.InTx)")
	flag.BoolVar(&cfg.StepByStep, "step-by-step", cfg.StepByStep, "the consumer runs every order message as the step-by-step transaction (flow.Service.PlaceOrderStepByStep), not the one-batch PlaceOrder")
	flag.BoolVar(&cfg.EventTwoStep, "event-two-step", cfg.EventTwoStep, "event consumers whose result is known up front claim the event, then record the result (inbox.Store.Complete): four round trips instead of two (to measure the saving)")
	flag.IntVar(&cfg.EventBatch, "event-batch", cfg.EventBatch, "the most events an event consumer whose result is known up front claims in one transaction (those its pull holds at the moment); 1 claims one per transaction (to measure the saving)")
	flag.DurationVar(&cfg.ShedFor, "shed-for", cfg.ShedFor, "after the full order queue refused a publish, POST /orders answers 503 busy at once for this long, before its guard's records and the front door (0: never, every refused click reserves and releases)")
	flag.BoolVar(&cfg.JetStream.PublishEachEvent, "jetstream-publish-each", cfg.JetStream.PublishEachEvent, "the relays publish each event to JetStream and wait for its PubAck before the next, instead of sending a batch's events at once and then collecting their PubAcks (to measure the saving)")
	flag.BoolVar(&cfg.JetStream.FetchPerPull, "jetstream-fetch", cfg.JetStream.FetchPerPull, "JetStream consumers pull with Fetch, a subscription per pull request, instead of one continuous pull each (to measure the saving)")
	flag.BoolVar(&cfg.Citus, "citus", cfg.Citus, "the database is a Citus coordinator with schema-based sharding: use the statement shapes Citus routes whole to one node (order.Config.Citus)")
}
