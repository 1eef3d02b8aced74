package drills

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/orderid"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/faultproxy"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// orderIDs hands out order ids to every drill of the process.
var orderIDs orderid.Generator

// ---------------------------------------------------------------------------
// pgtx events

// txEvents counts the pgtx events of the transactions it observes (see
// observer), by kind and by a few error classes.
type txEvents struct {
	mu sync.Mutex
	n  map[string]int64
}

func newTxEvents() *txEvents { return &txEvents{n: map[string]int64{}} }

// observer is the pgtx.Observer of c's hooks.
func (c *txEvents) observer() pgtx.Observer {
	return pgtx.Observer{AttemptStart: c.AttemptStart, AttemptEnd: c.AttemptEnd, TxEnd: c.TxEnd}
}

func (c *txEvents) AttemptStart(ctx context.Context, _ pgtx.Event) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n["attempt"]++
	return ctx
}

// AttemptEnd counts retries (by cause), lost COMMIT answers and what their
// resolution found.
func (c *txEvents) AttemptEnd(_ context.Context, e pgtx.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Retry {
		c.n["retry"]++
		if pgtx.Classify(e.Err).Deadlock {
			c.n["retry_deadlock"]++
		}
	}
	if e.CommitLost {
		c.n["commit_unknown"]++
		switch outcome := pgtx.Classify(e.Err); {
		case outcome.Committed:
			c.n["resolved"]++
			c.n["resolved_committed"]++
		case outcome.NotCommitted:
			c.n["resolved"]++
			c.n["resolved_aborted"]++
		}
	}
}

// TxEnd counts the calls' outcomes ("committed", "not_committed",
// "unknown").
func (c *txEvents) TxEnd(_ context.Context, e pgtx.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch outcome := pgtx.Classify(e.Err); {
	case outcome.Committed:
		c.n["committed"]++
	case outcome.NotCommitted:
		c.n["not_committed"]++
	default:
		c.n["unknown"]++
	}
}

func (c *txEvents) get(k string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

func (c *txEvents) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.n)
}

// ---------------------------------------------------------------------------
// the rig: one flow on one schema, its messages, what the consumers saw

// msg is one queue message: what the front door sent for one reservation.
type msg struct {
	ID   uuid.UUID
	Body []byte
	M    flow.OrderMessage
	Pay  bool // the buyer pays when ORDER_CREATED is published
}

type rigConfig struct {
	// Pool carries the flow's traffic (consumers, payments, cancels).
	// Defaults to a pool of its own with 8 connections.
	Pool *pgxpool.Pool
	// Admin carries the assertions and the audit, around any fault.
	// Defaults to pgtest.Pool.
	Admin *pgxpool.Pool
	// Schema defaults to pgtest.Schema.
	Schema  string
	Stock   int32
	Buckets int16
	// Tx are the order transaction's options; the rig sets the Observer.
	Tx pgtx.Options
	// ObserveAll observes the flow's payments and sweeps too
	// (flow.Config.TxObserver), not only its order transactions: for a
	// drill that counts every COMMIT of the flow's pool.
	ObserveAll bool
	// Timeout bounds the whole drill (a safety net against hangs).
	// Defaults to 150s.
	Timeout time.Duration
}

type rig struct {
	t     *testing.T
	ctx   context.Context
	svc   *flow.Service // on cfg.Pool
	audit *flow.Service // the same schema on cfg.Admin
	admin *pgxpool.Pool
	tx    *txEvents
	pub   *recorder

	mu      sync.Mutex
	byOrder map[int64]*msg
	acks    map[uuid.UUID][]flow.Outcome
	errs    map[string]int64
	sample  map[string]error // one error of each class, for the log
	unknown map[uuid.UUID]int
	events  chan struct{} // signalled on every ack and nack
}

func newRig(t *testing.T, cfg rigConfig) *rig {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 150 * time.Second
	}
	ctx := pgtest.Context(t, cfg.Timeout)
	if cfg.Pool == nil {
		cfg.Pool = pgtest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	}
	if cfg.Admin == nil {
		cfg.Admin = pgtest.Pool(t)
	}
	if cfg.Schema == "" {
		cfg.Schema = pgtest.Schema(t)
	}
	r := &rig{
		t: t, ctx: ctx, admin: cfg.Admin, tx: newTxEvents(), pub: newRecorder(),
		byOrder: map[int64]*msg{}, acks: map[uuid.UUID][]flow.Outcome{}, errs: map[string]int64{},
		sample: map[string]error{}, unknown: map[uuid.UUID]int{}, events: make(chan struct{}, 1),
	}
	opts := cfg.Tx
	if opts.Name == "" {
		opts.Name = "place_order"
	}
	opts.Observer = r.tx.observer()
	var all pgtx.Observer
	if cfg.ObserveAll {
		all = opts.Observer
	}
	svc, err := flow.New(ctx, cfg.Pool, flow.Config{Schema: cfg.Schema, TxOptions: opts, TxObserver: all, Item: flow.SKU{
		ActivityID: 7, SKUID: 70, Title: "drill phone", UnitPrice: 1999, Currency: "CNY", Stock: cfg.Stock, Buckets: cfg.Buckets,
	}})
	if err != nil {
		t.Fatal(err)
	}
	r.svc = svc
	a := *svc
	a.Pool = cfg.Admin
	r.audit = &a
	return r
}

// plan says which messages to make.
type plan struct {
	Users       int   // buyers, one reservation each
	FirstUser   int64 // user id of the first buyer. Defaults to 1.
	DoubleClick int   // every DoubleClick-th buyer sends a second reservation (0: none)
	Expired     int   // every Expired-th order is already expired: the canceller takes it (0: none)
	Pay         int   // every Pay-th order is paid when ORDER_CREATED is published (0: none)
	Buckets     []int16
}

// messages makes the messages of p, spread over p.Buckets (all buckets when
// empty) round robin, in a shuffled order.
func (r *rig) messages(p plan) []*msg {
	r.t.Helper()
	if p.FirstUser == 0 {
		p.FirstUser = 1
	}
	if len(p.Buckets) == 0 {
		for b := range r.svc.Item.Buckets {
			p.Buckets = append(p.Buckets, b)
		}
	}
	var out []*msg
	now := time.Now()
	add := func(user int64) {
		i := len(out)
		m := flow.OrderMessage{
			RequestID: uuid.Must(uuid.NewV7()), ReservationID: uuid.Must(uuid.NewV7()), OrderID: orderIDs.Next(),
			ActivityID: r.svc.Item.ActivityID, SKUID: r.svc.Item.SKUID, UserID: user, Bucket: p.Buckets[i%len(p.Buckets)],
			UnitPrice: r.svc.Item.UnitPrice, Currency: r.svc.Item.Currency, SKUTitle: r.svc.Item.Title,
			ReservedAt: now, ReservationTo: now.Add(15 * time.Minute), OrderExpireAt: now.Add(time.Hour),
		}
		if p.Expired > 0 && i%p.Expired == p.Expired-1 {
			m.OrderExpireAt = now.Add(-time.Second)
		}
		body, err := json.Marshal(m)
		if err != nil {
			r.t.Fatal(err)
		}
		out = append(out, &msg{ID: uuid.Must(uuid.NewV7()), Body: body, M: m, Pay: p.Pay > 0 && i%p.Pay == 0})
	}
	for u := range p.Users {
		user := p.FirstUser + int64(u)
		add(user)
		if p.DoubleClick > 0 && u%p.DoubleClick == p.DoubleClick-1 {
			add(user)
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	r.mu.Lock()
	for _, m := range out {
		r.byOrder[m.M.OrderID] = m
	}
	r.mu.Unlock()
	return out
}

// resend is m re-sent under a new message id.
func resend(m *msg) *msg { return &msg{ID: uuid.Must(uuid.NewV7()), Body: m.Body, M: m.M, Pay: m.Pay} }

func (r *rig) signal() {
	select {
	case r.events <- struct{}{}:
	default:
	}
}

// ack records an acknowledged delivery.
func (r *rig) ack(m *msg, out flow.Outcome) {
	r.mu.Lock()
	r.acks[m.ID] = append(r.acks[m.ID], out)
	r.mu.Unlock()
	r.signal()
}

// errClass names the class of a consumer error.
func errClass(err error) string {
	switch {
	case pgtx.Classify(err).OutcomeUnknown:
		return "commit_unknown"
	case errors.Is(err, pgtx.ErrTooManyAttempts):
		return "too_many_attempts"
	case pgtx.Classify(err).Deadlock:
		return "deadlock"
	case pgtx.Classify(err).LockTimeout:
		return "lock_timeout"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "other"
}

// nack records a failed delivery (the message will come again).
func (r *rig) nack(m *msg, err error) {
	c := errClass(err)
	r.mu.Lock()
	r.errs[c]++
	if r.sample[c] == nil {
		r.sample[c] = err
	}
	if c == "commit_unknown" {
		r.unknown[m.ID]++
	}
	r.mu.Unlock()
	r.signal()
}

func (r *rig) errCount(class string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs[class]
}

func (r *rig) logErrors() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t.Logf("consumer errors by class: %v", r.errs)
	for c, err := range r.sample {
		r.t.Logf("  e.g. %s: %v", c, err)
	}
}

// ---------------------------------------------------------------------------
// the queue: at-least-once delivery to a pool of consumers

type deliverConfig struct {
	Workers int // consumers. Defaults to 8.
	// Timeout, when positive, bounds each delivery (its ctx deadline).
	Timeout time.Duration
	// Handle processes one delivery. Defaults to the flow's PlaceOrder.
	Handle func(ctx context.Context, m *msg) (flow.Outcome, error)
	// Redelay is the wait before a nacked message comes back, by attempt.
	// Defaults to 2ms doubling up to 100ms, jittered.
	Redelay func(attempt int) time.Duration
	// FailFast, when set, says which consumer errors end the drill at once
	// instead of a redelivery (errors no fault of the drill can explain).
	FailFast func(err error) bool
}

type delivery struct {
	m       *msg
	attempt int
}

// queue delivers each of its messages until a consumer acknowledges it.
type queue struct {
	r       *rig
	ch      chan delivery
	left    atomic.Int64
	acked   atomic.Int64
	done    chan struct{}
	stop    context.CancelFunc
	wg      sync.WaitGroup
	redeliv atomic.Int64
	maxAtt  atomic.Int64
	timers  sync.WaitGroup

	failOnce sync.Once
	failed   chan struct{}
	failErr  error
}

func (q *queue) fail(err error) {
	q.failOnce.Do(func() { q.failErr = err; close(q.failed) })
}

func backoff(attempt int) time.Duration {
	d := 2 * time.Millisecond << min(attempt-1, 6)
	d = min(d, 100*time.Millisecond)
	return d/2 + rand.N(d/2+1)
}

// consume starts dc.Workers consumers on msgs. Wait for them with wait.
func (r *rig) consume(msgs []*msg, dc deliverConfig) *queue {
	if dc.Workers == 0 {
		dc.Workers = 8
	}
	if dc.Handle == nil {
		dc.Handle = func(ctx context.Context, m *msg) (flow.Outcome, error) { return r.svc.PlaceOrder(ctx, m.ID, m.Body) }
	}
	if dc.Redelay == nil {
		dc.Redelay = backoff
	}
	ctx, cancel := context.WithCancel(r.ctx)
	q := &queue{r: r, ch: make(chan delivery, len(msgs)), done: make(chan struct{}), stop: cancel, failed: make(chan struct{})}
	q.left.Store(int64(len(msgs)))
	if len(msgs) == 0 {
		close(q.done)
	}
	for _, m := range msgs {
		q.ch <- delivery{m: m, attempt: 1}
	}
	for range dc.Workers {
		q.wg.Add(1)
		go func() {
			defer q.wg.Done()
			for {
				var d delivery
				select {
				case <-ctx.Done():
					return
				case d = <-q.ch:
				}
				q.maxAtt.Store(max(q.maxAtt.Load(), int64(d.attempt)))
				dctx, dcancel := ctx, context.CancelFunc(func() {})
				if dc.Timeout > 0 {
					dctx, dcancel = context.WithTimeout(ctx, dc.Timeout)
				}
				out, err := dc.Handle(dctx, d.m)
				dcancel()
				switch {
				case err == nil:
					r.ack(d.m, out)
				case errors.Is(err, flow.ErrPoison):
					r.t.Errorf("message %s is poison: %v", d.m.ID, err)
				default:
					r.nack(d.m, err)
					if dc.FailFast != nil && dc.FailFast(err) {
						q.fail(err)
						return
					}
					if ctx.Err() != nil {
						return
					}
					q.redeliv.Add(1)
					next := delivery{m: d.m, attempt: d.attempt + 1}
					q.timers.Add(1)
					time.AfterFunc(dc.Redelay(d.attempt), func() { defer q.timers.Done(); q.ch <- next })
					continue
				}
				q.acked.Add(1)
				if q.left.Add(-1) == 0 {
					close(q.done)
				}
			}
		}()
	}
	return q
}

// waitAcked blocks until n messages have been acknowledged.
func (q *queue) waitAcked(n int64) {
	q.r.t.Helper()
	for q.acked.Load() < n {
		select {
		case <-q.r.events:
		case <-q.done:
		case <-q.r.ctx.Done():
			q.r.t.Fatalf("waiting for %d acknowledgements: %v (%d acknowledged)", n, q.r.ctx.Err(), q.acked.Load())
		}
	}
}

// wait blocks until every message has been acknowledged, then stops the
// consumers.
func (q *queue) wait() {
	q.r.t.Helper()
	select {
	case <-q.done:
	case <-q.failed:
		q.stop()
		q.wg.Wait()
		q.r.logErrors()
		q.r.t.Fatalf("queue: unexpected consumer error: %v", q.failErr)
	case <-q.r.ctx.Done():
		q.stop()
		q.wg.Wait()
		q.r.logErrors()
		q.r.t.Fatalf("queue: %v with %d messages unacknowledged", q.r.ctx.Err(), q.left.Load())
	}
	q.stop()
	q.wg.Wait()
	q.timers.Wait()
}

// ---------------------------------------------------------------------------
// the broker side of the outbox

// recorder is the relays' publisher: it records every event id it is
// given, and signals every change (publish, mark, lease recovery) so that
// drain can wait without polling blindly.
type recorder struct {
	mu        sync.Mutex
	seen      map[uuid.UUID]int
	tags      map[string]int
	onPublish func(outbox.Message) // set before relays start; may be nil
	changed   chan struct{}
	recovered atomic.Int64
}

func newRecorder() *recorder {
	return &recorder{seen: map[uuid.UUID]int{}, tags: map[string]int{}, changed: make(chan struct{}, 1)}
}

func (p *recorder) Publish(_ context.Context, msgs []outbox.Message) []error {
	p.mu.Lock()
	for _, m := range msgs {
		p.seen[m.EventID]++
		p.tags[m.Tag]++
	}
	hook := p.onPublish
	p.mu.Unlock()
	if hook != nil {
		for _, m := range msgs {
			hook(m)
		}
	}
	p.signal()
	return nil
}

func (p *recorder) signal() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// BatchEnd signals after every batch's marks.
func (p *recorder) BatchEnd(context.Context, outbox.RelayEvent) { p.signal() }

// RecoverEnd counts the recovered leases.
func (p *recorder) RecoverEnd(_ context.Context, e outbox.RelayEvent) {
	p.recovered.Add(int64(e.Recovered))
	p.signal()
}

// observer is the outbox.Observer of p's hooks.
func (p *recorder) observer() outbox.Observer {
	return outbox.Observer{BatchEnd: p.BatchEnd, RecoverEnd: p.RecoverEnd}
}

func (p *recorder) count(id uuid.UUID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[id]
}

// startRelays runs n relays on pool with cfg (Store, Observer and Owner
// filled in, Publish when cfg has none: the rig's recorder). stop ends
// them and waits; it may be called twice.
func (r *rig) startRelays(pool *pgxpool.Pool, n int, cfg outbox.RelayConfig) (stop func()) {
	r.t.Helper()
	ctx, cancel := context.WithCancel(r.ctx)
	var wg sync.WaitGroup
	cfg.Store = r.svc.Outbox
	if cfg.Publish == nil {
		cfg.Publish = r.pub.Publish
	}
	cfg.Observer = r.pub.observer()
	cfg.BatchSize = cmpOr(cfg.BatchSize, 50)
	cfg.PollInterval = cmpOr(cfg.PollInterval, 10*time.Millisecond)
	cfg.MaxPollInterval = cmpOr(cfg.MaxPollInterval, 100*time.Millisecond)
	for i := range n {
		c := cfg
		c.Owner = "drill-relay-" + strconv.Itoa(i) + "-" + uuid.NewString()[:8]
		rl, err := outbox.NewRelay(pool, c)
		if err != nil {
			cancel()
			wg.Wait()
			r.t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = rl.Run(ctx) }()
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	r.t.Cleanup(stop)
	return stop
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// drain waits until no event is pending, being sent or waiting for a
// retry. Relays must be running.
func (r *rig) drain() {
	r.t.Helper()
	for {
		st, err := r.audit.Outbox.Stats(r.ctx, r.admin)
		if err != nil {
			r.t.Fatal(err)
		}
		if st.Pending+st.Sending+st.Retry == 0 {
			return
		}
		select {
		case <-r.pub.changed:
		case <-r.ctx.Done():
			r.t.Fatalf("outbox not drained: %v (%+v)", r.ctx.Err(), st)
		}
	}
}

// ---------------------------------------------------------------------------
// payments and the timeout canceller

// payer pays the orders of messages with Pay set when their ORDER_CREATED
// is published, retrying a failed callback until it is recorded.
type payer struct {
	r       *rig
	mu      sync.Mutex
	closed  bool
	seen    map[int64]bool
	ch      chan int64
	wg      sync.WaitGroup
	results map[int64]order.PaymentKind
	errs    atomic.Int64
}

func (r *rig) startPayers(n, capacity int) *payer {
	p := &payer{r: r, seen: map[int64]bool{}, ch: make(chan int64, capacity), results: map[int64]order.PaymentKind{}}
	r.pub.mu.Lock()
	r.pub.onPublish = func(m outbox.Message) {
		if m.Tag != flow.TagOrderCreated {
			return
		}
		var ev struct {
			OrderID int64 `json:"order_id"`
		}
		if err := json.Unmarshal(m.Payload, &ev); err != nil {
			r.t.Errorf("ORDER_CREATED payload %s: %v", m.Payload, err)
			return
		}
		r.mu.Lock()
		om := r.byOrder[ev.OrderID]
		r.mu.Unlock()
		if om == nil || !om.Pay {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.closed || p.seen[ev.OrderID] {
			return
		}
		p.seen[ev.OrderID] = true
		p.ch <- ev.OrderID
	}
	r.pub.mu.Unlock()
	for range n {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for id := range p.ch {
				pay := flow.Payment{OrderID: id, ProviderTradeNo: fmt.Sprintf("T%d", id), CallbackID: fmt.Sprintf("CB%d", id),
					Amount: r.svc.Item.UnitPrice, Currency: r.svc.Item.Currency}
				for attempt := 1; ; attempt++ {
					res, err := r.svc.Pay(r.ctx, pay)
					if err == nil {
						p.mu.Lock()
						if _, ok := p.results[id]; !ok { // the first recorded answer
							p.results[id] = res.Kind
						}
						p.mu.Unlock()
						break
					}
					if r.ctx.Err() != nil {
						return
					}
					p.errs.Add(1)
					t := time.NewTimer(backoff(attempt))
					select {
					case <-r.ctx.Done():
					case <-t.C:
					}
					t.Stop()
				}
			}
		}()
	}
	return p
}

// close stops accepting orders and waits for the payments in flight.
func (p *payer) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.ch)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// canceller runs timeout-cancel sweeps until stopped.
type canceller struct {
	stop      context.CancelFunc
	done      chan struct{}
	cancelled atomic.Int64
	errs      atomic.Int64
}

func (r *rig) startCanceller(workers, limit int, pace time.Duration) *canceller {
	ctx, cancel := context.WithCancel(r.ctx)
	c := &canceller{stop: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n, err := r.svc.CancelExpired(ctx, limit)
				c.cancelled.Add(int64(n))
				if err != nil && ctx.Err() == nil {
					c.errs.Add(1)
				}
				if n == 0 || err != nil {
					t := time.NewTimer(pace)
					select {
					case <-ctx.Done():
					case <-t.C:
					}
					t.Stop()
				}
			}
		}()
	}
	go func() { wg.Wait(); close(c.done) }()
	return c
}

// finish stops the sweeps, then sweeps until no expired order is left.
func (c *canceller) finish(r *rig) {
	r.t.Helper()
	c.stop()
	<-c.done
	for {
		n, err := r.svc.CancelExpired(r.ctx, 500)
		if err != nil {
			r.t.Fatalf("final cancel sweep: %v", err)
		}
		c.cancelled.Add(int64(n))
		if n == 0 {
			return
		}
	}
}

// ---------------------------------------------------------------------------
// assertions

func (r *rig) q(sql string) string {
	return fmt.Sprintf(sql, pgx.Identifier{r.svc.Schema}.Sanitize())
}

func (r *rig) count(sql string, args ...any) int64 {
	r.t.Helper()
	var n int64
	if err := r.admin.QueryRow(r.ctx, r.q(sql), args...).Scan(&n); err != nil {
		r.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// assertAudit runs the flow's audit and requires every check to pass.
func (r *rig) assertAudit() {
	r.t.Helper()
	checks, err := r.audit.Audit(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, c := range checks {
		status := "PASS"
		if !c.Pass {
			status = "FAIL"
			r.t.Errorf("audit FAIL [%s] %s: %s", c.Invariant, c.Name, c.Detail)
		}
		r.t.Logf("audit %s [%s] %s: %s", status, c.Invariant, c.Name, c.Detail)
	}
	if !flow.Passed(checks) {
		r.t.Errorf("audit failed")
	}
}

// assertAllPublished requires every event of the outbox to have reached
// the publisher at least once.
func (r *rig) assertAllPublished() {
	r.t.Helper()
	rows, err := r.admin.Query(r.ctx, r.q(`SELECT event_id FROM %s.event_outbox`))
	if err != nil {
		r.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		r.t.Fatal(err)
	}
	missing := 0
	for _, id := range ids {
		if r.pub.count(id) == 0 {
			missing++
		}
	}
	if missing > 0 || len(ids) == 0 {
		r.t.Errorf("%d of %d outbox events never published", missing, len(ids))
	}
	r.pub.mu.Lock()
	r.t.Logf("published: %d distinct events of %d, by tag %v", len(r.pub.seen), len(ids), r.pub.tags)
	r.pub.mu.Unlock()
}

type inboxRow struct {
	code    string
	orderID int64
}

type orderRow struct {
	msgID, resID uuid.UUID
	user         int64
	status       order.Status
}

// assertExactlyOnce checks that every message of msgs was processed
// exactly once in the database, consistently with the orders table, the
// ledger and what the consumers were told.
func (r *rig) assertExactlyOnce(msgs []*msg) {
	r.t.Helper()
	inb := map[uuid.UUID]inboxRow{}
	rows, err := r.admin.Query(r.ctx, r.q(`SELECT message_id, status, coalesce(result_code, ''), coalesce((result_payload->>'order_id')::bigint, 0)
		FROM %s.consumer_inbox WHERE consumer_group = $1`), flow.ConsumerGroup)
	if err != nil {
		r.t.Fatal(err)
	}
	for rows.Next() {
		var id uuid.UUID
		var st int16
		var ir inboxRow
		if err := rows.Scan(&id, &st, &ir.code, &ir.orderID); err != nil {
			r.t.Fatal(err)
		}
		if _, dup := inb[id]; dup {
			r.t.Errorf("message %s has two inbox rows", id)
		}
		if st != 20 {
			r.t.Errorf("message %s inbox status %d, want 20 (processed)", id, st)
		}
		inb[id] = ir
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	ords := map[int64]orderRow{}
	rows, err = r.admin.Query(r.ctx, r.q(`SELECT order_id, source_message_id, reservation_id, user_id, status FROM %s.orders`))
	if err != nil {
		r.t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var o orderRow
		var st int16
		if err := rows.Scan(&id, &o.msgID, &o.resID, &o.user, &st); err != nil {
			r.t.Fatal(err)
		}
		o.status = order.Status(st)
		ords[id] = o
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}

	ids := map[uuid.UUID]bool{}
	codes := map[string]int{}
	created := 0
	bad := 0
	fail := func(format string, args ...any) {
		bad++
		if bad <= 10 {
			r.t.Errorf(format, args...)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		ids[m.ID] = true
		row, ok := inb[m.ID]
		if !ok {
			fail("message %s (order %d) has no inbox row", m.ID, m.M.OrderID)
			continue
		}
		codes[row.code]++
		mine, hasMine := ords[m.M.OrderID]
		switch row.code {
		case flow.CodeOrderCreated:
			created++
			if row.orderID != m.M.OrderID || !hasMine || mine.msgID != m.ID || mine.resID != m.M.ReservationID {
				fail("message %s: inbox says %s order %d, orders has %+v (present %v)", m.ID, row.code, row.orderID, mine, hasMine)
			}
		case flow.CodeOrderAlready:
			o, ok := ords[row.orderID]
			if !ok || o.resID != m.M.ReservationID {
				fail("message %s: inbox says %s order %d, orders has %+v (present %v)", m.ID, row.code, row.orderID, o, ok)
			}
		case flow.CodeUserAlreadyOrdered:
			o, ok := ords[row.orderID]
			if hasMine || !ok || o.user != m.M.UserID {
				fail("message %s: inbox says %s (order %d), orders has %+v (present %v), own order present %v", m.ID, row.code, row.orderID, o, ok, hasMine)
			}
		case flow.CodeSoldOut:
			if hasMine {
				fail("message %s: inbox says %s, but order %d exists", m.ID, row.code, m.M.OrderID)
			}
		default:
			fail("message %s: unexpected result %q", m.ID, row.code)
		}
		acks := r.acks[m.ID]
		if len(acks) == 0 {
			fail("message %s was never acknowledged", m.ID)
		}
		for _, a := range acks {
			if !a.Duplicate && (a.Code != row.code || a.OrderID != row.orderID) {
				fail("message %s: consumer was told %s/%d, the inbox holds %s/%d", m.ID, a.Code, a.OrderID, row.code, row.orderID)
			}
		}
	}
	for id := range inb {
		if !ids[id] {
			fail("inbox row for unknown message %s", id)
		}
	}
	if created != len(ords) {
		fail("%d orders, but %d messages say ORDER_CREATED", len(ords), created)
	}
	allocs := r.count(`SELECT count(*) FROM %s.inventory_ledger WHERE idempotency_key LIKE 'ALLOCATE:%%'`)
	allocOrders := r.count(`SELECT count(DISTINCT order_id) FROM %s.inventory_ledger WHERE idempotency_key LIKE 'ALLOCATE:%%'`)
	if allocs != int64(len(ords)) || allocOrders != allocs {
		fail("%d ALLOCATE ledger rows for %d distinct orders, want one per order (%d)", allocs, allocOrders, len(ords))
	}
	live := r.count(`SELECT count(*) FROM %s.orders WHERE status IN (10, 20, 30, 60)`)
	allocated := r.count(`SELECT coalesce(sum(allocated_stock), 0) FROM %s.sku_inventory`)
	if allocated != live {
		fail("allocated stock %d, live orders %d", allocated, live)
	}
	r.t.Logf("exactly once: %d messages, %d inbox rows, %d orders (%d live), results %v", len(ids), len(inb), len(ords), live, codes)
}

// ---------------------------------------------------------------------------
// pools

// proxiedPool returns a pool of maxConns connections to the server at url
// whose every connection runs through a fault proxy of its own.
func proxiedPool(t *testing.T, url string, maxConns int32) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	px, err := faultproxy.Start(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(px.Port())
	cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = nil, nil
	cfg.MaxConns = maxConns
	pool := newPoolFromConfig(t, cfg)
	return pool, px
}

// newPool returns a pool of maxConns connections to url, closed at the end
// of the test.
func newPool(t *testing.T, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	return newPoolFromConfig(t, cfg)
}

func newPoolFromConfig(t *testing.T, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// placeWith is the flow's PlaceOrder with other transaction options, and
// onConn called with each attempt's server process id.
func (r *rig) placeWith(ctx context.Context, opts pgtx.Options, m *msg, onConn func(pid uint32)) (flow.Outcome, error) {
	return r.placeOn(ctx, r.svc.Pool, opts, m, onConn)
}

// placeOn is placeWith on db.
func (r *rig) placeOn(ctx context.Context, db pgtx.TxBeginner, opts pgtx.Options, m *msg, onConn func(pid uint32)) (flow.Outcome, error) {
	var out flow.Outcome
	hash := inbox.HashPayload(m.Body)
	err := pgtx.RunInTx(ctx, db, opts, func(tx pgx.Tx) error {
		if onConn != nil {
			onConn(tx.Conn().PgConn().PID())
		}
		var err error
		out, err = r.svc.PlaceOrderTx(ctx, tx, m.ID, hash, m.M)
		return err
	})
	if errors.Is(err, flow.ErrDuplicate) {
		return flow.Outcome{Duplicate: true}, nil
	}
	return out, err
}

// placeWithTx is the flow's PlaceOrderTx in a transaction with the flow's
// options (DeferBegin, so its batch is on the server; a 2s lock timeout),
// and inTx called
// with the outcome inside the transaction, before COMMIT.
func (r *rig) placeWithTx(ctx context.Context, m *msg, inTx func(flow.Outcome)) (flow.Outcome, error) {
	var out flow.Outcome
	hash := inbox.HashPayload(m.Body)
	err := pgtx.RunInTx(ctx, r.svc.Pool, pgtx.Options{DeferBegin: true, LockTimeout: 2 * time.Second, Name: "place_order_held"}, func(tx pgx.Tx) error {
		var err error
		if out, err = r.svc.PlaceOrderTx(ctx, tx, m.ID, hash, m.M); err != nil {
			return err
		}
		inTx(out)
		return nil
	})
	if errors.Is(err, flow.ErrDuplicate) {
		return flow.Outcome{Duplicate: true}, nil
	}
	return out, err
}
