package web

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/frontdoor"
	"github.com/seckillkit/seckill/examples/seckill/guardstore"
	"github.com/seckillkit/seckill/examples/seckill/reconcile"
	"github.com/seckillkit/seckill/order"
)

// Service is what the HTTP face asks of the service behind it.
type Service interface {
	// Flow is the order flow: its stores, pool and the item on sale.
	Flow() *flow.Service
	// FrontDoor and Broker are the sale's front door and order queue.
	FrontDoor() frontdoor.Door
	Broker() broker.Broker
	// Click is a buyer pressing "buy": the front door reserves or refuses
	// and a reservation becomes an order message (frontdoor.ErrSoldOut,
	// ErrAlreadyBought, ErrSaleClosed, ErrDown; broker.ErrBusy).
	Click(ctx context.Context, buyer int64) (frontdoor.Reservation, error)
	// RecordPayment records a payment callback (flow.Service.Pay) and
	// counts what it came to.
	RecordPayment(ctx context.Context, p flow.Payment) (order.PaymentResult, error)
	// AuditNow checks every invariant in one snapshot; live: the checks
	// exact only at rest that work in flight leaves unsettled are skipped.
	AuditNow(ctx context.Context, live bool) ([]flow.Check, error)
	// ReconcileSettled reconciles the front door, PostgreSQL and the
	// streams, reading again while a difference may be work in flight.
	ReconcileSettled(ctx context.Context) (*reconcile.Result, error)
	// ReconcileRecent is the reconciliation the page runs during the
	// sale: the orders created since its last passing run, and the same
	// span one order time to live earlier, with the stores' counters
	// (reconcile.RunWindow); its cost does not grow with the sale.
	ReconcileRecent(ctx context.Context) (*reconcile.Result, error)
	// Quiet reports whether no click, order message or outbox event is
	// in flight.
	Quiet(ctx context.Context) bool
	// FrontAvailable reads the front door's available units per bucket.
	FrontAvailable(ctx context.Context) ([]int64, error)
	// Figures are the counters the page shows.
	Figures() Figures
	// OrderLatencies returns the order transaction durations recorded from
	// index from on, and the next index.
	OrderLatencies(from int) ([]time.Duration, int)
	// Stats is GET /stats' answer; an error wrapping [ErrUnavailable] is
	// answered 503.
	Stats(ctx context.Context) (any, error)
	// Metrics serves GET /metrics.
	Metrics() http.Handler
	// Traced serves h in a span continuing each request's trace.
	Traced(h http.Handler) http.Handler
	// NewCounter makes a counter at GET /metrics, its attributes named by
	// keys (the call passes the values in the same order).
	NewCounter(name, desc string, keys ...string) Counter
	// GuardStore is where the face remembers signatures, rate windows and
	// idempotency records, with the prefix of its keys.
	GuardStore() (store guardstore.Store, prefix string)
	// Logger is the face's log (500 answers' error ids, store failures).
	Logger() *slog.Logger
	// Shed reports whether POST /orders refuses this click at once, busy
	// (the queue was full a moment ago), before the guard and Click.
	Shed() bool
	// DatabaseUnavailable reports whether err says the database could not
	// be reached (answered 503 with Retry-After, not 500).
	DatabaseUnavailable(err error) bool
}

// Counter counts what the face refused.
type Counter interface {
	Inc(n int64, values ...string)
}

// Figures are the service's counters, counted after their transactions
// committed.
type Figures struct {
	Orders, Paid, Cancelled, Refunded int64
}

// ErrUnavailable marks a failure of a store the face cannot do without
// (the front door): answered 503 with Retry-After.
var ErrUnavailable = errors.New("unavailable")
