package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/frontdoor"
	"github.com/seckillkit/seckill/examples/seckill/reconcile"
	"github.com/seckillkit/seckill/examples/seckill/web"
)

// config is everything a run can be told (see the flags in main.go).
type config struct {
	// Stack is stackReal (Redis front door, NATS JetStream broker) or
	// stackMemory (in-process stand-ins for both).
	Stack string
	// RedisURL and NATSURL name the running servers of the real stack.
	RedisURL, NATSURL string
	// JetStream tunes the broker of the real stack (zero: defaults).
	JetStream broker.JetStreamConfig

	Schema    string
	Stock     int
	Buckets   int
	Buyers    int
	Consumers int
	Clickers  int // goroutines the buyers click from
	PoolSize  int
	Relays    int
	// RelayInTx runs the outbox relays in outbox.RelayConfig.InTx mode:
	// each batch published inside the transaction that claims it.
	RelayInTx bool
	// StepByStep makes the consumer run every order message through
	// flow.Service.PlaceOrderStepByStep (a round trip per step) instead of
	// PlaceOrder (one batch for a fresh order).
	StepByStep bool
	// EventTwoStep makes the event consumers whose result is known before
	// they apply the event (ORDER_CREATED, REFUND_REQUESTED) claim it and
	// then record the result with inbox.Store.Complete, in four round
	// trips, instead of claiming it with its result behind a deferred
	// BEGIN, in two: the longer way, kept to measure what the shorter
	// one saves (bench -stack -stack-off).
	EventTwoStep bool
	// EventBatch is the most events an event consumer whose result is
	// known up front claims in one transaction: every event its pull
	// holds when it starts, up to EventBatch (no waiting for more). 1 (or
	// 0) claims one event per transaction, the longer way, kept to
	// measure what batches save (bench -stack -stack-off -event-batch=1).
	EventBatch int
	// ShedFor is how long POST /orders answers busy at once, before its
	// guard and the front door, after the full queue refused a publish
	// (0: never; each click then reserves, is refused and releases).
	ShedFor time.Duration
	// Citus selects the statement shapes that Citus routes whole to the
	// node holding the schema where the default one would be split (see
	// flow.Config.Citus).
	Citus bool
	// Activities is the number of activities on sale at once, each in its
	// own schema (activitySchema); 0 or 1 means one, in Schema.
	Activities int
	// Activity is the activity id on sale (0 means 1).
	Activity int64

	QueueDepth  int
	DupRate     float64 // deliveries duplicated on purpose
	ResendRate  float64 // reservations re-sent under a new message id
	DoubleClick float64 // buyers who click twice
	FrontDrift  float64 // extra stock the front door believes in (PostgreSQL refuses it)
	FrontForget float64 // reservations whose buyer the front door forgets (PostgreSQL refuses the second order)

	PayRate     float64 // orders paid in time
	LatePayRate float64 // orders paid after they were cancelled
	DupCallback float64 // payment callbacks delivered twice
	OrderTTL    time.Duration
	Seed        uint64

	// ReleaseFailures is the number of failed front-door releases after
	// which a cancelled order's reservation is MANUAL_REQUIRED (0: the
	// default, flow.DefaultMaxReleaseFailures).
	ReleaseFailures int

	// Security holds the keys and limits of the HTTP face (zero: random
	// keys, the defaults); the default run's buyers and payer use them too.
	Security web.SecurityConfig
}

// item is the SKU on sale.
func (c config) item() flow.SKU {
	return flow.SKU{ActivityID: max(c.Activity, 1), SKUID: 1001, Title: "Flash-sale phone", UnitPrice: 99900, Currency: "CNY",
		Stock: int32(c.Stock), Buckets: int16(c.Buckets)}
}

// The stacks a run can use.
const (
	stackReal   = "real"
	stackMemory = "memory"
)

func defaultConfig() config {
	return config{
		Stack: stackReal, Schema: "seckill", Stock: 10000, Buckets: 64, Buyers: 40000, Consumers: 16, Clickers: 8, PoolSize: 40, Relays: 2, EventBatch: 16, ShedFor: 20 * time.Millisecond,
		QueueDepth: 2000, DupRate: 0.05, ResendRate: 0.01, DoubleClick: 0.10, FrontDrift: 0.01, FrontForget: 0.005,
		PayRate: 0.70, LatePayRate: 0.03, DupCallback: 0.10, OrderTTL: 30 * time.Second, Seed: 1,
		ReleaseFailures: flow.DefaultMaxReleaseFailures,
	}
}

// report is what a run prints.
type report struct {
	FrontDoor, Broker                                          string
	FrontDown, Rebuilds, Deduplicated, Releases, Refunds       int64
	ReleaseFailures, ReleasesManual                            int64
	EventDuplicates                                            int64
	E2E50, E2E99                                               time.Duration
	Reconciliation                                             *reconcile.Result
	Offered, FrontAccepted, FrontSoldOut, FrontAlready, Busy   int64
	Created, Already, UserAlready, SoldOut, Duplicates, Poison int64
	Deliveries, Redeliveries, TxErrors, Retries, UnknownCmts   int64
	Paid, DupCallbacks, PaidAfterCancel, Cancelled             int64
	Published                                                  map[string]int64
	SaleSeconds, OrdersPerSecond                               float64
	P50, P99                                                   time.Duration
	Checks                                                     []flow.Check
}

// Passed reports whether every audit check passed and the reconciliation
// (when there is one) found no unexplained difference.
func (r report) Passed() bool {
	for _, c := range r.Checks {
		if !c.Pass {
			return false
		}
	}
	if r.Reconciliation != nil && !r.Reconciliation.Passed() {
		return false
	}
	return len(r.Checks) > 0
}

// runSale runs the default flow end to end on pool: sale, payments and
// timeouts, outbox drain, audit. progress (may be nil) receives a status
// line now and then.
func runSale(ctx context.Context, pool *pgxpool.Pool, cfg config, log *slog.Logger, progress func(string)) (report, error) {
	return runSaleHooked(ctx, pool, cfg, log, progress, nil)
}

// saleHooks let the fault tests act at points of a run.
type saleHooks struct {
	started  func(*service)     // the service is up, before the first click
	finished func(report)       // the report is ready, before the service closes
	click    func(i, total int) // before the i-th click of the sale
}

func runSaleHooked(ctx context.Context, pool *pgxpool.Pool, cfg config, log *slog.Logger, progress func(string), hooks *saleHooks) (report, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	run := &saleRun{ctx: ctx, cfg: cfg, log: log, hooks: hooks, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5ec))}
	s, err := newService(ctx, pool, cfg, log)
	if err != nil {
		return report{}, err
	}
	defer s.close()
	run.s = s
	if err := run.prepare(); err != nil {
		return report{}, err
	}

	// Background: consumers and relays.
	stopAll, err := s.startBackground(ctx, cfg.Consumers, cfg.Relays)
	if err != nil {
		return report{}, err
	}
	defer stopAll()
	defer run.showProgress(progress)()
	run.startBuyers()
	defer run.finishBuyers()
	cancelDone := make(chan error, 1)
	cancelCtx, stopCancel := context.WithCancel(ctx)
	defer stopCancel()
	go func() { cancelDone <- s.cancelLoop(cancelCtx) }()

	// Phase 1: the sale.
	saleSeconds, err := run.sell()
	if err != nil {
		return report{}, err
	}
	// Phase 2: every order is paid or cancelled.
	if err := run.settle(); err != nil {
		return report{}, err
	}
	stopCancel()
	if err := <-cancelDone; err != nil && !errors.Is(err, context.Canceled) {
		return report{}, err
	}

	// Phase 3: drain the outbox (the relays publish everything) and let
	// the event consumers apply it.
	if err := s.waitOutboxDrained(ctx); err != nil {
		return report{}, err
	}
	if err := s.waitEventsConsumed(ctx); err != nil {
		return report{}, err
	}
	stopAll()

	// Phase 4: report, audit and reconciliation, at rest: every check judged.
	r, err := run.report(saleSeconds)
	if err != nil {
		return report{}, err
	}
	if hooks != nil && hooks.finished != nil {
		hooks.finished(r)
	}
	if n := run.payErrs.Load(); n > 0 {
		return r, fmt.Errorf("%d payment callbacks failed", n)
	}
	return r, nil
}

// saleRun is one run of the sale: the service, the buyers' HTTP client,
// and the buyers who pay for the orders they see.
type saleRun struct {
	ctx   context.Context
	cfg   config
	log   *slog.Logger
	hooks *saleHooks
	s     *service
	web   *client

	rngMu sync.Mutex
	rng   *rand.Rand

	// Buyers learn of their orders from ORDER_CREATED (at least once each;
	// a notice after the buyers left is ignored).
	createdCh     chan int64
	createdMu     sync.Mutex
	createdClosed bool

	payCh        chan flow.Payment
	payers       sync.WaitGroup
	payErrs      atomic.Int64
	late         []int64 // orders whose buyers pay only after the cancel
	redeliveries sync.WaitGroup
	buyersDone   chan struct{}
	lateToo      bool
	// finishBuyers ends the buyers and then the payers, after the late
	// payments when lateToo; it runs once: at the end of phase 2, or on
	// an early return (an error, or the run cancelled), without them.
	finishBuyers func()
}

// chance is true with probability p.
func (run *saleRun) chance(p float64) bool {
	run.rngMu.Lock()
	defer run.rngMu.Unlock()
	return run.rng.Float64() < p
}

// prepare builds the buyers' HTTP face (tokens, idempotency keys, signed
// callbacks), sets the front door's drift and the ORDER_CREATED notices.
func (run *saleRun) prepare() error {
	s, cfg := run.s, run.cfg
	sec := cfg.Security
	sec.IdempotencyTTL = cmp.Or(sec.IdempotencyTTL, 10*time.Minute) // the run's sale is over well before
	w, err := web.New(run.ctx, s, sec, false)
	if err != nil {
		return err
	}
	run.web = newClient(w)
	if cfg.FrontDrift > 0 { // the front door believes in a little more stock than PostgreSQL has
		if err := s.front.AddDrift(run.ctx, int32(float64(cfg.Stock)*cfg.FrontDrift)); err != nil {
			return err
		}
	}
	if run.hooks != nil && run.hooks.started != nil {
		run.hooks.started(s)
	}
	run.createdCh = make(chan int64, cfg.Stock*2+1024)
	s.onOrderCreated = func(id int64) {
		run.createdMu.Lock()
		defer run.createdMu.Unlock()
		if run.createdClosed {
			return
		}
		select {
		case run.createdCh <- id:
		default: // the buyer missed it: the order expires
		}
	}
	return nil
}

// showProgress calls progress with a status line now and then, until the
// function it returns is called.
func (run *saleRun) showProgress(progress func(string)) (stop func()) {
	bg, stop := context.WithCancel(run.ctx)
	if progress == nil {
		return stop
	}
	s := run.s
	t := time.NewTicker(250 * time.Millisecond)
	go func() {
		defer t.Stop()
		for {
			select {
			case <-bg.Done():
				return
			case <-t.C:
				progress(fmt.Sprintf("clicks %d  queued %d  orders %d  rejected %d  paid %d  cancelled %d  published %d",
					s.stats.clicks.Load(), s.q.Pending(bg), s.stats.created.Load(), s.stats.soldOut.Load()+s.stats.userAlready.Load(),
					s.stats.paid.Load(), s.stats.cancelled.Load(), countIDs(&s.stats.publishedIDs)))
			}
		}
	}()
	return stop
}

// pay sends one payment callback, counting and logging a failure.
func (run *saleRun) pay(p flow.Payment) {
	if _, err := run.web.pay(run.ctx, p); err != nil {
		run.payErrs.Add(1)
		run.log.Warn("payment failed", "order_id", p.OrderID, "error", err)
	}
}

// startBuyers starts the buyers and the payers. Buyers pay for their
// orders as soon as they see them (ORDER_CREATED reaches them); some never
// pay and their orders expire; some pay only after the cancel. Payments
// and the timeout canceller race on the order rows throughout.
func (run *saleRun) startBuyers() {
	cfg := run.cfg
	run.payCh = make(chan flow.Payment, 256)
	for range 4 {
		run.payers.Go(func() {
			for p := range run.payCh {
				run.pay(p)
			}
		})
	}
	run.buyersDone = make(chan struct{})
	go func() {
		defer close(run.buyersDone)
		seen := map[int64]bool{}
		for id := range run.createdCh {
			if seen[id] { // ORDER_CREATED is published at least once
				continue
			}
			seen[id] = true
			switch {
			case run.chance(cfg.PayRate):
				p := run.s.paymentFor(id)
				run.payCh <- p
				if run.chance(cfg.DupCallback) {
					run.redeliver(p) // the provider calls back twice
				}
			case run.chance(cfg.LatePayRate / (1 - cfg.PayRate)):
				run.late = append(run.late, id)
			}
		}
	}()
	run.finishBuyers = sync.OnceFunc(func() {
		run.createdMu.Lock()
		run.createdClosed = true
		close(run.createdCh)
		run.createdMu.Unlock()
		<-run.buyersDone
		run.redeliveries.Wait()
		if run.lateToo {
			for _, id := range run.late { // paid after the cancel: a refund
				run.payCh <- run.s.paymentFor(id)
			}
		}
		close(run.payCh)
		run.payers.Wait()
	})
}

// redeliver is the provider calling back again a moment later (a delivery
// it did not see acknowledged), signed afresh.
func (run *saleRun) redeliver(p flow.Payment) {
	run.redeliveries.Go(func() {
		select {
		case <-run.ctx.Done():
			return
		case <-time.After(1100 * time.Millisecond):
		}
		run.pay(p)
	})
}

// sell is phase 1, the sale: buyers click in random order, some twice,
// from several goroutines; a scanner re-sends some reservations under new
// message ids. It returns once the queue is idle, with the sale's length.
func (run *saleRun) sell() (seconds float64, _ error) {
	ctx, cfg, s := run.ctx, run.cfg, run.s
	saleStart := time.Now()
	var clicks []int64
	for u := 1; u <= cfg.Buyers; u++ {
		clicks = append(clicks, int64(u))
		if run.chance(cfg.DoubleClick) {
			clicks = append(clicks, int64(u))
		}
	}
	run.rng.Shuffle(len(clicks), func(i, j int) { clicks[i], clicks[j] = clicks[j], clicks[i] })
	var (
		resent   []frontdoor.Reservation
		resentMu sync.Mutex
		next     atomic.Int64
		clickers sync.WaitGroup
	)
	for range max(cfg.Clickers, 1) { // buyers click at once, from several goroutines
		clickers.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(clicks) || ctx.Err() != nil {
					return
				}
				if r, ok := run.click(i, clicks); ok && run.chance(cfg.ResendRate) {
					resentMu.Lock()
					resent = append(resent, r)
					resentMu.Unlock()
				}
			}
		})
	}
	clickers.Wait()
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	for _, r := range resent { // a scanner re-sends reservations under new message ids
		for errors.Is(s.publish(ctx, r, uuid.Must(uuid.NewV7())), broker.ErrBusy) && ctx.Err() == nil {
			time.Sleep(2 * time.Millisecond)
		}
	}
	if err := s.q.WaitIdle(ctx); err != nil {
		return 0, err
	}
	return time.Since(saleStart).Seconds(), nil
}

// click is the i-th click of the sale, retried through back-pressure and
// front-door recovery; ok reports a reservation.
func (run *saleRun) click(i int, clicks []int64) (_ frontdoor.Reservation, ok bool) {
	ctx, s, u := run.ctx, run.s, clicks[i]
	if run.hooks != nil && run.hooks.click != nil {
		run.hooks.click(i, len(clicks))
	}
	key := uuid.NewString() // the click's Idempotency-Key, the same for its retries
	r, err := run.web.click(ctx, u, key)
	// Back-pressure or recovery: the buyer retries a moment later, until
	// the run is cancelled (its consumers then stop, and a full queue
	// stays full).
	for (errors.Is(err, broker.ErrBusy) || errors.Is(err, frontdoor.ErrDown)) && ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
		if errors.Is(err, frontdoor.ErrDown) {
			time.Sleep(20 * time.Millisecond)
			s.stats.clicks.Add(-1) // the same buyer's click, counted once (busy ones are subtracted in the report)
		}
		r, err = run.web.click(ctx, u, key)
	}
	if err != nil {
		return frontdoor.Reservation{}, false
	}
	if run.chance(run.cfg.FrontForget) { // a front-door failover loses this buyer: a second click gets through
		if err := s.front.Forget(ctx, u); err == nil {
			if _, err := run.web.click(ctx, u, uuid.NewString()); err == nil {
				s.stats.clicks.Add(-1) // the same buyer's click, counted once
			}
		}
	}
	return r, true
}

// settle is phase 2: wait until the relays have published every
// ORDER_CREATED (so the buyers have seen their orders), then until no
// order is left unpaid, then send the late payments and end the buyers.
func (run *saleRun) settle() error {
	ctx, s := run.ctx, run.s
	if err := s.waitOutboxDrained(ctx); err != nil {
		return err
	}
	if err := s.waitEventsConsumed(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(run.cfg.OrderTTL + time.Minute)
	for {
		n, err := s.unpaidOrders(ctx)
		if err != nil {
			return err
		}
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	run.lateToo = true
	run.finishBuyers()
	return nil
}

// report is phase 4: the figures, the audit and the reconciliation.
func (run *saleRun) report(saleSeconds float64) (report, error) {
	ctx, s := run.ctx, run.s
	checks, err := s.audit(ctx, false)
	if err != nil {
		return report{}, err
	}
	rec, err := s.reconcile(ctx)
	if err != nil {
		return report{}, err
	}
	fig := s.q.Figures()
	r := report{
		FrontDoor: s.front.Name(), Broker: s.q.Name(), Reconciliation: rec,
		FrontDown: s.stats.frontDown.Load(), Rebuilds: s.stats.rebuilds.Load(), Deduplicated: fig.Deduplicated,
		Releases: s.stats.releases.Load(), ReleaseFailures: s.stats.releaseFailures.Load(), ReleasesManual: s.stats.releasesManual.Load(), Refunds: s.stats.refunds.Load(), EventDuplicates: s.stats.eventDuplicates.Load(),
		E2E50: s.e2e.percentile(50), E2E99: s.e2e.percentile(99),
		Offered: s.stats.clicks.Load() - s.stats.busy.Load(), FrontAccepted: s.stats.frontAccepted.Load(), FrontSoldOut: s.stats.frontSoldOut.Load(),
		FrontAlready: s.stats.frontAlready.Load(), Busy: s.stats.busy.Load(),
		Created: s.stats.created.Load(), Already: s.stats.already.Load(), UserAlready: s.stats.userAlready.Load(),
		SoldOut: s.stats.soldOut.Load(), Duplicates: s.stats.duplicates.Load(), Poison: s.stats.poison.Load(),
		Deliveries: fig.Deliveries, Redeliveries: fig.Redeliveries, TxErrors: s.stats.txErrors.Load(),
		Retries: s.stats.retries.Load(), UnknownCmts: s.stats.unknownCmts.Load(),
		Paid: s.stats.paid.Load(), DupCallbacks: s.stats.dupCallbacks.Load(), PaidAfterCancel: s.stats.paidAfterCancel.Load(),
		Cancelled: s.stats.cancelled.Load(), Published: map[string]int64{},
		SaleSeconds: saleSeconds, OrdersPerSecond: float64(s.stats.created.Load()) / saleSeconds,
		P50: s.lat.percentile(50), P99: s.lat.percentile(99), Checks: checks,
	}
	for _, tag := range []string{flow.TagOrderCreated, flow.TagOrderPaid, flow.TagFrontDoorRelease, flow.TagRefundRequested} {
		r.Published[tag] = s.stats.publishedTag(tag)
	}
	return r, nil
}

// cancelLoop sweeps expired orders until ctx ends.
func (s *service) cancelLoop(ctx context.Context) error {
	for {
		n, err := s.cancelExpired(ctx, 500)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Warn("cancel sweep failed", "error", err)
		}
		if n == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

func (s *service) paymentFor(orderID int64) flow.Payment {
	return flow.Payment{OrderID: orderID, ProviderTradeNo: fmt.Sprintf("T%d", orderID), CallbackID: fmt.Sprintf("CB%d", orderID),
		Amount: s.Item.UnitPrice, Currency: s.Item.Currency}
}

// waitEventsConsumed waits until the event consumers of the real stack
// have acknowledged every event in the stream (with -stack memory the
// relays apply the events as they publish them).
func (s *service) waitEventsConsumed(ctx context.Context) error {
	if s.js == nil {
		return nil
	}
	for {
		st, err := s.js.State(ctx)
		if err == nil {
			idle := true
			for _, c := range st.Consumers {
				if c.Stream == s.js.EventStream && c.Pending+c.AckPending > 0 {
					idle = false
				}
			}
			if idle {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitOutboxDrained waits until no event is pending, being sent or
// waiting for a retry.
func (s *service) waitOutboxDrained(ctx context.Context) error {
	for {
		st, err := s.Outbox.Backlog(ctx, s.Pool)
		if err != nil {
			return err
		}
		if st.Pending+st.Sending+st.Retry == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// unpaidOrders counts orders neither paid nor cancelled yet.
func (s *service) unpaidOrders(ctx context.Context) (int64, error) {
	var n int64
	err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{s.Schema, "orders"}.Sanitize()+` WHERE status IN (10, 20)`).Scan(&n)
	return n, err
}

func countIDs(m *sync.Map) int64 {
	var n int64
	m.Range(func(any, any) bool { n++; return true })
	return n
}

// print writes the report and the audit.
func (r report) print(w io.Writer) {
	line := func(name string, v any) { fmt.Fprintf(w, "  %-44s %v\n", name, v) }
	fmt.Fprintln(w, "seckill: flash sale report")
	line("front door", r.FrontDoor)
	line("broker", r.Broker)
	line("buyer clicks", r.Offered)
	line("accepted by the front door", r.FrontAccepted)
	line("refused at the front door: sold out", r.FrontSoldOut)
	line("refused at the front door: already reserved", r.FrontAlready)
	line("answered busy (queue full), clicked again", r.Busy)
	line("orders created", r.Created)
	line("rejected in PostgreSQL: sold out", r.SoldOut)
	line("rejected in PostgreSQL: user already ordered", r.UserAlready)
	line("same reservation, new message id: answered", r.Already)
	line("duplicate deliveries absorbed by the inbox", r.Duplicates)
	line("deliveries / redeliveries", fmt.Sprintf("%d / %d", r.Deliveries, r.Redeliveries))
	line("poison messages recorded for review", r.Poison)
	line("publishes deduplicated by the broker", r.Deduplicated)
	line("front door down (clicked again) / rebuilt", fmt.Sprintf("%d / %d", r.FrontDown, r.Rebuilds))
	line("front-door releases applied", r.Releases)
	line("release refusals / MANUAL_REQUIRED", fmt.Sprintf("%d / %d", r.ReleaseFailures, r.ReleasesManual))
	line("refund requests consumed", r.Refunds)
	line("event redeliveries answered by the inbox", r.EventDuplicates)
	line("transactions retried (40001/40P01)", r.Retries)
	line("commits with unknown outcome", r.UnknownCmts)
	line("orders paid (duplicate callbacks absorbed)", fmt.Sprintf("%d (%d)", r.Paid, r.DupCallbacks))
	line("orders cancelled by timeout, stock released", r.Cancelled)
	line("payments after cancel: refunds requested", r.PaidAfterCancel)
	line("events published", fmt.Sprintf("%d ORDER_CREATED, %d ORDER_PAID, %d FRONTDOOR_RELEASE, %d REFUND_REQUESTED",
		r.Published[flow.TagOrderCreated], r.Published[flow.TagOrderPaid], r.Published[flow.TagFrontDoorRelease], r.Published[flow.TagRefundRequested]))
	line("sale duration", fmt.Sprintf("%.1fs", r.SaleSeconds))
	line("orders per second", fmt.Sprintf("%.0f", r.OrdersPerSecond))
	line("order transaction latency p50 / p99", fmt.Sprintf("%v / %v", r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond)))
	line("click → order visible p50 / p99", fmt.Sprintf("%v / %v", r.E2E50.Round(100*time.Microsecond), r.E2E99.Round(100*time.Microsecond)))
	fmt.Fprintln(w, "audit:")
	for _, c := range r.Checks {
		fmt.Fprintf(w, "  %s  [%s] %s: %s\n", web.CheckStatus(c), c.Invariant, c.Name, c.Detail)
	}
	if flow.Passed(r.Checks) {
		fmt.Fprintln(w, "audit: all invariants hold")
	} else {
		fmt.Fprintln(w, "audit: FAILED")
	}
	if r.Reconciliation != nil {
		r.Reconciliation.Print(w)
	}
}
