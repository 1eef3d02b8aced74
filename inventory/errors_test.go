package inventory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/inventory"
)

// TestErrorText: every refusal's text names the SKU, bucket, reservation,
// states, window or figures it is about, and the error matches its
// sentinel (and its driver error, when there is one).
func TestErrorText(t *testing.T) {
	t.Parallel()
	res := uuid.UUID{15: 1}
	other := inventory.Reservation{ReservationID: uuid.UUID{15: 2}, RequestID: uuid.UUID{15: 3}, OrderID: 9}
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	end := start.Add(time.Hour)
	cause := errors.New("ERROR: duplicate key (SQLSTATE 23505)")
	for _, c := range []struct {
		err  *inventory.Error
		want string
	}{
		{&inventory.Error{Err: inventory.ErrInvalidArgument, Field: "Allocation.Quantity", Reason: "must be >= 1"},
			"inventory: invalid Allocation.Quantity: must be >= 1"},
		{&inventory.Error{Err: inventory.ErrSoldOut, ActivityID: 1, SKUID: 2, Bucket: 3, Available: 0, Requested: 1},
			"inventory: sold out: activity 1 sku 2 bucket 3 has 0 available, 1 requested"},
		{&inventory.Error{Err: inventory.ErrAlreadyApplied, Key: "ALLOCATE:x", LedgerID: 42},
			"inventory: already applied: ALLOCATE:x (ledger 42)"},
		{&inventory.Error{Err: inventory.ErrAlreadyApplied, Key: "ALLOCATE:x", TxAborted: true, Cause: cause},
			"inventory: already applied: ALLOCATE:x (concurrent duplicate, transaction aborted): " + cause.Error()},
		{&inventory.Error{Err: inventory.ErrAllocationMismatch, ReservationID: res, Field: "bucket", Found: "3", Asked: "4"},
			"inventory: allocation for reservation " + res.String() + ": bucket is 3 in the reservation, 4 in the allocation"},
		{&inventory.Error{Err: inventory.ErrProvisionConflict, ActivityID: 1, SKUID: 2, ExistingStock: 100, ExistingBuckets: 4, RequestedStock: 200, RequestedBuckets: 8},
			"inventory: activity 1 sku 2 is provisioned with stock 100 in 4 buckets, not stock 200 in 8 buckets"},
		{&inventory.Error{Err: inventory.ErrReservationConflict, ReservationID: res, Field: "request_id", Reservation: other},
			"inventory: reservation " + res.String() + ": request id " + other.RequestID.String() + " already belongs to reservation " + other.ReservationID.String()},
		{&inventory.Error{Err: inventory.ErrReservationConflict, ReservationID: res, Field: "order_id", Reservation: other},
			"inventory: reservation " + res.String() + ": order id 9 already belongs to reservation " + other.ReservationID.String()},
		{&inventory.Error{Err: inventory.ErrReservationConflict, ReservationID: res, Field: "bucket"},
			"inventory: reservation " + res.String() + " exists with a different bucket"},
		{&inventory.Error{Err: inventory.ErrAlreadyInState, ReservationID: res, Target: inventory.StatusOrdered},
			"inventory: reservation " + res.String() + " already " + inventory.StatusOrdered.String()},
		{&inventory.Error{Err: inventory.ErrIllegalTransition, ReservationID: res, Current: inventory.StatusReleased, Target: inventory.StatusOrdered},
			"inventory: reservation " + res.String() + ": illegal transition " + inventory.StatusReleased.String() + " -> " + inventory.StatusOrdered.String()},
		{&inventory.Error{Err: inventory.ErrIllegalTransition, ActivityID: 1, SKUID: 2, From: inventory.SaleEnded, To: inventory.SaleOnSale},
			"inventory: activity 1 sku 2: illegal sale change " + inventory.SaleEnded.String() + " -> " + inventory.SaleOnSale.String()},
		{&inventory.Error{Err: inventory.ErrNotOnSale, ActivityID: 1, SKUID: 2, Status: inventory.SaleOnSale, StartsAt: start, EndsAt: end, At: start.Add(-time.Second)},
			"inventory: activity 1 sku 2 not on sale: sale starts at 2026-12-01T10:00:00Z"},
		{&inventory.Error{Err: inventory.ErrNotOnSale, ActivityID: 1, SKUID: 2, Status: inventory.SaleOnSale, StartsAt: start, EndsAt: end, At: end},
			"inventory: activity 1 sku 2 not on sale: sale ended at 2026-12-01T11:00:00Z"},
		{&inventory.Error{Err: inventory.ErrNotOnSale, ActivityID: 1, SKUID: 2, Status: inventory.SalePaused},
			"inventory: activity 1 sku 2 not on sale: " + inventory.SalePaused.String()},
		{&inventory.Error{Err: inventory.ErrUnknownSKU}, inventory.ErrUnknownSKU.Error()},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
		if !errors.Is(c.err, c.err.Err) {
			t.Errorf("%v does not match its sentinel %v", c.err, c.err.Err)
		}
		if c.err.Cause != nil && !errors.Is(c.err, c.err.Cause) {
			t.Errorf("%v does not match its driver error", c.err)
		}
	}
}
