package order_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/seckillkit/seckill/order"
)

// TestQuantitiesByStatus: the orders of one activity per SKU and status,
// of every SKU or of one; another activity's orders are not counted.
func TestQuantitiesByStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	two := newOrder(2)
	two.UnitPrice = 5000 // quantity is always 1
	b.create(t, newOrder(1))
	b.create(t, two)
	cancelled := b.create(t, newOrder(3))
	if _, err := b.transition(userCancel(cancelled.OrderID)); err != nil {
		t.Fatal(err)
	}
	otherSKU := newOrder(1)
	otherSKU.SKUID = 101
	paid := b.create(t, otherSKU)
	if res, err := b.pay(newPayment(paid)); err != nil || res.Kind != order.PaymentPaid {
		t.Fatal(res, err)
	}
	otherActivity := newOrder(1)
	otherActivity.ActivityID = 2
	b.create(t, otherActivity)

	created100 := order.StatusQuantity{ActivityID: 1, SKUID: 100, Status: order.StatusCreated, Orders: 2, Quantity: 2, Amount: 9900 + 5000}
	cancelled100 := order.StatusQuantity{ActivityID: 1, SKUID: 100, Status: order.StatusCancelled, Orders: 1, Quantity: 1, Amount: 9900}
	paid101 := order.StatusQuantity{ActivityID: 1, SKUID: 101, Status: order.StatusPaid, Orders: 1, Quantity: 1, Amount: 9900}
	for _, c := range []struct {
		activity, sku int64
		want          []order.StatusQuantity
	}{
		{1, 0, []order.StatusQuantity{created100, cancelled100, paid101}},
		{1, 100, []order.StatusQuantity{created100, cancelled100}},
		{1, 101, []order.StatusQuantity{paid101}},
		{2, 0, []order.StatusQuantity{{ActivityID: 2, SKUID: 100, Status: order.StatusCreated, Orders: 1, Quantity: 1, Amount: 9900}}},
		{3, 0, nil},
		{1, 102, nil},
	} {
		got, err := b.store.QuantitiesByStatus(b.ctx, b.pool, c.activity, c.sku)
		if err != nil || !slices.Equal(got, c.want) {
			t.Fatalf("QuantitiesByStatus(%d, %d) = %+v, %v; want %+v", c.activity, c.sku, got, err, c.want)
		}
	}
	// No activity 0 or below, no SKU below 0 (0 is every SKU).
	for _, c := range [][2]int64{{0, 0}, {-1, 0}, {1, -1}} {
		if _, err := b.store.QuantitiesByStatus(b.ctx, b.pool, c[0], c[1]); !errors.Is(err, order.ErrInvalidArgument) {
			t.Fatalf("QuantitiesByStatus(%d, %d) = %v, want ErrInvalidArgument", c[0], c[1], err)
		}
	}
}
