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

// The inventory half of the order transaction: record and lock
// the reservation, take the stock from its bucket, mark it ORDERED, commit.
// The last unit goes to the first buyer; the second is refused in
// PostgreSQL and its reservation rejected in the same transaction.
func Example() {
	ctx := context.Background()
	db := seckilltest.Example(inventory.Migrations) // a fresh schema with the inventory tables
	pool, schema := db.Pool, db.Schema
	store, err := inventory.New(inventory.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	if _, err := store.Provision(ctx, pool, inventory.SKU{ActivityID: 1, SKUID: 42, Stock: 1, Buckets: 1}); err != nil {
		panic(err)
	}

	buy := func(userID, orderID int64) error {
		now := time.Now()
		r := inventory.NewReservation{
			Request:    seckill.Request{ReservationID: uuid.Must(uuid.NewV7()), RequestID: uuid.Must(uuid.NewV7()), MessageID: uuid.Must(uuid.NewV7()), ActivityID: 1, SKUID: 42, UserID: userID, Bucket: 0, Quantity: 1},
			ReservedAt: now,
			ExpiresAt:  now.Add(15 * time.Minute),
		}
		return pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
			acq, err := store.AcquireReservation(ctx, tx, r)
			if err != nil {
				return err
			}
			_, err = store.AllocateBucket(ctx, tx, acq.Reservation.Allocation(orderID, uuid.Nil))
			if errors.Is(err, inventory.ErrSoldOut) {
				_, err = store.TransitionReservation(ctx, tx, inventory.Transition{
					ReservationID: r.ReservationID, To: inventory.StatusRejected, FailureCode: "POSTGRES_SOLD_OUT"})
				if err != nil {
					return err
				}
				fmt.Printf("user %d: sold out\n", userID)
				return nil
			}
			if err != nil {
				return err
			}
			_, err = store.TransitionReservation(ctx, tx, inventory.Transition{
				ReservationID: r.ReservationID, To: inventory.StatusOrdered, OrderID: orderID})
			fmt.Printf("user %d: ordered\n", userID)
			return err
		})
	}
	for i, user := range []int64{1001, 1002} {
		if err := buy(user, int64(i+1)); err != nil {
			panic(err)
		}
	}
	tot, _ := store.Stock(ctx, pool, 1, 42)
	findings, _ := store.Audit(ctx, pool, 1, 42)
	fmt.Printf("allocated %d of %d, audit findings: %d\n", tot.Allocated, tot.PlannedStock, len(findings))
	// Output:
	// user 1001: ordered
	// user 1002: sold out
	// allocated 1 of 1, audit findings: 0
}

func ExampleStore_Provision() {
	ctx := context.Background()
	db := seckilltest.Example(inventory.Migrations) // a fresh schema with the inventory tables
	pool, schema := db.Pool, db.Schema
	store, _ := inventory.New(inventory.Config{Schema: schema})

	res, _ := store.Provision(ctx, pool, inventory.SKU{ActivityID: 1, SKUID: 7, Stock: 10, Buckets: 4})
	fmt.Println("created:", res.Created, "buckets:", res.Buckets)
	res, _ = store.Provision(ctx, pool, inventory.SKU{ActivityID: 1, SKUID: 7, Stock: 10, Buckets: 4})
	fmt.Println("again, created:", res.Created)
	_, err := store.Provision(ctx, pool, inventory.SKU{ActivityID: 1, SKUID: 7, Stock: 12, Buckets: 4})
	fmt.Println("different stock:", errors.Is(err, inventory.ErrProvisionConflict))

	buckets, _ := inventory.BucketsOf(store, ctx, pool, 1, 7)
	for _, b := range buckets {
		fmt.Printf("bucket %d: %d\n", b.BucketNo, b.Available)
	}
	// Output:
	// created: true buckets: 4
	// again, created: false
	// different stock: true
	// bucket 0: 3
	// bucket 1: 3
	// bucket 2: 2
	// bucket 3: 2
}

func ExamplePickBucket() {
	b, _ := inventory.PickBucket("5f0c6a8e-3c1d-4c55-9b7e-2a1f1c0d9e11", 64)
	again, _ := inventory.PickBucket("5f0c6a8e-3c1d-4c55-9b7e-2a1f1c0d9e11", 64)
	fmt.Println(b == again, b >= 0 && b < 64)
	// Output: true true
}

// A redelivered allocation is not applied twice, and a release gives back
// exactly what the allocation took, once.
func ExampleStore_AllocateBucket() {
	ctx := context.Background()
	db := seckilltest.Example(inventory.Migrations) // a fresh schema with the inventory tables
	pool, schema := db.Pool, db.Schema
	store, _ := inventory.New(inventory.Config{Schema: schema})
	if _, err := store.Provision(ctx, pool, inventory.SKU{ActivityID: 1, SKUID: 1, Stock: 5, Buckets: 1}); err != nil {
		panic(err)
	}
	// The reservation the allocation is for: its bucket, quantity and
	// buyer are the allocation's.
	now := time.Now()
	var a inventory.Allocation
	err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		acq, err := store.AcquireReservation(ctx, tx, inventory.NewReservation{
			Request:    seckill.Request{ReservationID: uuid.Must(uuid.NewV7()), RequestID: uuid.Must(uuid.NewV7()), MessageID: uuid.Must(uuid.NewV7()), ActivityID: 1, SKUID: 1, UserID: 9, Bucket: 0, Quantity: 2},
			ReservedAt: now,
			ExpiresAt:  now.Add(15 * time.Minute),
		})
		a = acq.Reservation.Allocation(0, uuid.Nil)
		return err
	})
	if err != nil {
		panic(err)
	}
	for range 2 {
		err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
			got, err := store.AllocateBucket(ctx, tx, a)
			if errors.Is(err, inventory.ErrAlreadyApplied) {
				fmt.Println("redelivery: already applied")
				return nil
			}
			fmt.Printf("allocated: available %d -> %d\n", got.BeforeAvailable, got.AfterAvailable)
			return err
		})
		if err != nil {
			panic(err)
		}
	}
	err = pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		got, err := store.ReleaseStock(ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: a.ReservationID}, Reason: "PAY_TIMEOUT"})
		fmt.Printf("released %d: available %d -> %d\n", got.Quantity, got.BeforeAvailable, got.AfterAvailable)
		return err
	})
	if err != nil {
		panic(err)
	}
	// Output:
	// allocated: available 5 -> 3
	// redelivery: already applied
	// released 2: available 3 -> 5
}
