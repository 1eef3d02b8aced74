package inventory_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inventory"
)

// TestLedgerByType: the ledger's rows and units per type, for one SKU and
// for every SKU of an activity, beside another activity's SKU of the same
// id: an ALLOCATE counts the units allocated, a RELEASE the units given
// back, an ADJUST and a PROVISION the net change of the total; a type
// without rows is absent.
func TestLedgerByType(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 2, 1, 8, 1) // the other activity first: a read that lost its filter meets it
	tb.provision(t, 1, 1, 10, 2)
	tb.provision(t, 1, 2, 6, 1)
	buy := func(activity, sku int64, bucket, qty int16) inventory.NewReservation {
		t.Helper()
		r := tb.newReservation(activity, sku, bucket)
		r.Quantity = qty
		if err := tb.buy(tb.ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	buy(2, 1, 0, 3)
	r := buy(1, 1, 0, 2)
	buy(1, 1, 1, 1)
	if _, err := tb.releaseIn(r.ReservationID); err != nil {
		t.Fatal(err)
	}
	for i, d := range []int32{3, -1} {
		if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.AdjustStock(tb.ctx, tx, inventory.Adjustment{ActivityID: 1, SKUID: 1, Bucket: int16(i), Delta: d,
				Operator: "ops", ApprovalRef: "T-" + string(rune('A'+i)), Reason: "RECOUNT"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	buy(1, 2, 0, 1)
	sku1 := []inventory.TypeQuantity{
		{ActivityID: 1, SKUID: 1, Type: "ALLOCATE", Rows: 2, Quantity: 3, AvailableDelta: -3, AllocatedDelta: 3},
		{ActivityID: 1, SKUID: 1, Type: "RELEASE", Rows: 1, Quantity: 2, AvailableDelta: 2, AllocatedDelta: -2},
		{ActivityID: 1, SKUID: 1, Type: "ADJUST", Rows: 2, Quantity: 2, AvailableDelta: 2, TotalDelta: 2},
		{ActivityID: 1, SKUID: 1, Type: "PROVISION", Rows: 2, Quantity: 10, AvailableDelta: 10, TotalDelta: 10},
	}
	sku2 := []inventory.TypeQuantity{
		{ActivityID: 1, SKUID: 2, Type: "ALLOCATE", Rows: 1, Quantity: 1, AvailableDelta: -1, AllocatedDelta: 1},
		{ActivityID: 1, SKUID: 2, Type: "PROVISION", Rows: 1, Quantity: 6, AvailableDelta: 6, TotalDelta: 6},
	}
	for _, c := range []struct {
		sku  int64
		want []inventory.TypeQuantity
	}{{1, sku1}, {2, sku2}, {0, slices.Concat(sku1, sku2)}, {3, nil}} {
		got, err := tb.store.LedgerByType(tb.ctx, tb.pool, 1, c.sku)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("LedgerByType(1, %d) = %+v, %v\nwant %+v", c.sku, got, err, c.want)
		}
	}
	for _, bad := range [][2]int64{{0, 0}, {-1, 1}, {1, -1}} {
		if _, err := tb.store.LedgerByType(tb.ctx, tb.pool, bad[0], bad[1]); !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Errorf("LedgerByType(%d, %d): %v, want ErrInvalidArgument", bad[0], bad[1], err)
		}
	}
}
