// Package flow is the seckill order flow of the example service, built
// from the kit's packages: the consumer transaction of seed §9.11 with every
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
	"strconv"
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
// one reservation (seed §9.11 OrderCreateMessage).
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

// duplicateError is ErrDuplicate with the inbox row the claim found, when
// the claiming statement could see it (nil when the first processing
// committed while the claim waited, and only a new statement can read it).
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
	// TxOptions run the order transaction. Defaults to Read Committed with
	// a 2s lock timeout, and DeferBegin unless EagerBegin is set.
	TxOptions pgtx.Options
	// EagerBegin sends BEGIN in a round trip of its own. By default the
	// flow sets TxOptions.DeferBegin: every transaction of the flow starts
	// with a batch, which then carries BEGIN, so the fresh order takes two
	// round trips instead of three.
	EagerBegin bool
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Notify makes the flow's outbox writes NOTIFY listening relays.
	// Defaults to false: relays poll. PostgreSQL serialises the commits of
	// all transactions that sent a NOTIFY on one database-wide lock, held
	// across the commit's WAL flush, so at most one notifying order
	// transaction commits per disk flush (examples/bench measured the order
	// transactions waiting on it 70% of the time, and a third of the
	// throughput without it). Relays that keep polling every few tens of
	// milliseconds deliver within that interval instead.
	Notify bool
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
	Inbox     *inbox.Inbox
	Outbox    *outbox.Store
	Inventory *inventory.Store
	Orders    *order.Store

	txOpts pgtx.Options
	log    *slog.Logger
	gates  []chan struct{} // per bucket; nil: no bound

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
	s := &Service{Pool: pool, Schema: cfg.Schema, Item: cfg.Item, txOpts: cfg.TxOptions, log: cfg.Logger, horizon: new(atomic.Int64)}
	if cfg.BucketConcurrency == 0 {
		cfg.BucketConcurrency = DefaultBucketConcurrency
	}
	if cfg.BucketConcurrency > 0 {
		s.gates = make([]chan struct{}, inventory.MaxBuckets)
		for i := range s.gates {
			s.gates[i] = make(chan struct{}, cfg.BucketConcurrency)
		}
	}
	var err error
	if _, err = migrate.Apply(ctx, pool, cfg.Schema, inbox.Migrations, outbox.Migrations, inventory.Migrations, order.Migrations); err != nil {
		return nil, err
	}
	if s.Inbox, err = inbox.New(inbox.Config{Schema: cfg.Schema}); err != nil {
		return nil, err
	}
	if s.Outbox, err = outbox.New(outbox.Config{Schema: cfg.Schema, Notify: cfg.Notify}); err != nil {
		return nil, err
	}
	if s.Inventory, err = inventory.New(inventory.Config{Schema: cfg.Schema, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	if s.Orders, err = order.New(order.Config{Schema: cfg.Schema, DefaultCurrency: cfg.Item.Currency}); err != nil {
		return nil, err
	}
	it := cfg.Item
	if _, err = s.Inventory.Provision(ctx, pool, inventory.SKU{ActivityID: it.ActivityID, SKUID: it.SKUID, Stock: it.Stock, Buckets: it.Buckets}); err != nil {
		return nil, err
	}
	return s, nil
}

// PlaceOrder processes one delivery of an order message and tells the
// caller what to do with it. A fresh order or a duplicate takes one
// transaction of two round trips (BEGIN and one batch, COMMIT or
// ROLLBACK; three with Config.EagerBegin);
// the rarer branches (sold out, user already ordered, same reservation
// under a new message id) roll that one back and run PlaceOrderTx in a
// second transaction. The outcome:
//
//   - nil error: acknowledge; Outcome says what happened. A duplicate
//     delivery gets the Outcome its first processing stored in the inbox
//     (same Code, OrderID and Reason), with Duplicate set;
//   - an error matching ErrPoison: acknowledge and alert, never retry;
//   - any other error, including pgtx.ErrCommitOutcomeUnknown: do not
//     acknowledge. The redelivery is safe: the inbox, the reservation and
//     the unique keys recognise whatever did commit.
func (s *Service) PlaceOrder(ctx context.Context, messageID uuid.UUID, body []byte) (Outcome, error) {
	var m OrderMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return Outcome{}, &poisonError{fmt.Errorf("decode: %w", err)}
	}
	hash := inbox.HashPayload(body)
	if s.gates != nil && m.Bucket >= 0 && int(m.Bucket) < len(s.gates) {
		g := s.gates[m.Bucket]
		select {
		case g <- struct{}{}:
		case <-ctx.Done():
			return Outcome{}, ctx.Err()
		}
		defer func() { <-g }()
	}
	var out Outcome
	// The fresh path first: one batch that takes the message to its most
	// likely end. Anything else rolls it back and takes the general
	// transaction, which handles every branch.
	err := pgtx.RunInTx(ctx, s.Pool, s.txOpts, func(tx pgx.Tx) error {
		var err error
		out, err = s.placeFresh(ctx, tx, messageID, hash, m)
		return err
	})
	if errors.Is(err, errNotFresh) {
		err = pgtx.RunInTx(ctx, s.Pool, s.txOpts, func(tx pgx.Tx) error {
			var err error
			out, err = s.PlaceOrderTx(ctx, tx, messageID, hash, m)
			return err
		})
	}
	if errors.Is(err, ErrDuplicate) {
		return s.storedOutcome(ctx, messageID, err)
	}
	return out, err
}

// storedOutcome answers a duplicate delivery with what its first
// processing stored in the inbox: the same Outcome, with Duplicate set. The
// row comes from the claim when the claiming statement saw it (no extra
// round trip); when the first processing was still in flight and committed
// while the claim waited for it, the inbox is read again (Lookup, a new
// statement that sees the commit).
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

// PlaceOrderTx is the consumer transaction of seed §9.11 with every branch,
// pipelined: the fresh path sends ONE batch, then COMMIT; in a transaction
// run with pgtx.Options.DeferBegin (as PlaceOrder's are) the batch carries
// BEGIN too, two round trips in all. The batch claims the message, inserts
// and locks the reservation, sets a savepoint, and then writes the whole fresh
// outcome — order and item, ORDER_CREATED event, reservation ORDERED, inbox
// result — ending with the conditional bucket decrement, so the hot bucket
// row is locked for the rest of the batch and COMMIT only. When the batch
// shows that the message is not a plain fresh order, the transaction rolls
// back to the savepoint (or entirely) and takes the branch that applies.
func (s *Service) PlaceOrderTx(ctx context.Context, tx pgx.Tx, msgID uuid.UUID, hash []byte, m OrderMessage) (Outcome, error) {
	return s.placeOrderTx(ctx, tx, msgID, hash, m, false)
}

// errNotFresh ends the fresh-path transaction of PlaceOrder when the
// message turned out to be something else than a plain fresh order: roll
// back, run PlaceOrderTx.
var errNotFresh = errors.New("flow: not a plain fresh order")

// placeFresh is the transaction PlaceOrder tries first: the batch of
// PlaceOrderTx without its three costs that only the other branches need.
// The message is claimed with its result (ORDER_CREATED) in the same
// INSERT, instead of a claim and a later UPDATE of the inbox row; the
// reservation is inserted as ORDERED, instead of PENDING_DB and a later
// UPDATE; and there is no savepoint (a subtransaction). A duplicate or a poison
// message is answered from this batch as in PlaceOrderTx; any other
// branch returns errNotFresh, and the caller rolls back and runs
// PlaceOrderTx, which records the branch's own result.
func (s *Service) placeFresh(ctx context.Context, tx pgx.Tx, msgID uuid.UUID, hash []byte, m OrderMessage) (Outcome, error) {
	return s.placeOrderTx(ctx, tx, msgID, hash, m, true)
}

func (s *Service) placeOrderTx(ctx context.Context, tx pgx.Tx, msgID uuid.UUID, hash []byte, m OrderMessage, fresh bool) (Outcome, error) {
	key := inbox.Key{Group: ConsumerGroup, MessageID: msgID}
	resv := inventory.NewReservation{
		ReservationID: m.ReservationID, RequestID: m.RequestID, FirstMessageID: msgID,
		ActivityID: m.ActivityID, SKUID: m.SKUID, UserID: m.UserID, Bucket: m.Bucket, Quantity: 1,
		ReservedAt: m.ReservedAt, ExpiresAt: m.ReservationTo,
	}
	if fresh {
		// Inserted as ORDERED at once: the fresh batch creates the order
		// and allocates the stock too, and the transaction rolls back
		// unless all of it succeeded.
		resv.OrderID = m.OrderID
	}
	newOrder := order.NewOrder{
		OrderID: m.OrderID, RequestID: m.RequestID, ReservationID: m.ReservationID, SourceMessageID: msgID,
		ActivityID: m.ActivityID, SKUID: m.SKUID, UserID: m.UserID, Bucket: m.Bucket, Quantity: 1,
		UnitPrice: m.UnitPrice, Currency: m.Currency, ExpireAt: m.OrderExpireAt, SKUTitle: m.SKUTitle,
	}
	created := Outcome{Code: CodeOrderCreated, OrderID: m.OrderID}
	result, err := resultOf(created)
	if err != nil {
		return Outcome{}, err
	}

	var (
		claim inbox.Claim
		acq   inventory.Acquired
		ord   order.CreateResult
		enq   outbox.Enqueued
		moved inventory.Reservation
		alloc inventory.Allocated
		b     pgx.Batch
	)
	msg := inbox.Message{
		Group: ConsumerGroup, MessageID: msgID, Topic: OrderTopic, Tag: OrderTag,
		MessageKey: m.ReservationID.String(), Ref: m.ReservationID.String(), PayloadHash: hash,
	}
	unlessFresh := func(f func() error) func() error {
		if fresh {
			return func() error { return nil }
		}
		return f
	}
	queue := []func() error{
		func() error {
			if fresh {
				return s.Inbox.QueueClaimMessageWithResult(&b, msg, result, &claim)
			}
			return s.Inbox.QueueClaimMessage(&b, msg, &claim)
		},
		func() error { return s.Inventory.QueueAcquireReservation(&b, resv, &acq) },
		unlessFresh(func() error { b.Queue("SAVEPOINT " + savepoint); return nil }),
		func() error { return s.Orders.QueueCreate(&b, newOrder, &ord) },
		func() error { return s.Outbox.QueueEnqueue(&b, s.orderCreatedEvent(m), &enq) },
		unlessFresh(func() error {
			return s.Inventory.QueueTransitionReservation(&b, inventory.Transition{
				ReservationID: m.ReservationID, To: inventory.StatusOrdered, OrderID: m.OrderID,
			}, &moved)
		}),
		unlessFresh(func() error { return s.Inbox.QueueComplete(&b, key, result) }),
		func() error {
			return s.Inventory.QueueAllocateBucket(&b, inventory.Allocation{
				ReservationID: m.ReservationID, ActivityID: m.ActivityID, SKUID: m.SKUID, Bucket: m.Bucket,
				Quantity: 1, UserID: m.UserID, OrderID: m.OrderID, SourceMessageID: msgID,
			}, &alloc)
		},
	}
	for _, q := range queue {
		if err := q(); err != nil {
			return Outcome{}, &poisonError{err} // invalid input: it will never pass
		}
	}
	err = tx.SendBatch(ctx, &b).Close()
	if err == nil && claim.Fresh && acq.Created {
		return created, nil // the fresh order: commit
	}

	// Not the plain fresh path. pgx runs the result callbacks in order and
	// stops at the first error, so what is filled in tells how far the
	// classification got.
	claimed := claim.Record.Key.MessageID != uuid.Nil
	switch {
	case errors.Is(err, inbox.ErrConcurrentClaim):
		return Outcome{}, &duplicateError{} // the message committed meanwhile: look it up
	case errors.Is(err, inbox.ErrPayloadMismatch):
		return Outcome{}, &poisonError{err}
	case claimed && !claim.Fresh:
		rec := claim.Record
		return Outcome{}, &duplicateError{rec: &rec} // processed before: answer with its stored result
	case errors.Is(err, inventory.ErrReservationConflict):
		return Outcome{}, &poisonError{err}
	case errors.Is(err, inventory.ErrUnknownBucket), errors.Is(err, inventory.ErrUnknownSKU):
		return Outcome{}, &poisonError{err} // not provisioned: no redelivery will pass
	}
	if fresh {
		return Outcome{}, errNotFresh
	}
	if !claimed || acq.Reservation.ReservationID == uuid.Nil {
		if err == nil {
			err = errors.New("batch ended without a claim or a reservation")
		}
		return Outcome{}, err
	}
	if _, rbErr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepoint); rbErr != nil {
		return Outcome{}, errors.Join(err, rbErr)
	}
	if !acq.Created && acq.Reservation.Status != inventory.StatusPendingDB {
		// Same reservation under a new message id (seed §7.3): answer with
		// what happened to the reservation.
		return s.finishKnownReservation(ctx, tx, key, acq.Reservation)
	}
	switch {
	case errors.Is(err, order.ErrConflict):
		res, cerr := s.Orders.ClassifyConflict(ctx, tx, newOrder)
		var already *order.UserAlreadyOrderedError
		switch {
		case errors.As(cerr, &already):
			return s.reject(ctx, tx, key, m, CodeUserAlreadyOrdered, already.Existing.OrderID)
		case cerr != nil:
			return Outcome{}, cerr
		case res.Existing:
			return s.finish(ctx, tx, key, m.ReservationID, Outcome{Code: CodeOrderAlready, OrderID: res.Order.OrderID}, true)
		}
		return Outcome{}, fmt.Errorf("order conflict classified as neither existing nor already ordered: %w", err)
	case errors.Is(err, order.ErrUserAlreadyOrdered):
		var already *order.UserAlreadyOrderedError
		errors.As(err, &already)
		return s.reject(ctx, tx, key, m, CodeUserAlreadyOrdered, already.Existing.OrderID)
	case errors.Is(err, inventory.ErrSoldOut):
		return s.reject(ctx, tx, key, m, CodeSoldOut, 0)
	case errors.Is(err, inventory.ErrNotOnSale):
		return s.reject(ctx, tx, key, m, CodeNotOnSale, 0)
	case err != nil:
		return Outcome{}, err
	}
	if ord.Existing {
		return s.finish(ctx, tx, key, m.ReservationID, Outcome{Code: CodeOrderAlready, OrderID: ord.Order.OrderID}, true)
	}
	return Outcome{}, fmt.Errorf("unexpected batch outcome (claim fresh %v, reservation created %v)", claim.Fresh, acq.Created)
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
// a still-pending reservation to ORDERED) after the savepoint was rolled
// back.
func (s *Service) finish(ctx context.Context, tx pgx.Tx, key inbox.Key, reservationID uuid.UUID, out Outcome, markOrdered bool) (Outcome, error) {
	result, err := resultOf(out)
	if err != nil {
		return Outcome{}, err
	}
	var b pgx.Batch
	var moved inventory.Reservation
	if markOrdered {
		if err := s.Inventory.QueueTransitionReservation(&b, inventory.Transition{ReservationID: reservationID, To: inventory.StatusOrdered, OrderID: out.OrderID}, &moved); err != nil {
			return Outcome{}, err
		}
	}
	if err := s.Inbox.QueueComplete(&b, key, result); err != nil {
		return Outcome{}, err
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil && !errors.Is(err, inventory.ErrAlreadyInState) {
		return Outcome{}, err
	}
	return out, nil
}

// reject is the seed §7.4 branch: the reservation is REJECTED and a
// compensation event gives the front-door reservation back, in the same
// transaction.
func (s *Service) reject(ctx context.Context, tx pgx.Tx, key inbox.Key, m OrderMessage, code string, orderID int64) (Outcome, error) {
	out := Outcome{Code: code, OrderID: orderID}
	result, err := resultOf(out)
	if err != nil {
		return Outcome{}, err
	}
	var (
		b     pgx.Batch
		moved inventory.Reservation
		enq   outbox.Enqueued
	)
	if err := s.Inventory.QueueTransitionReservation(&b, inventory.Transition{ReservationID: m.ReservationID, To: inventory.StatusRejected, FailureCode: code}, &moved); err != nil {
		return Outcome{}, err
	}
	if err := s.Outbox.QueueEnqueue(&b, s.FrontDoorReleaseEvent(m.ReservationID, code), &enq); err != nil {
		return Outcome{}, err
	}
	if err := s.Inbox.QueueComplete(&b, key, result); err != nil {
		return Outcome{}, err
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
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

func (s *Service) orderCreatedEvent(m OrderMessage) outbox.Event {
	id := strconv.FormatInt(m.OrderID, 10)
	payload, _ := json.Marshal(map[string]any{
		"order_id": m.OrderID, "reservation_id": m.ReservationID, "user_id": m.UserID,
		"activity_id": m.ActivityID, "sku_id": m.SKUID, "amount": m.UnitPrice, "currency": m.Currency,
	})
	return outbox.Event{
		Topic: EventTopic, Tag: TagOrderCreated, AggregateType: "ORDER", AggregateID: id,
		Payload: payload, DedupKey: TagOrderCreated + ":" + id,
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
