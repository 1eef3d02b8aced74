package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

// counters are the program's figures for the report and /stats.
type counters struct {
	clicks, frontAccepted, frontSoldOut, frontAlready, busy                 atomic.Int64
	created, already, userAlready, soldOut, duplicates, poison, unknownCmts atomic.Int64
	txErrors, retries                                                       atomic.Int64
	paid, dupCallbacks, paidAfterCancel, cancelled                          atomic.Int64
	published                                                               sync.Map // tag → *atomic.Int64
	publishedIDs                                                            sync.Map // event id → struct{}
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

// service is the flow plus what stands in for the rest of a deployment:
// the front door, the queue, and the counters.
type service struct {
	*flow.Service
	log *slog.Logger

	front *frontDoor
	q     *queue
	ids   order.IDGenerator

	orderTTL       time.Duration
	reservationTTL time.Duration

	// onOrderCreated, when set, sees the order id of every ORDER_CREATED
	// event the relay publishes (at least once each).
	onOrderCreated func(orderID int64)

	stats counters
	lat   latencies
}

func newService(ctx context.Context, pool *pgxpool.Pool, schema string, item flow.SKU, qcfg queueConfig, orderTTL time.Duration, log *slog.Logger) (*service, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler) // nil means discard, as everywhere
	}
	s := &service{log: log, orderTTL: orderTTL, reservationTTL: 15 * time.Minute}
	fs, err := flow.New(ctx, pool, flow.Config{Schema: schema, Item: item, Logger: log, TxOptions: pgtx.Options{
		Name: "place_order",
		Observer: pgtx.ObserverFunc(func(_ context.Context, e pgtx.Event) {
			switch e.Kind {
			case pgtx.EventRetry:
				s.stats.retries.Add(1)
			case pgtx.EventCommitUnknown:
				s.stats.unknownCmts.Add(1)
			}
		}),
	}})
	if err != nil {
		return nil, err
	}
	s.Service = fs
	buckets, err := fs.Inventory.Buckets(ctx, pool, item.ActivityID, item.SKUID)
	if err != nil {
		return nil, err
	}
	stock := make([]int32, len(buckets))
	for i, b := range buckets {
		stock[i] = b.Available
	}
	s.front = newFrontDoor(stock, func() (int64, error) { return s.ids.Next(), nil })
	s.q = newQueue(qcfg)
	return s, nil
}

// click is one buyer pressing "buy": the front door reserves or refuses,
// and a reservation becomes a queue message. It is what POST /orders does.
func (s *service) click(user int64) (reservation, error) {
	s.stats.clicks.Add(1)
	r, err := s.front.Reserve(user)
	switch {
	case errors.Is(err, errFrontSoldOut):
		s.stats.frontSoldOut.Add(1)
		return r, err
	case errors.Is(err, errAlreadyBought):
		s.stats.frontAlready.Add(1)
		return r, err
	case err != nil:
		return r, err
	}
	if err := s.publish(r, uuid.Must(uuid.NewV7())); err != nil {
		s.front.Release(r.ReservationID) // nothing queued: give the unit back
		s.front.forget(r.UserID)
		s.stats.busy.Add(1)
		return r, err
	}
	s.stats.frontAccepted.Add(1)
	return r, nil
}

// publish sends the order message for r with the given message id.
func (s *service) publish(r reservation, messageID uuid.UUID) error {
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
	return s.q.Publish(message{ID: messageID, Body: body})
}

// consume handles one delivery: nil acknowledges it, an error makes the
// queue deliver it again.
func (s *service) consume(ctx context.Context, m message) error {
	start := time.Now()
	out, err := s.PlaceOrder(ctx, m.ID, m.Body)
	switch {
	case errors.Is(err, flow.ErrPoison):
		s.stats.poison.Add(1)
		s.log.Error("poison message acknowledged", "message_id", m.ID, "error", err)
		return nil
	case err != nil:
		// Includes ErrCommitOutcomeUnknown: never retried here; the
		// redelivery finds the answer through the inbox and unique keys.
		s.stats.txErrors.Add(1)
		s.log.Debug("order transaction failed; the message will be redelivered", "message_id", m.ID, "error", err)
		return err
	case out.Duplicate:
		s.stats.duplicates.Add(1)
		return nil
	}
	s.lat.add(time.Since(start))
	switch out.Code {
	case flow.CodeOrderCreated:
		s.stats.created.Add(1)
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
