// Package flow is the seckill order flow of the example service, built
// from the kit's packages: the consumer transaction with every
// branch, payments, the timeout canceller and the audit of every invariant.
// The example program (examples/seckill) and the benchmark program
// (examples/bench) run exactly this code.
//
// It is example code, written to be read and copied: a service of your own
// would put its own names, events and front door around the same calls.
package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/examples/internal/orderid"
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
	// 32 consumers).
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
	if reflect.ValueOf(cfg.TxOptions.Observer).IsZero() { // no hook set (a struct of funcs has no ==)
		cfg.TxOptions.Observer = cfg.TxObserver
	}
	s := &Service{Pool: pool, Schema: cfg.Schema, Item: cfg.Item, txOpts: cfg.TxOptions, log: cfg.Logger, horizon: new(atomic.Int64),
		headers: cfg.EventHeaders, txObs: cfg.TxObserver}
	if cfg.BucketConcurrency == 0 {
		cfg.BucketConcurrency = DefaultBucketConcurrency
	}
	if cfg.BucketConcurrency > 0 {
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
	if _, err = s.Inventory.Provision(ctx, pool, inventory.SKU{ActivityID: it.ActivityID, SKUID: it.SKUID, Stock: it.Stock, Buckets: it.Buckets}); err != nil {
		return nil, err
	}
	return s, nil
}

// PlaceOrder processes one delivery of an order message and tells the
// caller what to do with it. It is the pipelined form of the order
// transaction: it first sends the fresh order as ONE batch (BEGIN, every
// write of a new order, each with its "or abort" helper, and COMMIT: one
// round trip),
// in which every condition that makes the message something else than a
// plain fresh order raises an error, so the server skips the rest of the
// batch and commits nothing. Only then does it run PlaceOrderTx, the
// step-by-step transaction that handles every branch, in a new
// transaction. Both end the same way for every message: the test
// TestPipelinedAndStepByStepAgree runs PlaceOrder and PlaceOrderStepByStep
// on the same messages and compares outcomes and database state.
//
// The outcome:
//
//   - nil error: acknowledge; Outcome says what happened. A duplicate
//     delivery gets the Outcome its first processing stored in the inbox
//     (same Code, OrderID and Reason), with Duplicate set;
//   - an error matching ErrPoison: acknowledge and alert, never retry;
//   - any other error, including pgtx.ErrCommitOutcomeUnknown: do not
//     acknowledge. The redelivery is safe: the inbox, the reservation and
//     the unique keys recognise whatever did commit.
func (s *Service) PlaceOrder(ctx context.Context, messageID uuid.UUID, body []byte) (Outcome, error) {
	m, hash, err := decode(body)
	if err != nil {
		return Outcome{}, err
	}
	release, err := s.enterBucket(ctx, m.Bucket)
	if err != nil {
		return Outcome{}, err
	}
	defer release()

	// The fresh order: one round trip.
	b, err := s.freshOrderBatch(ctx, messageID, hash, m)
	if err != nil {
		return Outcome{}, &poisonError{err} // invalid input: it will never pass
	}
	err = pgtx.RunBatch(ctx, s.Pool, s.txOpts, b)
	var aborted *pgtx.StatementError
	switch {
	case err == nil:
		return Outcome{Code: CodeOrderCreated, OrderID: m.OrderID}, nil
	case !errors.As(err, &aborted):
		// Not an abort by one of the statements: e.g. the pool had no
		// connection, or the COMMIT's outcome is unknown. Redeliver.
		return Outcome{}, err
	}

	// A statement raised: not a plain fresh order, nothing committed.
	// The two common refusals are recorded in one more batch, while they
	// still hold: sold out (the allocation refused), and a buyer who
	// already ordered (the order's one-per-buyer key).
	var out Outcome
	soldOut := errors.Is(err, inventory.ErrSoldOut)
	if soldOut {
		out = Outcome{Code: CodeSoldOut}
	} else if errors.Is(err, order.ErrUserAlreadyOrdered) {
		if existing, gerr := s.Orders.Get(ctx, s.Pool, seckill.Request{ActivityID: m.ActivityID, SKUID: m.SKUID, UserID: m.UserID}); gerr == nil {
			out = Outcome{Code: CodeUserAlreadyOrdered, OrderID: existing.OrderID}
		}
	}
	if out.Code != "" {
		reject, berr := s.rejectBatch(ctx, messageID, hash, m, out, soldOut)
		if berr != nil {
			return Outcome{}, &poisonError{berr}
		}
		err = pgtx.RunBatch(ctx, s.Pool, s.txOpts, reject)
		switch {
		case err == nil:
			return out, nil
		case !errors.As(err, &aborted):
			return Outcome{}, err
		}
	}
	// The general transaction finds out what the message is.
	return s.runGeneral(ctx, messageID, hash, m)
}

// rejectBatch is PlaceOrderTx's rejection of m with out (SOLD_OUT, or
// USER_ALREADY_ORDERED naming the buyer's order) as one batch, for a
// message whose fresh batch was refused for that reason: the inbox row
// with its result, the reservation inserted as REJECTED, and the
// compensation event that gives the front-door reservation back; with
// soldOut, first a read that raises unless the bucket is still sold out
// with the sale on. Every statement raises where PlaceOrderTx would branch
// elsewhere (a duplicate message or reservation, the stock back, the sale
// not on), and then the general transaction decides. It writes what
// PlaceOrderTx writes for such a message, and never waits for the bucket's
// lock.
func (s *Service) rejectBatch(ctx context.Context, msgID uuid.UUID, hash []byte, m OrderMessage, out Outcome, soldOut bool) (*pgx.Batch, error) {
	result, err := resultOf(out)
	if err != nil {
		return nil, err
	}
	release := s.FrontDoorReleaseEvent(m.ReservationID, out.Code)
	release.Headers = s.eventHeaders(ctx)
	var b pgx.Batch
	if soldOut {
		if err := s.Inventory.QueueCheckSoldOut(&b, s.allocation(msgID, m), pgtx.Abort); err != nil {
			return nil, err
		}
	}
	if err := s.Inbox.QueueClaimMessage(&b, withResult(s.inboxMessage(msgID, hash, m), result), nil, pgtx.Abort); err != nil {
		return nil, err
	}
	rejected := s.newReservation(msgID, m)
	rejected.FailureCode = out.Code // inserted as REJECTED
	if err := s.Inventory.QueueAcquireReservation(&b, rejected, nil, pgtx.Abort); err != nil {
		return nil, err
	}
	if err := s.Outbox.QueueEnqueue(&b, []outbox.Event{release}, nil, pgtx.Abort); err != nil {
		return nil, err
	}
	return &b, nil
}

// PlaceOrderStepByStep is PlaceOrder without the one-batch attempt: it
// runs PlaceOrderTx, the step-by-step transaction, for every message. It
// returns what PlaceOrder returns and writes what PlaceOrder writes; a
// fresh order takes a round trip per step instead of one in all. Start
// from this one when you adapt the flow; PlaceOrder is the same
// transaction, made fast.
func (s *Service) PlaceOrderStepByStep(ctx context.Context, messageID uuid.UUID, body []byte) (Outcome, error) {
	m, hash, err := decode(body)
	if err != nil {
		return Outcome{}, err
	}
	release, err := s.enterBucket(ctx, m.Bucket)
	if err != nil {
		return Outcome{}, err
	}
	defer release()
	return s.runGeneral(ctx, messageID, hash, m)
}

// decode reads an order message body; an undecodable one is poison.
func decode(body []byte) (OrderMessage, []byte, error) {
	var m OrderMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return OrderMessage{}, nil, &poisonError{fmt.Errorf("decode: %w", err)}
	}
	return m, inbox.HashPayload(body), nil
}

// enterBucket waits for a place among the transactions of bucket (see
// Config.BucketConcurrency) and returns the function that gives it back.
func (s *Service) enterBucket(ctx context.Context, bucket int16) (func(), error) {
	if s.gates == nil || bucket < 0 || int(bucket) >= len(s.gates) {
		return func() {}, nil
	}
	g := s.gates[bucket]
	select {
	case g <- struct{}{}:
		return func() { <-g }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// runGeneral runs PlaceOrderTx in its own transaction and answers a
// duplicate from the inbox.
func (s *Service) runGeneral(ctx context.Context, messageID uuid.UUID, hash []byte, m OrderMessage) (Outcome, error) {
	var out Outcome
	err := pgtx.RunInTx(ctx, s.Pool, s.txOpts, func(tx pgx.Tx) error {
		var err error
		out, err = s.PlaceOrderTx(ctx, tx, messageID, hash, m)
		return err
	})
	if errors.Is(err, ErrDuplicate) {
		return s.storedOutcome(ctx, messageID, err)
	}
	return out, err
}

// storedOutcome answers a duplicate delivery with what its first
// processing stored in the inbox: the same Outcome, with Duplicate set. The
// row comes from the claim when the claiming statement saw it (no extra
// round trip); otherwise the inbox is read again (Lookup).
func (s *Service) storedOutcome(ctx context.Context, messageID uuid.UUID, err error) (Outcome, error) {
	var rec inbox.Record
	var dup *duplicateError
	if errors.As(err, &dup) && dup.rec != nil {
		rec = *dup.rec
	} else {
		var lerr error
		if rec, lerr = s.Inbox.Lookup(ctx, s.Pool, inbox.Key{Group: ConsumerGroup, MessageID: messageID}); lerr != nil {
			return Outcome{}, fmt.Errorf("flow: answer a duplicate from the inbox: %w", lerr)
		}
	}
	out := Outcome{Code: rec.Result.Code}
	if len(rec.Result.Payload) > 0 {
		if err := json.Unmarshal(rec.Result.Payload, &out); err != nil {
			return Outcome{}, fmt.Errorf("flow: decode the stored result of message %s: %w", messageID, err)
		}
	}
	out.Duplicate = true
	return out, nil
}

// freshOrderBatch is the fresh order as one batch, for pgtx.RunBatch: the
// writes of PlaceOrderTx's fresh path, each with the "or abort" helper
// that raises where PlaceOrderTx's helper would return a condition to
// branch on. So the batch commits exactly when the message is a new
// order that gets its stock, and otherwise commits nothing:
//
//  1. the inbox row, stored at once with its result (ORDER_CREATED):
//     a duplicate message raises (unique key of the inbox);
//  2. the reservation, inserted at once as ORDERED: the same reservation
//     under a new message id raises (its primary key);
//  3. the order and its item: a buyer who already ordered raises (one
//     order per activity, SKU and buyer), as does the same request;
//  4. the ORDER_CREATED event (its dedup key, the order's, raises if it
//     exists);
//  5. last, the bucket decrement and its ALLOCATE ledger row: sold out,
//     the sale not on, or the reservation not binding raise. The hot
//     bucket row is locked only from here to COMMIT, within the server.
//
// The returned error reports invalid input only (nothing queued).
func (s *Service) freshOrderBatch(ctx context.Context, msgID uuid.UUID, hash []byte, m OrderMessage) (*pgx.Batch, error) {
	result, err := resultOf(Outcome{Code: CodeOrderCreated, OrderID: m.OrderID})
	if err != nil {
		return nil, err
	}
	ordered := s.newReservation(msgID, m)
	ordered.Ordered = true // inserted as ORDERED for m.OrderID: the batch commits only with the order and the stock
	var b pgx.Batch
	if err := s.Inbox.QueueClaimMessage(&b, withResult(s.inboxMessage(msgID, hash, m), result), nil, pgtx.Abort); err != nil {
		return nil, err
	}
	if err := s.Inventory.QueueAcquireReservation(&b, ordered, nil, pgtx.Abort); err != nil {
		return nil, err
	}
	if err := s.Orders.QueueCreate(&b, s.newOrder(msgID, m), nil, pgtx.Abort); err != nil {
		return nil, err
	}
	if err := s.Outbox.QueueEnqueue(&b, []outbox.Event{s.orderCreatedEvent(ctx, m)}, nil, pgtx.Abort); err != nil {
		return nil, err
	}
	if err := s.Inventory.QueueAllocateBucket(&b, s.allocation(msgID, m), nil, pgtx.Abort); err != nil {
		return nil, err
	}
	return &b, nil
}

// PlaceOrderTx is the consumer transaction with every
// branch, one helper call per step, in the caller's transaction tx (Read
// Committed). It returns the message's Outcome; ErrDuplicate (answer from
// the inbox, roll back), an error matching ErrPoison (roll back, ack and
// alert) or another error (roll back, redeliver).
//
// The steps:
//
//  1. claim the message in the inbox; a duplicate ends here;
//  2. record the reservation and lock it; one that an earlier message
//     already decided (the same reservation under a new message id) is
//     answered with that decision;
//  3. a savepoint, so that a refusal at step 4 or 8 undoes steps 4–7;
//  4. create the order and its item; a buyer who already ordered is
//     rejected, an existing order of this very request is answered;
//  5. enqueue ORDER_CREATED;
//  6. move the reservation to ORDERED;
//  7. record the result in the inbox, for duplicates;
//  8. last, take the stock (the bucket decrement and its ledger row), so
//     the hot bucket row stays locked only until COMMIT; sold out or the
//     sale not on rejects the reservation.
//
// A rejection (PostgreSQL refuses what the front door accepted) moves the
// reservation to REJECTED and enqueues the compensation event that gives
// the front-door reservation back, in the same transaction.
func (s *Service) PlaceOrderTx(ctx context.Context, tx pgx.Tx, msgID uuid.UUID, hash []byte, m OrderMessage) (Outcome, error) {
	key := inbox.Key{Group: ConsumerGroup, MessageID: msgID}
	result, err := resultOf(Outcome{Code: CodeOrderCreated, OrderID: m.OrderID})
	if err != nil {
		return Outcome{}, err
	}

	// 1. Claim the message.
	claim, err := s.Inbox.ClaimMessage(ctx, tx, s.inboxMessage(msgID, hash, m))
	if err != nil {
		return Outcome{}, poisonIf(err, inbox.ErrPayloadMismatch, inbox.ErrInvalidArgument)
	}
	if !claim.Fresh {
		rec := claim.Record
		return Outcome{}, &duplicateError{rec: &rec} // processed before: answer with its stored result
	}

	// 2. Record the reservation and lock it.
	acq, err := s.Inventory.AcquireReservation(ctx, tx, s.newReservation(msgID, m))
	if err != nil {
		return Outcome{}, poisonIf(err, inventory.ErrReservationConflict, inventory.ErrInvalidArgument)
	}
	if !acq.Created && acq.Reservation.Status != inventory.StatusPendingDB {
		return s.finishKnownReservation(ctx, tx, key, acq.Reservation)
	}

	// 3. A savepoint to come back to if the order or the stock is refused.
	if _, err := tx.Exec(ctx, "SAVEPOINT "+savepoint); err != nil {
		return Outcome{}, err
	}

	// 4. The order and its item.
	created, err := s.Orders.Create(ctx, tx, s.newOrder(msgID, m))
	var already *order.Error
	switch {
	case errors.Is(err, order.ErrUserAlreadyOrdered) && errors.As(err, &already):
		return s.rollBackAndReject(ctx, tx, key, m, CodeUserAlreadyOrdered, already.Order.OrderID)
	case err != nil:
		return Outcome{}, poisonIf(err, order.ErrInvalidArgument)
	case created.Existing:
		// An earlier attempt of this request created it (nothing written now).
		return s.finish(ctx, tx, key, m.ReservationID, Outcome{Code: CodeOrderAlready, OrderID: created.Order.OrderID}, true)
	}

	// 5. The ORDER_CREATED event.
	if _, err := s.Outbox.Enqueue(ctx, tx, s.orderCreatedEvent(ctx, m)); err != nil {
		return Outcome{}, poisonIf(err, outbox.ErrInvalidArgument)
	}

	// 6. The reservation is ORDERED.
	if _, err := s.Inventory.TransitionReservation(ctx, tx, inventory.Transition{
		ReservationID: m.ReservationID, To: inventory.StatusOrdered, OrderID: m.OrderID,
	}); err != nil {
		return Outcome{}, err
	}

	// 7. The result, for duplicates.
	if err := s.Inbox.Complete(ctx, tx, key, result); err != nil {
		return Outcome{}, err
	}

	// 8. Last, the stock.
	_, err = s.Inventory.AllocateBucket(ctx, tx, s.allocation(msgID, m))
	switch {
	case err == nil:
		return Outcome{Code: CodeOrderCreated, OrderID: m.OrderID}, nil
	case errors.Is(err, inventory.ErrSoldOut):
		return s.rollBackAndReject(ctx, tx, key, m, CodeSoldOut, 0)
	case errors.Is(err, inventory.ErrNotOnSale):
		return s.rollBackAndReject(ctx, tx, key, m, CodeNotOnSale, 0)
	}
	// Not provisioned: no redelivery will pass.
	return Outcome{}, poisonIf(err, inventory.ErrUnknownBucket, inventory.ErrUnknownSKU, inventory.ErrInvalidArgument)
}

// poisonIf marks err as poison when it matches one of kinds.
func poisonIf(err error, kinds ...error) error {
	for _, k := range kinds {
		if errors.Is(err, k) {
			return &poisonError{err}
		}
	}
	return err
}

// The inputs of the helpers, built from the message.

func (s *Service) inboxMessage(msgID uuid.UUID, hash []byte, m OrderMessage) inbox.Message {
	return inbox.Message{
		Group: ConsumerGroup, MessageID: msgID, Topic: OrderTopic, Tag: OrderTag,
		MessageKey: m.ReservationID.String(), Ref: m.ReservationID.String(), PayloadHash: hash,
	}
}

// withResult is msg claimed with its result res recorded up front.
func withResult(msg inbox.Message, res inbox.Result) inbox.Message {
	msg.Result = &res
	return msg
}

// request is the purchase the message carries, processed as message msgID.
func (s *Service) request(msgID uuid.UUID, m OrderMessage) seckill.Request {
	return seckill.Request{
		RequestID: m.RequestID, MessageID: msgID, ReservationID: m.ReservationID, OrderID: m.OrderID,
		ActivityID: m.ActivityID, SKUID: m.SKUID, UserID: m.UserID, Bucket: m.Bucket, Quantity: 1,
	}
}

func (s *Service) newReservation(msgID uuid.UUID, m OrderMessage) inventory.NewReservation {
	return inventory.NewReservation{Request: s.request(msgID, m), ReservedAt: m.ReservedAt, ExpiresAt: m.ReservationTo}
}

func (s *Service) newOrder(msgID uuid.UUID, m OrderMessage) order.NewOrder {
	return order.NewOrder{
		Request: s.request(msgID, m),
		OrderNo: orderid.FormatNo(m.OrderID), UnitPrice: m.UnitPrice, Currency: m.Currency, ExpireAt: m.OrderExpireAt, SKUTitle: m.SKUTitle,
	}
}

func (s *Service) allocation(msgID uuid.UUID, m OrderMessage) inventory.Allocation {
	return inventory.Allocation{Request: s.request(msgID, m)}
}

// finishKnownReservation answers a message whose reservation was already
// decided by an earlier message.
func (s *Service) finishKnownReservation(ctx context.Context, tx pgx.Tx, key inbox.Key, r inventory.Reservation) (Outcome, error) {
	out := Outcome{Code: CodeOrderAlready, OrderID: r.OrderID}
	if r.Status == inventory.StatusRejected {
		// Not the rejection code itself: the rejection was decided (and
		// answered, and compensated) once, by the message that made it.
		out = Outcome{Code: CodeReservationRejected, Reason: r.FailureCode, OrderID: r.OrderID}
	} else if r.OrderID == 0 {
		out.Code = "RESERVATION_" + r.Status.String()
	}
	return s.finish(ctx, tx, key, r.ReservationID, out, false)
}

// finish records out as the message's result (and, when markOrdered, moves
// a still-pending reservation to ORDERED).
func (s *Service) finish(ctx context.Context, tx pgx.Tx, key inbox.Key, reservationID uuid.UUID, out Outcome, markOrdered bool) (Outcome, error) {
	result, err := resultOf(out)
	if err != nil {
		return Outcome{}, err
	}
	if markOrdered {
		_, err := s.Inventory.TransitionReservation(ctx, tx, inventory.Transition{ReservationID: reservationID, To: inventory.StatusOrdered, OrderID: out.OrderID})
		if err != nil && !errors.Is(err, inventory.ErrAlreadyInState) {
			return Outcome{}, err
		}
	}
	if err := s.Inbox.Complete(ctx, tx, key, result); err != nil {
		return Outcome{}, err
	}
	return out, nil
}

// rollBackAndReject undoes the writes made since the savepoint and
// rejects the reservation.
func (s *Service) rollBackAndReject(ctx context.Context, tx pgx.Tx, key inbox.Key, m OrderMessage, code string, orderID int64) (Outcome, error) {
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepoint); err != nil {
		return Outcome{}, err
	}
	return s.reject(ctx, tx, key, m, code, orderID)
}

// reject is the rejection branch: the reservation is REJECTED and a
// compensation event gives the front-door reservation back, in the same
// transaction.
func (s *Service) reject(ctx context.Context, tx pgx.Tx, key inbox.Key, m OrderMessage, code string, orderID int64) (Outcome, error) {
	out := Outcome{Code: code, OrderID: orderID}
	result, err := resultOf(out)
	if err != nil {
		return Outcome{}, err
	}
	if _, err := s.Inventory.TransitionReservation(ctx, tx, inventory.Transition{ReservationID: m.ReservationID, To: inventory.StatusRejected, FailureCode: code}); err != nil {
		return Outcome{}, err
	}
	release := s.FrontDoorReleaseEvent(m.ReservationID, code)
	release.Headers = s.eventHeaders(ctx)
	if _, err := s.Outbox.Enqueue(ctx, tx, release); err != nil {
		return Outcome{}, err
	}
	if err := s.Inbox.Complete(ctx, tx, key, result); err != nil {
		return Outcome{}, err
	}
	return out, nil
}

func resultOf(out Outcome) (inbox.Result, error) {
	payload, err := json.Marshal(out)
	if err != nil {
		return inbox.Result{}, err
	}
	return inbox.Result{Code: out.Code, Payload: payload}, nil
}

// eventHeaders returns Config.EventHeaders(ctx), nil without it.
func (s *Service) eventHeaders(ctx context.Context) map[string]string {
	if s.headers == nil {
		return nil
	}
	return s.headers(ctx)
}

func (s *Service) orderCreatedEvent(ctx context.Context, m OrderMessage) outbox.Event {
	id := strconv.FormatInt(m.OrderID, 10)
	payload, _ := json.Marshal(map[string]any{
		"order_id": m.OrderID, "reservation_id": m.ReservationID, "user_id": m.UserID,
		"activity_id": m.ActivityID, "sku_id": m.SKUID, "amount": m.UnitPrice, "currency": m.Currency,
	})
	return outbox.Event{
		Topic: EventTopic, Tag: TagOrderCreated, AggregateType: "ORDER", AggregateID: id,
		Payload: payload, DedupKey: TagOrderCreated + ":" + id, Headers: s.eventHeaders(ctx),
	}
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
