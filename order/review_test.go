package order_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/order"
)

// TestPaymentReviews: a review is keyed by provider, trade number and
// reason (a redelivery returns its own row, not one sharing two of the
// three); open reviews are listed oldest first up to the limit; a
// resolution is returned resolved, and so is the row a redelivery or a
// second resolution finds.
func TestPaymentReviews(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.create(t, newOrder(1))
	p := newPayment(o)
	otherProvider, otherTrade := p, p
	otherProvider.Provider = "wechat"
	otherTrade.ProviderTradeNo = "T-other"
	amount := order.ErrMismatch
	currency := &order.Error{Op: "RecordPayment", Err: order.ErrMismatch, OrderID: o.OrderID, Field: "currency"}
	cases := []struct {
		p      order.Payment
		cause  error
		reason string
	}{
		{p, amount, "AMOUNT_MISMATCH"},
		{otherProvider, amount, "AMOUNT_MISMATCH"},
		{otherTrade, amount, "AMOUNT_MISMATCH"},
		{p, currency, "CURRENCY_MISMATCH"},
	}
	record := func(i int) (order.PaymentReview, bool) {
		t.Helper()
		c := cases[i]
		r, created, err := b.store.RecordPaymentReview(b.ctx, b.pool, c.p, order.PaymentResult{}, c.cause)
		if err != nil || r.Provider != c.p.Provider || r.ProviderTradeNo != c.p.ProviderTradeNo || r.Reason != c.reason ||
			r.OrderID != o.OrderID || r.Amount != c.p.Amount {
			t.Fatalf("review %d: %+v, %v", i, r, err)
		}
		return r, created
	}
	ids := make([]int64, len(cases))
	for i := range cases {
		r, created := record(i)
		if !created || r.Resolved || r.Resolution != "" || !r.ResolvedAt.IsZero() {
			t.Fatalf("new review %d: %+v, created %v; want a new open review", i, r, created)
		}
		ids[i] = r.ReviewID
	}
	for i := range cases {
		if r, created := record(i); created || r.ReviewID != ids[i] || r.Resolved {
			t.Fatalf("redelivered review %d: %+v, created %v; want the open review %d", i, r, created, ids[i])
		}
	}
	open := func(limit int, want ...int64) {
		t.Helper()
		got, err := b.store.OpenPaymentReviews(b.ctx, b.pool, limit)
		var gotIDs []int64
		for _, r := range got {
			if r.Resolved {
				t.Fatalf("open review listed resolved: %+v", r)
			}
			gotIDs = append(gotIDs, r.ReviewID)
		}
		if err != nil || !slices.Equal(gotIDs, want) {
			t.Fatalf("OpenPaymentReviews(%d) = %v, %v; want %v", limit, gotIDs, err, want)
		}
	}
	open(10, ids...)

	r, err := b.store.ResolvePaymentReview(b.ctx, b.pool, ids[1], "refunded manually", "ops")
	if err != nil || r.ReviewID != ids[1] || !r.Resolved || r.Resolution != "refunded manually" || r.ResolvedBy != "ops" || r.ResolvedAt.IsZero() {
		t.Fatalf("resolve: %+v, %v", r, err)
	}
	again, err := b.store.ResolvePaymentReview(b.ctx, b.pool, ids[1], "other", "someone")
	if !errors.Is(err, order.ErrReviewResolved) || again.ReviewID != ids[1] || !again.Resolved || again.Resolution != "refunded manually" ||
		again.ResolvedBy != "ops" || !again.ResolvedAt.Equal(r.ResolvedAt) {
		t.Fatalf("resolve again: %+v, %v; want ErrReviewResolved with the first resolution", again, err)
	}
	if red, created := record(1); created || red.ReviewID != ids[1] || !red.Resolved || red.Resolution != "refunded manually" {
		t.Fatalf("redelivery of a resolved review: %+v, created %v", red, created)
	}
	if _, err := b.store.ResolvePaymentReview(b.ctx, b.pool, ids[3]+1000, "x", "y"); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("resolve unknown review: %v", err)
	}
	open(10, ids[0], ids[2], ids[3])
	open(2, ids[0], ids[2])
}

// TestReviewAndCurrencyEdges: the inclusive bounds of OpenPaymentReviews'
// limit (1 and 10,000), a review without a raw payload stored as {}, an
// amount mismatch raised by the pgtx.Abort form (SK104) reviewed as an
// amount mismatch, and currency codes of the letters at both ends (A, Z).
func TestReviewAndCurrencyEdges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, limit := range []int{1, 10000} {
		if _, err := b.store.OpenPaymentReviews(b.ctx, b.pool, limit); err != nil {
			t.Errorf("OpenPaymentReviews(%d) = %v", limit, err)
		}
	}
	for _, limit := range []int{0, 10001} {
		if _, err := b.store.OpenPaymentReviews(b.ctx, b.pool, limit); !errors.Is(err, order.ErrInvalidArgument) {
			t.Errorf("OpenPaymentReviews(%d) = %v, want ErrInvalidArgument", limit, err)
		}
	}
	o := b.create(t, newOrder(1))
	p := newPayment(o)
	p.RawPayload = nil
	p.Amount++
	sk104 := fmt.Errorf("%w: %w", order.ErrMismatch, &pgconn.PgError{Code: "SK104", Message: "amount"})
	r, created, err := b.store.RecordPaymentReview(b.ctx, b.pool, p, order.PaymentResult{}, sk104)
	if err != nil || !created || r.Reason != "AMOUNT_MISMATCH" || string(r.RawPayload) != "{}" {
		t.Fatalf("review of an SK104 mismatch without payload: %+v, %v; want AMOUNT_MISMATCH with {}", r, err)
	}
	for _, c := range []string{"AZZ", "ZAA"} {
		if _, err := order.New(order.Config{Schema: b.schema, DefaultCurrency: c}); err != nil {
			t.Errorf("DefaultCurrency %q: %v", c, err)
		}
	}
	for _, c := range []string{"@AA", "[AA", "AA`", "AA{"} {
		if _, err := order.New(order.Config{Schema: b.schema, DefaultCurrency: c}); err == nil {
			t.Errorf("DefaultCurrency %q accepted", c)
		}
	}
}
