package order

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/pgtx"
)

// Test hooks into unexported state.

// DueForExpirySQL returns the statement DueForExpiry runs.
func (s *Store) DueForExpirySQL() string { return s.sql.dueForExpiry }

// CancelExpiredSQL returns the statement CancelExpired runs.
func (s *Store) CancelExpiredSQL() string { return s.sql.cancelExpired }

// DueForExpiry is the unexported dueForExpiry: the expiry sweep's locking
// read without the cancel.
func (s *Store) DueForExpiry(ctx context.Context, tx pgx.Tx, limit int) ([]Order, error) {
	return s.dueForExpiry(ctx, tx, limit)
}

// ClassifyConflict is Create's conflict classification of in on its own.
func (s *Store) ClassifyConflict(ctx context.Context, q pgtx.Querier, in NewOrder) (_ Result, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return Result{}, nilHandle("q")
	}
	in, err = s.normalize(in)
	if err != nil {
		return Result{}, err
	}
	return s.classifyCreate(ctx, q, in)
}

// ClassifyPaymentConflict is RecordPayment's conflict classification of p
// on its own.
func (s *Store) ClassifyPaymentConflict(ctx context.Context, q pgtx.Querier, p Payment) (_ PaymentResult, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return PaymentResult{}, nilHandle("q")
	}
	p, err = s.normalizePayment(p)
	if err != nil {
		return PaymentResult{}, err
	}
	o, err := s.get(ctx, q, "RecordPayment", seckill.Request{OrderID: p.OrderID})
	if err != nil {
		return PaymentResult{}, err
	}
	return s.classifyPayment(ctx, q, p, o)
}

// Items returns the item lines of an order.
func (s *Store) Items(ctx context.Context, q pgtx.Querier, orderID int64) ([]item, error) {
	return s.items(ctx, q, orderID)
}

// Statuses returns every order status in ascending order.
func Statuses() []Status { return statusSet.Values() }

// PaymentStatuses returns every payment status in ascending order.
func PaymentStatuses() []PaymentStatus { return paymentStatusSet.Values() }

// PaymentStatusName is the name of a payment status, e.g. "SUCCEEDED".
func PaymentStatusName(s PaymentStatus) string { return paymentStatusSet.Name(s) }

// Valid reports whether s is one of the order statuses.
func (s Status) Valid() bool { return s.valid() }

// AllowedFrom returns the statuses from which an order may move to to.
func AllowedFrom(to Status) []Status { return transitions.AllowedFrom(to) }

// CanTransition reports whether the transition table allows from → to.
func CanTransition(from, to Status) bool { return transitions.Can(from, to) }

// ReviewReasonOf is the review reason RecordPaymentReview picks.
func ReviewReasonOf(res PaymentResult, err error) (string, bool) { return reviewReasonOf(res, err) }

// Schema returns the schema the Store works in.
func (s *Store) Schema() string { return s.schema }
