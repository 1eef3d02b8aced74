// Package flow is the seckill order flow of the example service, built
// from the kit's packages: the consumer transaction with every
// branch, payments, the timeout canceller and the audit of every invariant.
// The example program (examples/seckill) and the benchmark program
// (examples/bench) run exactly this code.
//
// It is example code, written to be read and copied: a service of your own
// would put its own names, events and front door around the same calls.
// Read it in this order: Service.PlaceOrderTx, the reference consumer
// transaction with one helper call per step (the one to copy); then
// Service.PlaceOrder, which sends a fresh message's order as one batch and
// falls back to PlaceOrderTx for everything else; then New, the service's
// wiring; then the payments, the timeout canceller, the audit and the
// reconciliation.
package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// maxBuckets is the most buckets inventory splits a SKU into (bucket
// numbers 0..255).
const maxBuckets = 256

// Names the flow uses on the wire and in the database.
const (
	ConsumerGroup = "order-create-consumer" // the inbox consumer group
	OrderTopic    = "SECKILL_ORDER"         // the queue topic of order messages
	OrderTag      = "ORDER_CREATE"          // their tag
	EventTopic    = "ORDER_EVENT"           // the topic of the outbox events

	// Outbox event tags.
	TagOrderCreated     = "ORDER_CREATED"
	TagOrderPaid        = "ORDER_PAID"
	TagFrontDoorRelease = "FRONTDOOR_RELEASE" // compensation: give the front-door reservation back
	TagRefundRequested  = "REFUND_REQUESTED"
	TagSaleStatus       = "SALE_STATUS_CHANGED" // the front door opens, pauses or closes its gate

	// Result codes the consumer stores in the inbox.
	CodeOrderCreated       = "ORDER_CREATED"
	CodeOrderAlready       = "ORDER_ALREADY_CREATED"
	CodeUserAlreadyOrdered = "USER_ALREADY_ORDERED"
	CodeSoldOut            = "POSTGRES_SOLD_OUT"
	CodeNotOnSale          = "NOT_ON_SALE" // paused, ended, or outside the sale window
	// CodeReservationRejected answers a message whose reservation an
	// earlier message already rejected; Outcome.Reason has that rejection's
	// code.
	CodeReservationRejected = "RESERVATION_REJECTED"

	savepoint = "place_order"
)

// DefaultBucketConcurrency is the default of Config.BucketConcurrency.
const DefaultBucketConcurrency = 4

// OrderMessage is the body of the queue message the front door sends for
// one reservation: every id the order transaction needs, fixed once by
// the front door so a redelivery carries the same ones.
type OrderMessage struct {
	RequestID     uuid.UUID `json:"request_id"`
	ReservationID uuid.UUID `json:"reservation_id"`
	OrderID       int64     `json:"order_id"`
	ActivityID    int64     `json:"activity_id"`
	SKUID         int64     `json:"sku_id"`
	UserID        int64     `json:"user_id"`
	Bucket        int16     `json:"bucket"`
	UnitPrice     int64     `json:"unit_price"`
	Currency      string    `json:"currency"`
	SKUTitle      string    `json:"sku_title"`
	ReservedAt    time.Time `json:"reserved_at"`
	ReservationTo time.Time `json:"reservation_expires_at"`
	OrderExpireAt time.Time `json:"order_expire_at"`
}

// Outcome is what one delivery came to: the inbox result code and the
// order it concerns.
type Outcome struct {
	Code      string `json:"code"`
	OrderID   int64  `json:"order_id,omitempty"`
	Reason    string `json:"reason,omitempty"` // with CodeReservationRejected: the rejection's code
	Duplicate bool   `json:"-"`                // answered from the inbox: processed before, nothing written
}

// ErrDuplicate ends a transaction that found its message already
// processed: nothing to write, roll back, answer from the inbox.
// PlaceOrder turns it into the stored Outcome with Duplicate set.
var ErrDuplicate = errors.New("flow: duplicate delivery")

// duplicateError is ErrDuplicate with the inbox row the claim found (nil:
// storedOutcome reads it again).
type duplicateError struct{ rec *inbox.Record }

func (e *duplicateError) Error() string        { return ErrDuplicate.Error() }
func (e *duplicateError) Is(target error) bool { return target == ErrDuplicate }

// ErrPoison is matched by the error PlaceOrder returns for a message that
// can never be processed (undecodable, invalid, for a SKU or bucket that is not
// provisioned, or contradicting what is stored): acknowledge it and alert,
// never redeliver it.
var ErrPoison = errors.New("flow: poison message")

type poisonError struct{ err error }

func (e *poisonError) Error() string        { return "flow: poison message: " + e.err.Error() }
func (e *poisonError) Unwrap() error        { return e.err }
func (e *poisonError) Is(target error) bool { return target == ErrPoison }

// SKU is the one item on sale.
type SKU struct {
	ActivityID int64
	SKUID      int64
	Title      string
	UnitPrice  int64 // minor units
	Currency   string
	Stock      int32
	Buckets    int16
	// Tokens provisions the stock as inventory tokens (inventory.SKU's
	// Tokens; Buckets must be 1): no hot row, so the per-bucket bound of
	// Config.BucketConcurrency does not apply.
	Tokens bool
}

// Config configures a Service.
type Config struct {
	// Schema holds every table. Defaults to "seckill".
	Schema string
	// Item is the SKU on sale; Provision runs for it in New.
	Item SKU
	// TxOptions run the flow's transactions: the fresh order's batch
	// (pgtx.RunBatch) and every RunInTx transaction. Defaults to Read
	// Committed with a 2s lock timeout, and DeferBegin unless EagerBegin
	// is set.
	TxOptions pgtx.Options
	// TxObserver observes every transaction the flow runs (the order
	// transaction, named by TxOptions.Name, unless TxOptions.Observer has
	// a hook set; "payment", "cancel_expired", "expire_reservations").
	// Defaults to none.
	TxObserver pgtx.Observer
	// InventoryObserver observes the inventory store's allocations and
	// releases (inventory.Config.Observer). Defaults to none.
	InventoryObserver inventory.Observer
	// EagerBegin sends BEGIN in a round trip of its own in the flow's
	// RunInTx transactions (PlaceOrderTx, payments, cancels). By default
	// the flow sets TxOptions.DeferBegin: BEGIN travels with the first
	// statement. The fresh order's batch always carries BEGIN (one round
	// trip in all), whatever EagerBegin says.
	EagerBegin bool
	// Logger defaults to discarding.
	Logger *slog.Logger
	// EventHeaders, when set, gives the headers of the outbox events the
	// flow writes for a delivery or a payment, from the ctx of the call
	// (the example service puts the W3C traceparent of the request that
	// caused the event there, so the trace continues at the event's
	// consumers). Defaults to none.
	EventHeaders func(ctx context.Context) map[string]string
	// Notify makes the flow's outbox writes NOTIFY listening relays.
	// Defaults to false: relays poll. PostgreSQL serialises the commits of
	// all transactions that sent a NOTIFY on one database-wide lock, held
	// across the commit's WAL flush, so at most one notifying order
	// transaction commits per disk flush (examples/bench measured the order
	// transactions waiting on it 70% of the time, and a third of the
	// throughput without it). Relays that keep polling every few tens of
	// milliseconds deliver within that interval instead.
	Notify bool
	// Citus is set when the database is a Citus coordinator and Schema a
	// distributed schema (schema-based sharding): it sets the Citus option
	// of every store (inbox.Config.Citus, outbox.Config.Citus,
	// inventory.Config.Citus, order.Config.Citus), so that every
	// transaction of the flow, the step-by-step PlaceOrderTx included,
	// stays on the one node that holds the schema and commits with one
	// phase. Leave Notify off there:
	// relays poll.
	Citus bool
	// BucketConcurrency bounds the order transactions of this Service that
	// run at once for one bucket. Defaults to 4; negative means no bound.
	// All transactions of a bucket queue on its row lock anyway (the
	// decrement is their last statement); past a few, more waiters only
	// cost: each holds a connection and a backend that PostgreSQL's lock
	// manager wakes and re-queues at every commit. They wait here instead,
	// in a channel, at no cost to the database (examples/bench: 1 bucket,
	// 32 consumers). A token SKU (SKU.Tokens) has no hot row and no bound.
	BucketConcurrency int
}

// Service holds the kit's stores for one schema and runs the flow's
// transactions on Pool.
type Service struct {
	Pool      *pgxpool.Pool
	Schema    string
	Item      SKU
	Inbox     *inbox.Store
	Outbox    *outbox.Store
	Inventory *inventory.Store
	Orders    *order.Store

	txOpts  pgtx.Options
	log     *slog.Logger
	gates   []chan struct{} // per bucket; nil: no bound
	headers func(context.Context) map[string]string
	txObs   pgtx.Observer

	// horizon is PurgeHistory's newest olderThan in Unix nanoseconds (0:
	// never purged), shared by copies of the Service that differ only in
	// Pool.
	horizon *atomic.Int64
	// live is where the next live audit starts (see liveWindow), shared
	// by copies of the Service; nil (a Service not made by New): every
	// live audit reads the whole history.
	live *liveWindow
}

// PurgeHistory is the sale's retention: it deletes the inbox rows
// processed and the outbox events sent before olderThan (at most batchSize
// rows per statement) and returns how many rows went.
// It records olderThan as the history horizon: from then on the audit's
// event-completeness checks (invariant 7) look only at state changes made at
// or after it, since the events of older ones may have been purged. Purge
// through this method, not the packages' Purge functions, or the audit
// reports the purged events as lost.
func (s *Service) PurgeHistory(ctx context.Context, olderThan time.Time, batchSize int) (int64, error) {
	if s.horizon == nil {
		return 0, errors.New("flow: purge history: the Service was not made by New")
	}
	if olderThan.IsZero() || batchSize <= 0 {
		return 0, fmt.Errorf("flow: purge history: olderThan must be set and batchSize positive (got %v, %d)", olderThan, batchSize)
	}
	for {
		old := s.horizon.Load()
		if olderThan.UnixNano() <= old || s.horizon.CompareAndSwap(old, olderThan.UnixNano()) {
			break
		}
	}
	n, err := s.Inbox.Purge(ctx, s.Pool, olderThan, batchSize)
	if err != nil {
		return n, err
	}
	m, err := s.Outbox.PurgeSent(ctx, s.Pool, olderThan, batchSize)
	return n + m, err
}

// purgedBefore returns the history horizon PurgeHistory recorded (zero when
// nothing was purged).
func (s *Service) purgedBefore() time.Time {
	if s.horizon == nil {
		return time.Time{}
	}
	if ns := s.horizon.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// New migrates the schema (all four packages), provisions the item's
// stock and returns the service.
func New(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Service, error) {
	if cfg.Schema == "" {
		cfg.Schema = migrate.DefaultSchema
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TxOptions.LockTimeout == 0 {
		cfg.TxOptions.LockTimeout = 2 * time.Second
	}
	if !cfg.EagerBegin {
		cfg.TxOptions.DeferBegin = true
	}
	if o := cfg.TxOptions.Observer; o.TxStart == nil && o.AttemptStart == nil && o.AttemptEnd == nil && o.TxEnd == nil {
		cfg.TxOptions.Observer = cfg.TxObserver
	}
	s := &Service{Pool: pool, Schema: cfg.Schema, Item: cfg.Item, txOpts: cfg.TxOptions, log: cfg.Logger, horizon: new(atomic.Int64),
		headers: cfg.EventHeaders, txObs: cfg.TxObserver, live: &liveWindow{}}
	if cfg.Citus {
		s.live.whole = "Citus: the writes run on other nodes, whose transactions this node's pg_stat_activity does not show"
	}
	if cfg.BucketConcurrency == 0 {
		cfg.BucketConcurrency = DefaultBucketConcurrency
	}
	if cfg.BucketConcurrency > 0 && !cfg.Item.Tokens {
		s.gates = make([]chan struct{}, maxBuckets)
		for i := range s.gates {
			s.gates[i] = make(chan struct{}, cfg.BucketConcurrency)
		}
	}
	var err error
	if _, err = migrate.Apply(ctx, pool, cfg.Schema, inbox.Migrations, outbox.Migrations, inventory.Migrations, order.Migrations); err != nil {
		return nil, err
	}
	if s.Inbox, err = inbox.New(inbox.Config{Schema: cfg.Schema, Citus: cfg.Citus}); err != nil {
		return nil, err
	}
	if s.Outbox, err = outbox.New(outbox.Config{Schema: cfg.Schema, Notify: cfg.Notify, Citus: cfg.Citus}); err != nil {
		return nil, err
	}
	if s.Inventory, err = inventory.New(inventory.Config{Schema: cfg.Schema, Logger: cfg.Logger, Observer: cfg.InventoryObserver, Citus: cfg.Citus}); err != nil {
		return nil, err
	}
	if s.Orders, err = order.New(order.Config{Schema: cfg.Schema, DefaultCurrency: cfg.Item.Currency, Citus: cfg.Citus}); err != nil {
		return nil, err
	}
	// The stores' Citus option must fit the server: on a schema Citus
	// distributes, a store without it commits every order with two phases.
	// (The option on plain PostgreSQL is let through: the tests run the
	// Citus statement shapes there.)
	var mismatch *migrate.CitusMismatchError
	for _, c := range []interface {
		Check(context.Context, pgtx.Querier) error
	}{s.Inbox, s.Outbox, s.Inventory, s.Orders} {
		if err = c.Check(ctx, pool); err != nil && !(errors.As(err, &mismatch) && mismatch.Option) {
			return nil, err
		}
	}
	it := cfg.Item
	if _, err = s.Inventory.Provision(ctx, pool, inventory.SKU{ActivityID: it.ActivityID, SKUID: it.SKUID, Stock: it.Stock, Buckets: it.Buckets, Tokens: it.Tokens}); err != nil {
		return nil, err
	}
	return s, nil
}

// eventHeaders returns Config.EventHeaders(ctx), nil without it.
func (s *Service) eventHeaders(ctx context.Context) map[string]string {
	if s.headers == nil {
		return nil
	}
	return s.headers(ctx)
}

// FrontDoorReleaseEvent is the compensation event that gives a
// reservation back to the front door.
func (s *Service) FrontDoorReleaseEvent(reservationID uuid.UUID, reason string) outbox.Event {
	id := reservationID.String()
	payload, _ := json.Marshal(map[string]any{"reservation_id": reservationID, "reason": reason})
	return outbox.Event{
		Topic: EventTopic, Tag: TagFrontDoorRelease, AggregateType: "RESERVATION", AggregateID: id,
		Payload: payload, DedupKey: TagFrontDoorRelease + ":" + id,
	}
}

// SetSaleStatus changes the item's sale status and window
// (inventory.Store.SetSaleStatus, audited with operator and reason) and
// announces it with a SALE_STATUS_CHANGED event in the same transaction,
// so the front door opens, pauses or closes its gate. From the commit on,
// the database refuses allocations outside the new state by itself: an
// order message in flight is rejected (NOT_ON_SALE) and compensated.
func (s *Service) SetSaleStatus(ctx context.Context, to inventory.SaleStatus, startsAt, endsAt time.Time, operator, reason string) (inventory.SaleChanged, error) {
	var out inventory.SaleChanged
	err := pgtx.RunInTx(ctx, s.Pool, s.txOpts, func(tx pgx.Tx) error {
		var err error
		out, err = s.Inventory.SetSaleStatus(ctx, tx, inventory.SaleChange{
			ActivityID: s.Item.ActivityID, SKUID: s.Item.SKUID, To: to,
			StartsAt: startsAt, EndsAt: endsAt, Operator: operator, Reason: reason,
		})
		if err != nil {
			return err
		}
		payload, err := json.Marshal(map[string]any{
			"activity_id": out.ActivityID, "sku_id": out.SKUID, "from": out.From.String(), "to": out.To.String(),
			"starts_at": nullTime(out.StartsAt), "ends_at": nullTime(out.EndsAt), "version": out.Version,
			"operator": out.Operator, "reason": out.Reason, "changed_at": out.ChangedAt,
		})
		if err != nil {
			return err
		}
		id := fmt.Sprintf("%d:%d", out.ActivityID, out.SKUID)
		_, err = s.Outbox.Enqueue(ctx, tx, outbox.Event{
			Topic: EventTopic, Tag: TagSaleStatus, AggregateType: "SKU", AggregateID: id, Payload: payload,
			DedupKey: fmt.Sprintf("%s:%s:%d", TagSaleStatus, id, out.Version), OrderingKey: "SALE:" + id,
		})
		return err
	})
	return out, err
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
