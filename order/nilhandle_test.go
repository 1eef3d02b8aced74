package order_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/order"
)

// Every method that takes a transaction or connection rejects a nil one
// with a typed error instead of panicking.
func TestNilHandleIsATypedError(t *testing.T) {
	t.Parallel()
	s, err := order.New(order.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	calls := map[string]func() error{
		"Audit":            func() error { _, err := s.Audit(ctx, nil); return err },
		"Create":           func() error { _, err := s.Create(ctx, nil, order.NewOrder{}); return err },
		"ClassifyConflict": func() error { _, err := s.ClassifyConflict(ctx, nil, order.NewOrder{}); return err },
		"DueForExpiry":     func() error { _, err := s.DueForExpiry(ctx, nil, 1); return err },
		"CancelExpired":    func() error { _, err := s.CancelExpired(ctx, nil, 1); return err },
		"RecordPayment":    func() error { _, err := s.RecordPayment(ctx, nil, order.Payment{}); return err },
		"ClassifyPayment":  func() error { _, err := s.ClassifyPaymentConflict(ctx, nil, order.Payment{}); return err },
		"Get":              func() error { _, err := s.Get(ctx, nil, seckill.Request{OrderID: 1}); return err },
		"Get/request":      func() error { _, err := s.Get(ctx, nil, seckill.Request{RequestID: uuid.New()}); return err },
		"Get/buyer": func() error {
			_, err := s.Get(ctx, nil, seckill.Request{ActivityID: 1, SKUID: 1, UserID: 1})
			return err
		},
		"Items":    func() error { _, err := s.Items(ctx, nil, 1); return err },
		"Payments": func() error { _, err := s.Payments(ctx, nil, 1); return err },
		"RecordPaymentReview": func() error {
			_, _, err := s.RecordPaymentReview(ctx, nil, order.Payment{}, order.PaymentResult{}, order.ErrNotFound)
			return err
		},
		"OpenPaymentReviews":   func() error { _, err := s.OpenPaymentReviews(ctx, nil, 1); return err },
		"ResolvePaymentReview": func() error { _, err := s.ResolvePaymentReview(ctx, nil, 1, "x", "y"); return err },
		"QuantitiesByStatus":   func() error { _, err := s.QuantitiesByStatus(ctx, nil, 1, 1); return err },
		"TransitionOrder":      func() error { _, err := s.TransitionOrder(ctx, nil, order.Transition{}); return err },
	}
	for name, call := range calls {
		var ve *order.Error
		if err := call(); !errors.Is(err, order.ErrInvalidArgument) || !errors.As(err, &ve) || (ve.Field != "tx" && ve.Field != "db" && ve.Field != "q") {
			t.Errorf("%s(nil): %v", name, err)
		}
	}
}
