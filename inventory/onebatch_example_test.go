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

// The inventory half of a fresh order in one round trip: BEGIN, the
// reservation inserted as ORDERED, the allocation and COMMIT in one batch.
// The last unit goes to the first buyer; for the second, the decrement
// raises and nothing of the batch commits: the caller would now run its
// general transaction (AcquireReservation, AllocateBucket, ...) to reject
// the reservation.
func ExampleStore_QueueAllocateBucket() {
	ctx := context.Background()
	db := seckilltest.Example(inventory.Migrations)
	store, err := inventory.New(inventory.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	if _, err := store.Provision(ctx, db.Pool, inventory.SKU{ActivityID: 1, SKUID: 42, Stock: 1, Buckets: 1}); err != nil {
		panic(err)
	}
	buy := func(userID, orderID int64) error {
		now := time.Now()
		r := inventory.NewReservation{
			Request:    seckill.Request{ReservationID: uuid.Must(uuid.NewV7()), RequestID: uuid.Must(uuid.NewV7()), MessageID: uuid.Must(uuid.NewV7()), ActivityID: 1, SKUID: 42, UserID: userID, Bucket: 0, Quantity: 1, OrderID: orderID},
			Ordered:    true,
			ReservedAt: now,
			ExpiresAt:  now.Add(15 * time.Minute),
			// inserted as ORDERED: the batch commits only with the stock,
		}
		var b pgx.Batch
		if err := store.QueueAcquireReservation(&b, r, nil, pgtx.Abort); err != nil {
			return err
		}
		var got inventory.Allocated
		a := inventory.Allocation{
			Request: seckill.Request{ReservationID: r.ReservationID, ActivityID: 1, SKUID: 42, Bucket: 0, Quantity: 1, UserID: userID, OrderID: orderID, MessageID: r.MessageID},
		}
		if err := store.QueueAllocateBucket(&b, a, &got, pgtx.Abort); err != nil {
			return err
		}
		err := pgtx.RunBatch(ctx, db.Pool, pgtx.Options{}, &b)
		switch {
		case err == nil:
			fmt.Printf("user %d: ordered, available %d → %d\n", userID, got.BeforeAvailable, got.AfterAvailable)
		case errors.Is(err, inventory.ErrSoldOut):
			fmt.Printf("user %d: refused, nothing committed: %v\n", userID, pgtx.Classify(err).NotCommitted)
		default:
			return err
		}
		return nil
	}
	for user := int64(1); user <= 2; user++ {
		if err := buy(user, 100+user); err != nil {
			panic(err)
		}
	}
	tot, err := store.Stock(ctx, db.Pool, 1, 42)
	if err != nil {
		panic(err)
	}
	fmt.Printf("allocated %d of %d\n", tot.Allocated, tot.Total)
	// Output:
	// user 1: ordered, available 1 → 0
	// user 2: refused, nothing committed: true
	// allocated 1 of 1
}
