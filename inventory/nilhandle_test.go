package inventory_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/inventory"
)

// Every method that takes a transaction or connection rejects a nil one
// with a typed error instead of panicking.
func TestNilHandleIsATypedError(t *testing.T) {
	t.Parallel()
	s, err := inventory.New(inventory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := uuid.New()
	calls := map[string]func() error{
		"AllocateBucket": func() error { _, err := s.AllocateBucket(ctx, nil, inventory.Allocation{}); return err },
		"Release":        func() error { _, err := s.ReleaseStock(ctx, nil, inventory.StockRelease{}); return err },
		"Audit":          func() error { _, err := s.Audit(ctx, nil, 1, 1); return err },
		"AuditAll":       func() error { _, err := s.Audit(ctx, nil, 0, 0); return err },
		"ReservationLedger": func() error {
			_, err := s.ReservationLedger(ctx, nil, id)
			return err
		},
		"GetBucket":          func() error { _, err := s.GetBucket(ctx, nil, 1, 1, 0); return err },
		"Buckets":            func() error { _, err := inventory.BucketsOf(s, ctx, nil, 1, 1); return err },
		"SKUTotals":          func() error { _, err := s.Stock(ctx, nil, 1, 1); return err },
		"Provision":          func() error { _, err := s.Provision(ctx, nil, inventory.SKU{}); return err },
		"Rebalance":          func() error { _, err := s.Rebalance(ctx, nil, inventory.RebalanceRequest{}); return err },
		"AcquireReservation": func() error { _, err := s.AcquireReservation(ctx, nil, inventory.NewReservation{}); return err },
		"GetReservation":     func() error { _, err := s.GetReservation(ctx, nil, id); return err },
		"SetSaleStatus":      func() error { _, err := s.SetSaleStatus(ctx, nil, inventory.SaleChange{}); return err },
		"SaleLog":            func() error { _, err := s.SaleLog(ctx, nil, 1, 1); return err },
		"ExpireReservations": func() error { _, err := s.ExpireReservations(ctx, nil, 1); return err },
		"RecordCompensationFailure": func() error {
			_, err := s.RecordCompensationFailure(ctx, nil, inventory.CompensationFailure{})
			return err
		},
		"AdjustStock":  func() error { _, err := s.AdjustStock(ctx, nil, inventory.Adjustment{}); return err },
		"Adjustments":  func() error { _, err := s.Adjustments(ctx, nil, 1, 1); return err },
		"LedgerByType": func() error { _, err := s.LedgerByType(ctx, nil, 1, 1); return err },
		"TransitionReservation": func() error {
			_, err := s.TransitionReservation(ctx, nil, inventory.Transition{})
			return err
		},
	}
	for name, call := range calls {
		var ve *inventory.Error
		if err := call(); !errors.Is(err, inventory.ErrInvalidArgument) || !errors.As(err, &ve) || (ve.Field != "tx" && ve.Field != "db" && ve.Field != "q") {
			t.Errorf("%s(nil): %v", name, err)
		}
	}
}
