package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckillkit/seckill/examples/internal/orderid"
	"github.com/seckillkit/seckill/examples/otelseckill"
	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/frontdoor"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

// orderTxName names the order transaction in the observers' events.
const orderTxName = "place_order"

// counters are the program's figures for the report and /stats.
type counters struct {
	clicks, frontAccepted, frontSoldOut, frontAlready, busy, frontDown      atomic.Int64
	created, already, userAlready, soldOut, duplicates, poison, unknownCmts atomic.Int64
	txErrors, retries                                                       atomic.Int64
	paid, dupCallbacks, paidAfterCancel, cancelled                          atomic.Int64
	releases, releasesAlready, releasesUnknown, refunds, eventDuplicates    atomic.Int64
	releaseFailures, releasesManual                                         atomic.Int64
	rebuilds, publishUnknown                                                atomic.Int64
	shed                                                                    atomic.Int64 // clicks refused at once while shedding
	// eventBatches: event batches of more than one committed in one
	// transaction, eventsBatched the events in them; eventBatchesSplit:
	// batches that failed and were handled one by one.
	eventBatches, eventsBatched, eventBatchesSplit atomic.Int64
	// deadlocks: attempts of the service's transactions that PostgreSQL
	// ended as deadlocked (pgtx retries them).
	deadlocks    atomic.Int64
	published    sync.Map // tag → *atomic.Int64
	publishedIDs sync.Map // event id → struct{}
}

func (c *counters) addPublished(tag string) {
	v, _ := c.published.LoadOrStore(tag, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (c *counters) publishedTag(tag string) int64 {
	if v, ok := c.published.Load(tag); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// service is the flow plus the rest of a deployment around it: the front
// door, the broker, the counters. With the real stack those are Redis and
// NATS JetStream; with -stack memory, in-process stand-ins.
type service struct {
	*flow.Service
	log *slog.Logger

	front  frontdoor.Door
	q      broker.Broker
	rfront *frontdoor.Redis  // the real stack's front door; nil with -stack memory
	js     *broker.JetStream // the real stack's broker; nil with -stack memory
	rdb    redis.UniversalClient
	ids    orderid.Generator

	orderTTL       time.Duration
	reservationTTL time.Duration
	relayInTx      bool // relays publish inside the claiming transaction (outbox.RelayConfig.InTx)
	stepByStep     bool // the consumer runs PlaceOrderStepByStep
	eventTwoStep   bool // event consumers claim, then Complete, even when the result is known up front
	eventBatch     int  // most events an event consumer claims in one transaction (≤ 1: one)
	// shedFor: how long POST /orders refuses clicks at once after the full
	// queue refused a publish (0: never); shedUntil: until when (Unix ns).
	shedFor   time.Duration
	shedUntil atomic.Int64
	// releaseFailures: failed front-door releases after which a
	// reservation is MANUAL_REQUIRED.
	releaseFailures int

	// onOrderCreated, when set, sees the order id of every ORDER_CREATED
	// event (at least once each): the buyer learns of the order and pays.
	onOrderCreated func(orderID int64)

	stats counters
	tel   *telemetry    // OpenTelemetry: the kit's observers, GET /metrics, the traces
	txObs pgtx.Observer // every transaction of the service
	lat   latencies     // the consumer's order transaction
	e2e   latencies     // click (front-door reservation) → order committed, visible to GET /orders

	inFlight   atomic.Int64 // clicks between Reserve and Publish
	rebuilding atomic.Bool
	rebuildWG  sync.WaitGroup
	life       context.Context // ends at close: the rebuilds give up
	endLife    context.CancelFunc
	closeOnce  sync.Once
	unknownPub sync.Map // reservation id → struct{}: order message whose publish had no definite answer

	// recent is where ReconcileRecent's next newest window starts, and
	// how long before the database's clock its windows end (recentLag).
	recent struct {
		mu   sync.Mutex
		from time.Time
		lag  time.Duration
	}
}

// newService migrates and provisions the sale and builds its front door
// and broker: the real ones when cfg.Stack is "real" (cfg.RedisURL and
// cfg.NATSURL must name running servers), else the in-memory stand-ins.
func newService(ctx context.Context, pool *pgxpool.Pool, cfg config, log *slog.Logger) (_ *service, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler) // nil means discard, as everywhere
	}
	log = withTraceIDs(log) // records of a traced context carry trace_id and span_id
	if cfg.ReleaseFailures == 0 {
		cfg.ReleaseFailures = flow.DefaultMaxReleaseFailures
	}
	if cfg.ReleaseFailures < 1 || cfg.ReleaseFailures > 1000 {
		return nil, fmt.Errorf("release failures %d: must be between 1 and 1000", cfg.ReleaseFailures)
	}
	s := &service{log: log, orderTTL: cfg.OrderTTL, reservationTTL: 15 * time.Minute, releaseFailures: cfg.ReleaseFailures,
		relayInTx: cfg.RelayInTx, stepByStep: cfg.StepByStep, eventTwoStep: cfg.EventTwoStep, eventBatch: cfg.EventBatch, shedFor: cfg.ShedFor}
	s.life, s.endLife = context.WithCancel(context.WithoutCancel(ctx))
	s.recent.lag = recentLag
	item := cfg.item()
	fs, err := s.instrument(ctx, pool, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.tel.close()
		}
	}()
	if _, err := pool.Exec(ctx, fmt.Sprintf(poisonDDL, pgx.Identifier{cfg.Schema, "poison_message"}.Sanitize())); err != nil {
		return nil, fmt.Errorf("create the poison message table: %w", err)
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(cursorDDL, pgx.Identifier{cfg.Schema, "reconcile_cursor"}.Sanitize())); err != nil {
		return nil, fmt.Errorf("create the reconciliation cursor table: %w", err)
	}
	if err := s.loadRecentCursor(ctx); err != nil {
		return nil, err
	}
	nextOrder := func() int64 { return s.ids.Next() }
	qcfg := broker.MemoryConfig{Depth: cfg.QueueDepth, DupRate: cfg.DupRate, Visibility: 10 * time.Second, Redelay: 50 * time.Millisecond}
	if cfg.Stack != stackReal {
		st, err := fs.Inventory.Stock(ctx, pool, item.ActivityID, item.SKUID)
		if err != nil {
			return nil, err
		}
		buckets := st.Buckets
		stock := make([]int32, len(buckets))
		for i, b := range buckets {
			stock[i] = b.Available
		}
		s.front = frontdoor.NewMemory(stock, nextOrder)
		s.q = broker.NewMemory(qcfg)
		return s, nil
	}

	if s.rdb, err = newRedisClient(cfg.RedisURL); err != nil {
		return nil, err
	}
	s.rfront = frontdoor.NewRedis(s.rdb, "seckill:"+cfg.Schema, item, nextOrder)
	s.front = s.rfront
	if err := s.warmUp(ctx); err != nil {
		s.rdb.Close()
		return nil, fmt.Errorf("front door warm-up: %w", err)
	}
	jcfg := cfg.JetStream
	jcfg.Depth, jcfg.DupRate = cfg.QueueDepth, cfg.DupRate
	s.js, err = broker.NewJetStream(ctx, cfg.NATSURL, cfg.Schema, jcfg, log)
	if err != nil {
		s.rdb.Close()
		return nil, err
	}
	s.js.OnPoison = s.recordPoison
	s.q = s.js
	if err := s.guardInboxRetention(ctx, cfg.Citus); err != nil {
		s.js.Close()
		s.rdb.Close()
		return nil, err
	}
	return s, nil
}

// instrument builds s's telemetry and, with its observers, the flow
// (which migrates and provisions the sale), then registers the figures
// read at every scrape: the service's own, the vacuum signals, and
// otelseckill's pool and PostgreSQL statistics.
func (s *service) instrument(ctx context.Context, pool *pgxpool.Pool, cfg config) (_ *flow.Service, err error) {
	system := ""
	if cfg.Stack == stackReal {
		system = "nats"
	}
	if s.tel, err = newTelemetry(system); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.tel.close()
		}
	}()
	s.txObs = s.tel.txObserver(&s.stats)
	fs, err := flow.New(ctx, pool, flow.Config{Schema: cfg.Schema, Item: cfg.item(), Logger: s.log, Citus: cfg.Citus,
		TxOptions:  pgtx.Options{Name: orderTxName},
		TxObserver: s.txObs, InventoryObserver: s.tel.obs.Inventory,
		EventHeaders: s.tel.eventHeaders, // the trace continues in the events' headers
	})
	if err != nil {
		return nil, err
	}
	s.Service = fs
	reg, err := otelseckill.RegisterPostgresMetrics(s.tel.meters.Meter(otelseckill.ScopeName), pool, cfg.Schema)
	if err != nil {
		return nil, err
	}
	s.tel.regs = append(s.tel.regs, reg)
	if err := errors.Join(s.registerFigures(s.tel), s.registerVacuumFigures(s.tel)); err != nil {
		return nil, err
	}
	return fs, nil
}

// newRedisClient connects to one Redis, or to a Redis Cluster when the URL
// names more nodes with addr= (redis://host1:port1?addr=host2:port2&…).
func newRedisClient(url string) (redis.UniversalClient, error) {
	if strings.Contains(url, "addr=") {
		opts, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis cluster URL: %w", err)
		}
		opts.MaxRetries = 1
		opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = time.Second, 2*time.Second, 2*time.Second
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis URL: %w", err)
	}
	opts.MaxRetries = 1
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = time.Second, 2*time.Second, 2*time.Second
	return redis.NewClient(opts), nil
}

// poisonDDL keeps the messages that will never be processed, for review:
// nothing is dropped silently.
const poisonDDL = `CREATE TABLE IF NOT EXISTS %s (
	stream      TEXT        NOT NULL,
	message_id  UUID        NOT NULL,
	deliveries  BIGINT      NOT NULL,
	error       TEXT        NOT NULL,
	body        BYTEA       NOT NULL,
	recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(),
	PRIMARY KEY (stream, message_id))`

// recordPoison stores a message that will never be processed. Recording
// the same message again changes nothing.
func (s *service) recordPoison(ctx context.Context, stream string, m broker.Message, deliveries uint64, cause error) error {
	s.log.Error("poison message recorded for review", "stream", stream, "message_id", m.ID, "deliveries", deliveries, "error", cause)
	_, err := s.Pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{s.Schema, "poison_message"}.Sanitize()+
		` (stream, message_id, deliveries, error, body) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`,
		stream, m.ID, int64(deliveries), fmt.Sprint(cause), m.Body)
	return err
}

// warmUp fills the front door from PostgreSQL before the sale opens.
// Whatever the keys held before (a previous run on the same schema) is
// replaced: PostgreSQL is the truth, and nothing is in flight yet.
func (s *service) warmUp(ctx context.Context) error {
	img, err := frontdoor.LoadImage(ctx, s.Service)
	if err != nil {
		return err
	}
	return s.rfront.Rebuild(ctx, img, time.Now().Add(-time.Second))
}

// recoverFrontDoor starts, once at a time, the recovery of a Redis front
// door that answered frontdoor.ErrDown (frontdoor.Redis.Recover): wait
// until Redis answers; if it lost its keys, or a failover put another
// server in charge of them, let the clicks in flight and the order
// messages already queued finish (so PostgreSQL knows every reservation
// made before the loss), then copy PostgreSQL's counters and reservations
// into Redis (staged, then switched in one MULTI). Clicks meanwhile are answered frontdoor.ErrDown.
func (s *service) recoverFrontDoor() {
	if s.rfront == nil || !s.rebuilding.CompareAndSwap(false, true) {
		return
	}
	s.rebuildWG.Add(1)
	go func() {
		defer s.rebuildWG.Done()
		defer s.rebuilding.Store(false)
		quiesce := func(ctx context.Context) error {
			for s.inFlight.Load() > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(50 * time.Millisecond):
				}
			}
			return s.q.WaitIdle(ctx)
		}
		load := func(ctx context.Context) (frontdoor.Image, error) { return frontdoor.LoadImage(ctx, s.Service) }
		if rebuilt, _ := s.rfront.Recover(s.life, quiesce, load, s.log); rebuilt {
			s.stats.rebuilds.Add(1)
		}
	}()
}

// close ends what newService started (after the background work stopped);
// calling it again is a no-op.
func (s *service) close() {
	s.closeOnce.Do(s.closeNow)
}

func (s *service) closeNow() {
	s.endLife()
	s.rebuildWG.Wait()
	s.q.Close()
	if s.rdb != nil {
		s.rdb.Close()
	}
	s.tel.close()
}

// click is one buyer pressing "buy": the front door reserves or refuses,
// and a reservation becomes an order message. It is what POST /orders does.
func (s *service) click(ctx context.Context, user int64) (frontdoor.Reservation, error) {
	if !trace.SpanContextFromContext(ctx).IsValid() { // a click that did not come over HTTP starts its trace here
		var span trace.Span
		ctx, span = s.tel.start(ctx, "click", trace.SpanKindInternal)
		defer span.End()
	}
	s.stats.clicks.Add(1)
	// In flight before the check: a front-door recovery that starts after
	// the check waits for this click, whose reservation then reaches
	// PostgreSQL before the recovery reads its image.
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	if s.rebuilding.Load() {
		s.stats.frontDown.Add(1)
		return frontdoor.Reservation{}, frontdoor.ErrDown
	}
	r, err := s.front.Reserve(ctx, user)
	switch {
	case errors.Is(err, frontdoor.ErrSoldOut):
		s.stats.frontSoldOut.Add(1)
		return r, err
	case errors.Is(err, frontdoor.ErrAlreadyBought):
		s.stats.frontAlready.Add(1)
		return r, err
	case errors.Is(err, frontdoor.ErrSaleClosed):
		return r, err
	case errors.Is(err, frontdoor.ErrDown):
		s.stats.frontDown.Add(1)
		s.recoverFrontDoor()
		return r, err
	case err != nil:
		return r, err
	}
	if err := s.publish(ctx, r, uuid.Must(uuid.NewV7())); err != nil {
		if !errors.Is(err, broker.ErrBusy) {
			// No definite answer from the broker: the message may be in
			// the stream. The reservation stays held; the reconciliation
			// names it if no order follows.
			s.stats.publishUnknown.Add(1)
			s.unknownPub.Store(r.ReservationID, struct{}{})
			return r, err
		}
		// Refused: nothing queued, give the unit back and let the buyer
		// try again. For shedFor, POST /orders refuses at once (Shed).
		if s.shedFor > 0 {
			s.shedUntil.Store(time.Now().Add(s.shedFor).UnixNano())
		}
		if _, rerr := s.front.Release(ctx, r.ReservationID, r.UserID); rerr != nil {
			s.log.Warn("release after a refused publish failed", "reservation_id", r.ReservationID, "error", rerr)
		}
		s.stats.busy.Add(1)
		return r, err
	}
	s.stats.frontAccepted.Add(1)
	return r, nil
}

// Shed reports whether the full queue refused a publish less than
// shedFor ago, and counts the click it is asked for: POST /orders then
// refuses it at once, busy, before the guard's records and the front
// door, so that under a spike a refusal costs the request and no more.
// Nothing is reserved or queued for a refused click; the buyer tries again.
func (s *service) Shed() bool {
	if s.shedFor <= 0 || time.Now().UnixNano() >= s.shedUntil.Load() {
		return false
	}
	s.stats.shed.Add(1)
	return true
}

// publish sends the order message for r with the given message id.
func (s *service) publish(ctx context.Context, r frontdoor.Reservation, messageID uuid.UUID) error {
	body, err := json.Marshal(flow.OrderMessage{
		RequestID: r.RequestID, ReservationID: r.ReservationID, OrderID: r.OrderID,
		ActivityID: s.Item.ActivityID, SKUID: s.Item.SKUID, UserID: r.UserID, Bucket: r.Bucket,
		UnitPrice: s.Item.UnitPrice, Currency: s.Item.Currency, SKUTitle: s.Item.Title,
		ReservedAt: r.ReservedAt, ReservationTo: r.ReservedAt.Add(s.reservationTTL),
		OrderExpireAt: r.ReservedAt.Add(s.orderTTL),
	})
	if err != nil {
		return err
	}
	hdr := nats.Header{}
	s.tel.prop.Inject(ctx, broker.HeaderCarrier(hdr)) // the trace continues in the message's headers
	return s.q.Publish(ctx, broker.Message{ID: messageID, Body: body, Header: hdr})
}

// consume handles one delivery: nil acknowledges it, an error leaves it
// unacknowledged, to be delivered again.
func (s *service) consume(ctx context.Context, m broker.Message) error {
	ctx = s.tel.extract(ctx, broker.HeaderCarrier(m.Header))
	ctx, span := s.tel.start(ctx, "orders process", trace.SpanKindConsumer)
	defer span.End()
	start := time.Now()
	place := s.PlaceOrder
	if s.stepByStep {
		place = s.PlaceOrderStepByStep
	}
	ctx, rec := withTxRecord(ctx)
	out, err := place(ctx, m.ID, m.Body)
	if err == nil {
		s.tel.obs.RecordInboxClaim(ctx, flow.ConsumerGroup, !out.Duplicate)
	}
	s.logOrderTx(ctx, m, rec, out, err) // one record per order transaction
	switch {
	case errors.Is(err, flow.ErrPoison):
		if perr := s.recordPoison(ctx, "orders", m, 0, err); perr != nil {
			return perr // not recorded: not acknowledged either
		}
		s.stats.poison.Add(1)
		return nil
	case err != nil:
		// Includes ErrCommitOutcomeUnknown: never retried here; the
		// redelivery finds the answer through the inbox and unique keys.
		s.stats.txErrors.Add(1)
		return err
	case out.Duplicate:
		s.stats.duplicates.Add(1)
		return nil
	}
	s.lat.add(time.Since(start))
	switch out.Code {
	case flow.CodeOrderCreated:
		s.stats.created.Add(1)
		var om struct {
			ReservedAt time.Time `json:"reserved_at"`
		}
		if json.Unmarshal(m.Body, &om) == nil && !om.ReservedAt.IsZero() {
			s.e2e.add(time.Since(om.ReservedAt))
		}
	case flow.CodeOrderAlready, flow.CodeReservationRejected:
		s.stats.already.Add(1) // the same reservation under a new message id
	case flow.CodeUserAlreadyOrdered:
		s.stats.userAlready.Add(1)
	case flow.CodeSoldOut:
		s.stats.soldOut.Add(1)
	}
	return nil
}

// pay records a payment callback and counts what it came to.
func (s *service) pay(ctx context.Context, p flow.Payment) (order.PaymentResult, error) {
	res, err := s.Pay(ctx, p)
	if err != nil {
		return res, err
	}
	switch res.Kind {
	case order.PaymentPaid:
		s.stats.paid.Add(1)
	case order.PaymentDuplicate:
		s.stats.dupCallbacks.Add(1)
	case order.PaymentAfterCancel, order.PaymentOnPaidOrder:
		s.stats.paidAfterCancel.Add(1)
	}
	return res, nil
}

// cancelExpired runs one sweep of the timeout canceller and counts it.
func (s *service) cancelExpired(ctx context.Context, limit int) (int, error) {
	n, err := s.CancelExpired(ctx, limit)
	s.stats.cancelled.Add(int64(n))
	return n, err
}
