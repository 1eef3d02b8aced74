package order_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/order"
)

// TestErrorText: every refusal's text names the order, the states, the ids
// or the figures it is about, and the error matches its sentinel.
func TestErrorText(t *testing.T) {
	t.Parallel()
	buyer := order.Order{Request: seckill.Request{OrderID: 7, ActivityID: 1, SKUID: 2, UserID: 3}, Status: order.StatusPaid,
		Currency: "EUR", TotalAmount: 1999, ExpireAt: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	for _, c := range []struct {
		err  *order.Error
		want string
	}{
		{&order.Error{Err: order.ErrInvalidArgument, Field: "NewOrder.OrderID", Reason: "must be > 0"},
			"order: invalid NewOrder.OrderID: must be > 0"},
		{&order.Error{Err: order.ErrNotFound, OrderID: 7}, "order: order 7 not found"},
		{&order.Error{Err: order.ErrUserAlreadyOrdered, Order: buyer},
			"order: user 3 already ordered sku 2 in activity 1 (order 7, " + order.StatusPaid.String() + ")"},
		{&order.Error{Err: order.ErrIDCollision, Field: "order_no", Value: "SO-7"}, "order: order_no SO-7 already used by another row"},
		{&order.Error{Err: order.ErrModel, OrderID: 7, Reason: "paid_at without PAID"}, "order: model error on order 7: paid_at without PAID"},
		{&order.Error{Err: order.ErrModel, Reason: "no row"}, "order: model error: no row"},
		{&order.Error{Err: order.ErrIllegalTransition, OrderID: 7, From: order.StatusPaid, To: order.StatusCancelled},
			"order: order 7 cannot go from " + order.StatusPaid.String() + " to " + order.StatusCancelled.String()},
		{&order.Error{Err: order.ErrNotExpired, OrderID: 7, From: order.StatusCreated, Order: buyer},
			"order: order 7 (" + order.StatusCreated.String() + ") does not expire before 2026-12-01T10:00:00Z"},
		{&order.Error{Err: order.ErrMismatch, OrderID: 7, Field: "amount", Value: "1000", Order: buyer},
			"order: payment amount 1000 does not match order 7 (1999)"},
		{&order.Error{Err: order.ErrMismatch, OrderID: 7, Field: "currency", Value: "USD", Order: buyer},
			"order: payment currency USD does not match order 7 (EUR)"},
		{&order.Error{Op: "QueueCreate", Err: order.ErrConflict, OrderID: 7},
			"order: QueueCreate for order 7 conflicted with an existing row; the direct form (Create, RecordPayment) in the same transaction classifies it"},
		{&order.Error{Op: "ResolvePaymentReview", Err: order.ErrReviewResolved}, "order: ResolvePaymentReview: " + order.ErrReviewResolved.Error()},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
		if !errors.Is(c.err, c.err.Err) {
			t.Errorf("%v does not match its sentinel %v", c.err, c.err.Err)
		}
	}
}
