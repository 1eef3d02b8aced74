package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

// A sold-out rejection in one batch, and the timeout release of an order's
// unit in another: the first buyer takes the last unit; the second buyer's
// reservation is recorded REJECTED in one round trip, guarded by the read
// that raises unless the bucket is still sold out; then the first order
// times out and its unit comes back, checked against its ALLOCATE row.
// Once it is back, the same rejection no longer passes its guard.
func ExampleStore_QueueCheckSoldOut() {
	ctx := context.Background()
	db := seckilltest.Example(inventory.Migrations)
	store, err := inventory.New(inventory.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	if _, err := store.Provision(ctx, db.Pool, inventory.SKU{ActivityID: 1, SKUID: 42, Stock: 1, Buckets: 1}); err != nil {
		panic(err)
	}
	reservation := func(userID int64) (inventory.NewReservation, inventory.Allocation) {
		now := time.Now()
		r := inventory.NewReservation{
			Request:    seckill.Request{ReservationID: uuid.Must(uuid.NewV7()), RequestID: uuid.Must(uuid.NewV7()), MessageID: uuid.Must(uuid.NewV7()), ActivityID: 1, SKUID: 42, UserID: userID, Bucket: 0, Quantity: 1},
			ReservedAt: now,
			ExpiresAt:  now.Add(15 * time.Minute),
		}
		return r, inventory.Allocation{
			Request: seckill.Request{ReservationID: r.ReservationID, ActivityID: 1, SKUID: 42, Bucket: 0, Quantity: 1, UserID: userID, MessageID: r.MessageID},
		}
	}
	run := func(queue func(b *pgx.Batch) error) error {
		var b pgx.Batch
		if err := queue(&b); err != nil {
			return err
		}
		return pgtx.RunBatch(ctx, db.Pool, pgtx.Options{}, &b)
	}

	// The first buyer takes the last unit.
	first, firstAlloc := reservation(1)
	first.OrderID, first.Ordered, firstAlloc.OrderID = 101, true, 101
	if err := run(func(b *pgx.Batch) error {
		if err := store.QueueAcquireReservation(b, first, nil, pgtx.Abort); err != nil {
			return err
		}
		return store.QueueAllocateBucket(b, firstAlloc, nil, pgtx.Abort)
	}); err != nil {
		panic(err)
	}

	// The second buyer is rejected in one batch.
	reject := func(r inventory.NewReservation, a inventory.Allocation) error {
		return run(func(b *pgx.Batch) error {
			if err := store.QueueCheckSoldOut(b, a, pgtx.Abort); err != nil {
				return err
			}
			r.FailureCode = "SOLD_OUT"
			return store.QueueAcquireReservation(b, r, nil, pgtx.Abort)
		})
	}
	second, secondAlloc := reservation(2)
	if err := reject(second, secondAlloc); err != nil {
		panic(err)
	}
	got, err := store.GetReservation(ctx, db.Pool, second.ReservationID)
	if err != nil {
		panic(err)
	}
	fmt.Println("second buyer:", got.Status, got.FailureCode)

	// The first order times out: its unit comes back.
	var back inventory.Allocated
	firstAlloc.Reason = "PAY_TIMEOUT"
	if err := run(func(b *pgx.Batch) error {
		return store.QueueReleaseStock(b, inventory.StockRelease{Request: (firstAlloc).Request, Reason: (firstAlloc).Reason}, &back, pgtx.Abort)
	}); err != nil {
		panic(err)
	}
	fmt.Printf("released: available %d → %d\n", back.BeforeAvailable, back.AfterAvailable)

	// Now a rejection as sold out would be wrong: its guard raises.
	third, thirdAlloc := reservation(3)
	err = reject(third, thirdAlloc)
	fmt.Println("third buyer rejected as sold out:", err == nil, "| guard raised:", errors.Is(err, inventory.ErrNotSoldOut))
	// Output:
	// second buyer: REJECTED SOLD_OUT
	// released: available 0 → 1
	// third buyer rejected as sold out: false | guard raised: true
}
