package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

// A consumer claims each delivery inside the transaction that does the
// work; the redelivery of the same message gets the stored result instead
// of doing the work twice.
func ExampleStore_ClaimMessage() {
	ctx := context.Background()
	db := seckilltest.Example(inbox.Migrations) // a fresh schema with the inbox tables
	pool, schema := db.Pool, db.Schema
	in, err := inbox.New(inbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}

	body := []byte(`{"reservation":"r-1"}`)
	msg := inbox.Message{
		Group:       "order-service",
		MessageID:   uuid.MustParse("0190f5b2-8c1e-7000-8000-000000000001"),
		Topic:       "seckill.reserve",
		PayloadHash: inbox.HashPayload(body),
	}
	consume := func() {
		err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
			c, err := in.ClaimMessage(ctx, tx, msg)
			if err != nil {
				return err
			}
			if !c.Fresh {
				fmt.Println("duplicate, first result:", c.Record.Result.Code, string(c.Record.Result.Payload))
				return nil
			}
			// ... the business writes of this message go here, in tx ...
			fmt.Println("processing")
			return in.Complete(ctx, tx, msg.Key(), inbox.Result{Code: "ORDER_CREATED", Payload: []byte(`{"order_id":1001}`)})
		})
		if err != nil {
			panic(err)
		}
		// ... ack the message only now, after COMMIT ...
	}
	consume()
	consume() // the broker redelivers
	// Output:
	// processing
	// duplicate, first result: ORDER_CREATED {"order_id": 1001}
}

// The batch forms queue the claim and the result with the rest of the
// transaction's statements, so the whole consumer transaction can take one
// round trip. Work queued with a claim runs whatever the claim finds, so a
// duplicate must roll the transaction back.
func ExampleStore_QueueClaimMessage() {
	ctx := context.Background()
	db := seckilltest.Example(inbox.Migrations) // a fresh schema with the inbox tables
	pool, schema := db.Pool, db.Schema
	in, _ := inbox.New(inbox.Config{Schema: schema})
	msg := inbox.Message{
		Group:     "stock-service",
		MessageID: uuid.MustParse("0190f5b2-8c1e-7000-8000-000000000002"),
		Topic:     "seckill.order_created",
	}
	for range 2 {
		tx, err := pool.Begin(ctx)
		if err != nil {
			panic(err)
		}
		var claim inbox.Claim
		b := &pgx.Batch{}
		if err := in.QueueClaimMessage(b, withResult(msg, inbox.Result{Code: "STOCK_ALLOCATED"}), &claim, pgtx.Return); err != nil {
			panic(err)
		}
		// b.Queue(... the business statements ...)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			panic(err)
		}
		if claim.Fresh {
			fmt.Println("claimed, committing")
			err = tx.Commit(ctx)
		} else {
			fmt.Println("duplicate of", claim.Record.Result.Code, "- rolling back")
			err = tx.Rollback(ctx)
		}
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// claimed, committing
	// duplicate of STOCK_ALLOCATED - rolling back
}

// A retention job deletes rows older than the broker can replay, in small
// batches.
func ExampleStore_Purge() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a job has a deadline
	defer cancel()
	db := seckilltest.Example(inbox.Migrations) // a fresh schema with the inbox tables
	pool, schema := db.Pool, db.Schema
	in, _ := inbox.New(inbox.Config{Schema: schema})
	const replayWindow = 7 * 24 * time.Hour
	n, err := in.Purge(ctx, pool, time.Now().Add(-2*replayWindow), 1000)
	if err != nil {
		panic(err)
	}
	fmt.Println("purged", n)
	// Output:
	// purged 0
}

// A retention job moves rows older than the broker can replay to
// consumer_inbox_history; Config.MinRetention refuses a horizon inside the
// replay window.
func ExampleStore_Archive() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a job has a deadline
	defer cancel()
	db := seckilltest.Example(inbox.Migrations) // a fresh schema with the inbox tables
	pool, schema := db.Pool, db.Schema
	const replayWindow = 7 * 24 * time.Hour // the broker's MaxAge, plus repair time
	in, _ := inbox.New(inbox.Config{Schema: schema, MinRetention: replayWindow})

	_, err := in.Archive(ctx, pool, time.Now().Add(-24*time.Hour), 0)
	fmt.Println("one day:", errors.Is(err, inbox.ErrRetentionTooShort))

	n, err := in.Archive(ctx, pool, time.Now().Add(-replayWindow), 1000)
	fmt.Println("seven days:", n, err)
	// Output:
	// one day: true
	// seven days: 0 <nil>
}
