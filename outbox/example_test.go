package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

func ExampleStore_Enqueue() {
	ctx := context.Background()
	db := seckilltest.Example(outbox.Migrations) // a fresh schema with the outbox tables
	pool, schema := db.Pool, db.Schema
	store, err := outbox.New(outbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	ev := outbox.Event{
		Topic:         "ORDER_EVENT",
		Tag:           "ORDER_CREATED",
		AggregateType: "ORDER",
		AggregateID:   "1001",
		DedupKey:      "ORDER_CREATED:1001",
		Payload:       json.RawMessage(`{"order_id": 1001, "sku": "A1"}`),
	}
	for range 2 { // the second enqueue is a duplicate: nothing written
		err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
			// ... the order insert would go here, in the same tx ...
			res, err := store.Enqueue(ctx, tx, ev)
			fmt.Println("new:", res[0].New)
			return err
		})
		if err != nil {
			panic(err)
		}
	}
	st, _ := store.Stats(ctx, pool)
	fmt.Println("pending:", st.Pending)
	// Output:
	// new: true
	// new: false
	// pending: 1
}

func ExampleStore_ClaimOutboxBatch() {
	ctx := context.Background()
	db := seckilltest.Example(outbox.Migrations) // a fresh schema with the outbox tables
	pool, schema := db.Pool, db.Schema
	store, _ := outbox.New(outbox.Config{Schema: schema})
	err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		_, err := store.Enqueue(ctx, tx, []outbox.Event{
			{Topic: "T", AggregateType: "ORDER", AggregateID: "1", DedupKey: "e1", Payload: []byte(`1`)},
			{Topic: "T", AggregateType: "ORDER", AggregateID: "2", DedupKey: "e2", Payload: []byte(`2`)},
		}...)
		return err
	})
	if err != nil {
		panic(err)
	}
	claim, err := store.ClaimOutboxBatch(ctx, pool, "relay-1", 10)
	if err != nil {
		panic(err)
	}
	for _, m := range claim.Messages {
		fmt.Println("publish", m.AggregateID, string(m.Payload))
	}
	// Event 1 was published, event 2 failed.
	res, err := store.Mark(ctx, pool, outbox.Outcome{Lease: claim.Lease, Sent: claimIDs(claim)[:1]})
	fmt.Println("sent:", res.Marked, err)
	res, err = store.Mark(ctx, pool, outbox.Outcome{Lease: claim.Lease, Failed: []outbox.Failure{
		{EventID: claim.Messages[1].EventID, Err: fmt.Errorf("broker unavailable")},
	}})
	fmt.Println("retry:", res.Marked, err)
	// Marking again under the same lease touches nothing and says why.
	res, err = store.Mark(ctx, pool, outbox.Outcome{Lease: claim.Lease, Sent: claimIDs(claim)[:1]})
	fmt.Println(errors.Is(err, outbox.ErrLeaseLost), res.Lost[0].Status)
	// Output:
	// publish 1 1
	// publish 2 2
	// sent: 1 <nil>
	// retry: 1 <nil>
	// true SENT
}

func ExampleRelay() {
	// The relay runs until cancel below, or for 30 seconds at most.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := seckilltest.Example(outbox.Migrations) // a fresh schema with the outbox tables
	pool, schema := db.Pool, db.Schema
	store, _ := outbox.New(outbox.Config{Schema: schema})
	err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		var evs []outbox.Event
		for i := 1; i <= 3; i++ {
			evs = append(evs, outbox.Event{
				Topic: "ORDER_EVENT", AggregateType: "ORDER", AggregateID: "7",
				DedupKey:    fmt.Sprintf("ORDER:7:%d", i),
				OrderingKey: "ORDER:7", // published in this order
				Payload:     json.RawMessage(fmt.Sprintf(`{"step": %d}`, i)),
			})
		}
		_, err := store.Enqueue(ctx, tx, evs...)
		return err
	})
	if err != nil {
		panic(err)
	}

	published := 0
	relay, err := outbox.NewRelay(pool, outbox.RelayConfig{
		Store: store,
		Publish: func(_ context.Context, msgs []outbox.Message) []error {
			for _, m := range msgs {
				fmt.Println("published", m.Topic, string(m.Payload))
				if published++; published == 3 {
					cancel() // stop the relay; it still marks this batch
				}
			}
			return nil // all published
		},
	})
	if err != nil {
		panic(err)
	}
	if err := relay.Run(ctx); err != nil {
		panic(err)
	}
	st, _ := store.Stats(context.Background(), pool)
	fmt.Println("sent:", st.Sent)
	// Output:
	// published ORDER_EVENT {"step": 1}
	// published ORDER_EVENT {"step": 2}
	// published ORDER_EVENT {"step": 3}
	// sent: 3
}

func ExampleStore_ArchiveSent() {
	ctx := context.Background()
	db := seckilltest.Example(outbox.Migrations) // a fresh schema with the outbox tables
	pool, schema := db.Pool, db.Schema
	store, _ := outbox.New(outbox.Config{Schema: schema})
	err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		_, err := store.Enqueue(ctx, tx, []outbox.Event{
			{Topic: "T", AggregateType: "ORDER", AggregateID: "1", DedupKey: "e1", Payload: []byte(`1`)},
			{Topic: "T", AggregateType: "ORDER", AggregateID: "2", DedupKey: "e2", Payload: []byte(`2`)},
			{Topic: "T", AggregateType: "ORDER", AggregateID: "3", DedupKey: "e3", Payload: []byte(`3`)},
		}...)
		return err
	})
	if err != nil {
		panic(err)
	}
	c, _ := store.ClaimOutboxBatch(ctx, pool, "relay-1", 2)
	// ... publish c.Messages ...
	if _, err := store.Mark(ctx, pool, outbox.Outcome{Lease: c.Lease, Sent: claimIDs(c)}); err != nil {
		panic(err)
	}
	// A retention job: move what was sent before the horizon (here: all of
	// it) to event_outbox_history, 1000 rows per statement.
	moved, err := store.ArchiveSent(ctx, pool, time.Now().Add(time.Minute), 0)
	if err != nil {
		panic(err)
	}
	again, _ := store.ArchiveSent(ctx, pool, time.Now().Add(time.Minute), 0)
	st, _ := store.Stats(ctx, pool)
	var archived int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "event_outbox_history"}.Sanitize()).Scan(&archived)
	fmt.Println("moved:", moved, "then:", again)
	fmt.Println("pending:", st.Pending, "sent:", st.Sent, "archived:", archived)
	// Output:
	// moved: 2 then: 0
	// pending: 1 sent: 0 archived: 2
}

func ExampleStore_Backlog() {
	ctx := context.Background()
	db := seckilltest.Example(outbox.Migrations) // a fresh schema with the outbox tables
	pool, schema := db.Pool, db.Schema
	store, _ := outbox.New(outbox.Config{Schema: schema})
	err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		_, err := store.Enqueue(ctx, tx, []outbox.Event{
			{Topic: "T", AggregateType: "ORDER", AggregateID: "1", DedupKey: "b1", Payload: []byte(`1`)},
			{Topic: "T", AggregateType: "ORDER", AggregateID: "2", DedupKey: "b2", Payload: []byte(`2`)},
		}...)
		return err
	})
	if err != nil {
		panic(err)
	}
	c, _ := store.ClaimOutboxBatch(ctx, pool, "relay-1", 1)
	// ... publish c.Messages ...
	if _, err := store.Mark(ctx, pool, outbox.Outcome{Lease: c.Lease, Sent: claimIDs(c)}); err != nil {
		panic(err)
	}
	// A readiness or drain check polls the backlog: what is still to be
	// published, never the SENT history.
	bl, err := store.Backlog(ctx, pool)
	if err != nil {
		panic(err)
	}
	fmt.Println("waiting:", bl.Pending+bl.Sending+bl.Retry, "dead:", bl.Dead)
	// Output:
	// waiting: 1 dead: 0
}
