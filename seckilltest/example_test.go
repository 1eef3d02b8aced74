package seckilltest_test

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

// An Example function has no *testing.T: Example gives it a fresh,
// migrated schema all the same, dropped when Main ends the test binary.
// In a test, call seckilltest.New(t, inbox.Migrations) instead.
func ExampleExample() {
	ctx := context.Background()
	db := seckilltest.Example(inbox.Migrations)
	in, err := inbox.New(inbox.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	msg := inbox.Message{Group: "orders", MessageID: uuid.MustParse("0190f5b2-8c1e-7000-8000-000000000001"), Topic: "seckill.reserve"}
	for range 2 {
		err := pgtx.RunInTx(ctx, db.Pool, pgtx.Options{}, func(tx pgx.Tx) error {
			c, err := in.ClaimMessage(ctx, tx, msg)
			if err != nil {
				return err
			}
			fmt.Println("fresh:", c.Fresh)
			if c.Fresh {
				return in.Complete(ctx, tx, msg.Key(), inbox.Result{Code: "DONE"})
			}
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// fresh: true
	// fresh: false
}
