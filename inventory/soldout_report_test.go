package inventory_test

import (
	"errors"
	"testing"

	"github.com/seckillkit/seckill/inventory"
)

// TestSoldOutReportsItsOwnFreeStock: an allocation of more units than its
// SKU has free is refused as sold out with the free stock of its own
// bucket (on tokens, its SKU's free tokens), on buckets and tokens, with
// the plain and the Citus statements, the direct and the queued forms:
// not another SKU's of the activity, nor the same SKU id's of another
// activity, which have more free, and not counting the units other buyers
// hold.
func TestSoldOutReportsItsOwnFreeStock(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 2, 20, 5, 1)
		tb.provision(t, 2, 21, 7, 1)
		tb.provision(t, 3, 20, 9, 1)
		for range 2 { // two units of SKU 20 held by other buyers
			if _, err := tb.allocateIn(t, tb.newReservation(2, 20, 0)); err != nil {
				t.Fatal(err)
			}
		}
		for _, form := range []string{"AllocateBucket", "QueueAllocateBucket/Return"} {
			r := tb.newReservation(2, 20, 0)
			r.Quantity = 4
			var err error
			if form == "AllocateBucket" {
				_, err = tb.allocateIn(t, r)
			} else {
				tb.insertReservations(t, []inventory.NewReservation{r})
				err = tb.allocateOnly(allocationOf(r, tb.ids.Add(1)))
			}
			var e *inventory.Error
			if !errors.As(err, &e) || !errors.Is(err, inventory.ErrSoldOut) || e.Available != 3 || e.Requested != 4 {
				t.Fatalf("%s: 4 units of a SKU with 3 free: %v (%+v), want sold out with 3 available", form, err, e)
			}
		}
		if tot := tb.totals(t, 2, 20); tot.Allocated != 2 || tot.Available != 3 {
			t.Fatalf("SKU 2/20 after the refusals: %+v", tot)
		}
	})
}
