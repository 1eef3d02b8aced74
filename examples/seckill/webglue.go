package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/frontdoor"
	"github.com/seckillkit/seckill/examples/seckill/guardstore"
	"github.com/seckillkit/seckill/examples/seckill/reconcile"
	"github.com/seckillkit/seckill/examples/seckill/web"
	"github.com/seckillkit/seckill/order"
)

// The service as the HTTP face (package web) sees it: *service implements
// web.Service.
var _ web.Service = (*service)(nil)

// Flow is the order flow.
func (s *service) Flow() *flow.Service { return s.Service }

// FrontDoor is the sale's front door.
func (s *service) FrontDoor() frontdoor.Door { return s.front }

// Broker is the order queue.
func (s *service) Broker() broker.Broker { return s.q }

// Click is service.click.
func (s *service) Click(ctx context.Context, buyer int64) (frontdoor.Reservation, error) {
	return s.click(ctx, buyer)
}

// RecordPayment is service.pay.
func (s *service) RecordPayment(ctx context.Context, p flow.Payment) (order.PaymentResult, error) {
	return s.pay(ctx, p)
}

// AuditNow is service.audit.
func (s *service) AuditNow(ctx context.Context, live bool) ([]flow.Check, error) {
	return s.audit(ctx, live)
}

// Figures are the counters the operator page shows.
func (s *service) Figures() web.Figures {
	return web.Figures{Orders: s.stats.created.Load(), Paid: s.stats.paid.Load(), Cancelled: s.stats.cancelled.Load(),
		Refunded: s.stats.paidAfterCancel.Load()}
}

// OrderLatencies returns the order transaction durations recorded from
// index from on, and the next index.
func (s *service) OrderLatencies(from int) ([]time.Duration, int) {
	s.lat.mu.Lock()
	defer s.lat.mu.Unlock()
	from = min(from, len(s.lat.d))
	return slices.Clone(s.lat.d[from:]), len(s.lat.d)
}

// Stats is GET /stats' answer: the counters, the backlogs, the front door's
// stock and the latencies.
func (s *service) Stats(ctx context.Context) (any, error) {
	st, err := s.Outbox.Stats(ctx, s.Pool)
	if err != nil {
		return nil, err
	}
	front, err := s.front.Counters(ctx)
	if err != nil {
		return nil, errors.Join(web.ErrUnavailable, err)
	}
	c := &s.stats
	return map[string]any{
		"clicks": c.clicks.Load(), "front_accepted": c.frontAccepted.Load(), "front_sold_out": c.frontSoldOut.Load(),
		"orders_created": c.created.Load(), "rejected_sold_out": c.soldOut.Load(), "rejected_user_already": c.userAlready.Load(),
		"duplicates": c.duplicates.Load(), "paid": c.paid.Load(), "cancelled": c.cancelled.Load(),
		"queue_pending": s.q.Pending(ctx), "front_available": frontdoor.State{Available: front.Available}.TotalAvailable(), "front_held": front.Held,
		"front_door": s.front.Name(), "broker": s.q.Name(), "front_door_rebuilds": c.rebuilds.Load(),
		"e2e_p50_ms": ms(s.e2e.percentile(50)), "e2e_p99_ms": ms(s.e2e.percentile(99)),
		"outbox": st, "consumer_p50_ms": ms(s.lat.percentile(50)), "consumer_p99_ms": ms(s.lat.percentile(99)),
		"clicks_shed": c.shed.Load(), "event_batches": c.eventBatches.Load(), "events_in_batches": c.eventsBatched.Load(), "event_batches_split": c.eventBatchesSplit.Load(),
	}, nil
}

// Metrics serves GET /metrics.
func (s *service) Metrics() http.Handler { return s.tel.metrics }

// Traced serves h in a span continuing each request's trace.
func (s *service) Traced(h http.Handler) http.Handler { return s.tel.traced(h) }

// NewCounter makes a counter on the service's meter.
func (s *service) NewCounter(name, desc string, keys ...string) web.Counter {
	return s.tel.counter(name, desc, keys...)
}

// GuardStore is the HTTP face's memory: the front door's Redis on the real
// stack, a new in-process map with -stack memory; its keys under
// seckill:<schema>:http:.
func (s *service) GuardStore() (guardstore.Store, string) {
	prefix := "seckill:" + s.Schema + ":http:"
	if s.rdb != nil {
		return guardstore.NewRedis(s.rdb), prefix
	}
	return guardstore.NewMemory(), prefix
}

// Logger is the service's log.
func (s *service) Logger() *slog.Logger { return s.log }

// DatabaseUnavailable is databaseUnavailable.
func (s *service) DatabaseUnavailable(err error) bool { return databaseUnavailable(err) }

// Quiet reports whether no order message, outbox event or click is in
// flight.
func (s *service) Quiet(ctx context.Context) bool {
	if s.inFlight.Load() != 0 || s.q.Pending(ctx) != 0 {
		return false
	}
	st, err := s.Outbox.Backlog(ctx, s.Pool)
	return err == nil && st.Pending+st.Sending+st.Retry == 0
}

// ReconcileSettled reconciles; the three stores cannot be read at one
// instant, so an unexplained result is read again, up to three times,
// 100ms apart; a difference that stays is reported.
func (s *service) ReconcileSettled(ctx context.Context) (*reconcile.Result, error) {
	return settled(ctx, s.reconcile)
}

// settled runs run until its result passes, up to three times, 100ms
// apart, and returns the last result.
func settled(ctx context.Context, run func(context.Context) (*reconcile.Result, error)) (rec *reconcile.Result, err error) {
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		if rec, err = run(ctx); err != nil || rec.Passed() {
			break
		}
	}
	return rec, err
}

// FrontAvailable reads the front door's per-bucket stock counters only
// (not the held reservations): one HGETALL on Redis.
func (s *service) FrontAvailable(ctx context.Context) ([]int64, error) {
	if s.rfront == nil {
		st, err := s.front.State(ctx)
		return st.Available, err
	}
	return s.rfront.Available(ctx)
}
