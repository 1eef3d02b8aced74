package flow_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/order"
)

// Payment callbacks that match nothing are kept for review with their raw
// payload, once however often they are redelivered, and an operator lists
// and resolves them (once).
func TestUnmatchedPaymentsKeptForReview(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 10, 1)
	m := b.msg(1, 0)
	if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, m)); err != nil || out.Code != flow.CodeOrderCreated {
		t.Fatalf("order: %+v, %v", out, err)
	}
	calls := []struct {
		p       flow.Payment
		wantErr error
		reason  string
	}{
		{flow.Payment{OrderID: 424242, ProviderTradeNo: "U1", Amount: 1, Currency: "CNY"}, order.ErrNotFound, "UNKNOWN_ORDER"},
		{flow.Payment{OrderID: m.OrderID, ProviderTradeNo: "A1", Amount: m.UnitPrice + 1, Currency: "CNY"}, order.ErrMismatch, "AMOUNT_MISMATCH"},
		{flow.Payment{OrderID: m.OrderID, ProviderTradeNo: "C1", Amount: m.UnitPrice, Currency: "USD"}, order.ErrMismatch, "CURRENCY_MISMATCH"},
		{flow.Payment{OrderID: m.OrderID, ProviderTradeNo: "P1", Amount: m.UnitPrice, Currency: "CNY"}, nil, ""},
		{flow.Payment{OrderID: m.OrderID, ProviderTradeNo: "P2", Amount: m.UnitPrice, Currency: "CNY"}, nil, "SECOND_TRADE"},
	}
	for round := range 2 { // the second round is the provider redelivering every callback
		for i, c := range calls {
			_, err := b.s.Pay(b.ctx, c.p)
			if (c.wantErr == nil) != (err == nil) || (c.wantErr != nil && !errors.Is(err, c.wantErr)) {
				t.Fatalf("round %d call %d: %v, want %v", round, i, err, c.wantErr)
			}
		}
	}
	open, err := b.s.Orders.OpenPaymentReviews(b.ctx, b.pool, 100)
	if err != nil || len(open) != 4 {
		t.Fatalf("open reviews %+v, %v; want 4", open, err)
	}
	got := map[string]order.PaymentReview{}
	for _, r := range open {
		got[r.Reason] = r
	}
	for _, c := range calls {
		if c.reason == "" {
			continue
		}
		r, ok := got[c.reason]
		if !ok || r.ProviderTradeNo != c.p.ProviderTradeNo || r.OrderID != c.p.OrderID || r.Amount != c.p.Amount ||
			len(r.RawPayload) == 0 || r.Resolved {
			t.Errorf("review %s: %+v", c.reason, r)
		}
	}
	r := got["UNKNOWN_ORDER"]
	res, err := b.s.Orders.ResolvePaymentReview(b.ctx, b.pool, r.ReviewID, "refunded by hand, ticket 9", "ops:dan")
	if err != nil || !res.Resolved || res.ResolvedBy != "ops:dan" || res.ResolvedAt.IsZero() {
		t.Fatalf("resolve: %+v, %v", res, err)
	}
	if _, err := b.s.Orders.ResolvePaymentReview(b.ctx, b.pool, r.ReviewID, "again", "ops:eve"); !errors.Is(err, order.ErrReviewResolved) {
		t.Fatalf("second resolve: %v", err)
	}
	if _, err := b.s.Orders.ResolvePaymentReview(b.ctx, b.pool, 999999, "x", "y"); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("unknown review: %v", err)
	}
	if open, err := b.s.Orders.OpenPaymentReviews(b.ctx, b.pool, 100); err != nil || len(open) != 3 {
		t.Fatalf("open after resolving one: %d, %v", len(open), err)
	}
}
