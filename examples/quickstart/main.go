// Quickstart sells one unit with the four packages: it migrates their
// tables into the service's own schema, provisions stock, places an order in
// one transaction, delivers its message twice and relays the event.
//
//	SECKILL_DATABASE_URL=postgres://localhost/postgres go run ./examples/quickstart -schema shop
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

func main() {
	schema := flag.String("schema", "shop", "the service's schema")
	flag.Parse()
	ctx := context.Background()
	pool := must(pgxpool.New(ctx, os.Getenv("SECKILL_DATABASE_URL")))
	defer pool.Close()

	// The tables of the four packages, in the service's own schema.
	must(migrate.Apply(ctx, pool, *schema, inbox.Migrations, inventory.Migrations, order.Migrations, outbox.Migrations))
	in := must(inbox.New(inbox.Config{Schema: *schema}))
	stock := must(inventory.New(inventory.Config{Schema: *schema}))
	orders := must(order.New(order.Config{Schema: *schema}))
	events := must(outbox.New(outbox.Config{Schema: *schema}))

	// 100 units of SKU 7 in activity 1, split over 4 buckets (idempotent).
	must(stock.Provision(ctx, pool, inventory.SKU{ActivityID: 1, SKUID: 7, Stock: 100, Buckets: 4}))

	// One order message; its ids travel with it, so a redelivery has the same.
	msgID, resID, reqID := uuid.New(), uuid.New(), uuid.New()
	orderID, userID, now := time.Now().UnixMicro(), rand.Int64N(1e9)+1, time.Now()
	req := seckill.Request{RequestID: reqID, MessageID: msgID, ReservationID: resID, OrderID: orderID, ActivityID: 1,
		SKUID: 7, UserID: userID, Bucket: must(inventory.PickBucket(resID.String(), 4)), Quantity: 1}

	// A queue delivers at least once: here twice. The inbox answers the second.
	for range 2 {
		var outcome string
		err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
			claim, err := in.ClaimMessage(ctx, tx, inbox.Message{Group: "orders", MessageID: msgID, Topic: "order.place"})
			if err != nil || !claim.Fresh {
				outcome = "duplicate message: answered " + claim.Record.Result.Code
				return err
			}
			if _, err := stock.AcquireReservation(ctx, tx, inventory.NewReservation{Request: req, Ordered: true,
				ReservedAt: now, ExpiresAt: now.Add(time.Minute)}); err != nil {
				return err
			}
			if _, err := orders.Create(ctx, tx, order.NewOrder{Request: req, OrderNo: fmt.Sprint("SO-", orderID),
				UnitPrice: 1999, Currency: "EUR", ExpireAt: now.Add(15 * time.Minute), SKUTitle: "Phone"}); err != nil {
				return err // order.ErrUserAlreadyOrdered: one order per buyer and SKU
			}
			if _, err := events.Enqueue(ctx, tx, outbox.Event{Topic: "orders", Tag: "ORDER_CREATED",
				AggregateType: "ORDER", AggregateID: fmt.Sprint(orderID), DedupKey: fmt.Sprint("ORDER_CREATED:", orderID),
				Payload: fmt.Appendf(nil, `{"order_id": %d}`, orderID)}); err != nil {
				return err
			}
			if err := in.Complete(ctx, tx, claim.Record.Key, inbox.Result{Code: "ORDER_CREATED"}); err != nil {
				return err
			}
			// The stock last, so the hot bucket row stays locked only until COMMIT.
			a, err := stock.AllocateBucket(ctx, tx, inventory.Allocation{Request: req})
			outcome = fmt.Sprintf("order %d created: bucket %d has %d left", orderID, a.Bucket, a.AfterAvailable)
			return err // inventory.ErrSoldOut: nothing of the order commits
		})
		check(err)
		fmt.Println(outcome)
	}

	// A relay publishes what committed, after the commit: here to a channel.
	published := make(chan outbox.Message, 100) // room for a whole batch
	relay := must(outbox.NewRelay(pool, outbox.RelayConfig{Store: events,
		Publish: func(ctx context.Context, msgs []outbox.Message) []error {
			for _, m := range msgs {
				published <- m
			}
			return nil // every message acknowledged: the relay marks them SENT
		}}))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	select {
	case m := <-published:
		fmt.Printf("published %s %s %s\n", m.Topic, m.Tag, m.Payload)
	case <-time.After(30 * time.Second):
		log.Fatal("no event published within 30s")
	}
	stop()
	check(<-done) // Run returns once its batch is marked
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func must[T any](v T, err error) T {
	check(err)
	return v
}
