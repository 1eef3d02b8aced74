package pgtx_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

func ExampleRunInTx() {
	ctx := context.Background()
	db := seckilltest.Example() // a fresh, empty schema
	pool, schema := db.Pool, db.Schema
	table := pgx.Identifier{schema, "stock"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (sku int PRIMARY KEY, available int NOT NULL CHECK (available >= 0));
		INSERT INTO `+table+` VALUES (1, 1)`); err != nil {
		panic(err)
	}

	errSoldOut := errors.New("sold out")
	buy := func() error {
		return pgtx.RunInTx(ctx, pool, pgtx.Options{LockTimeout: 150 * time.Millisecond}, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `UPDATE `+table+` SET available = available - 1 WHERE sku = 1 AND available >= 1`)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return errSoldOut // rolled back, returned as is
			}
			return nil
		})
	}
	fmt.Println("first buyer:", buy())
	err := buy()
	fmt.Println("second buyer:", err, "| not committed:", pgtx.Classify(err).NotCommitted)
	// Output:
	// first buyer: <nil>
	// second buyer: sold out | not committed: true
}

func ExampleObserver() {
	ctx := context.Background()
	pool := seckilltest.Example().Pool

	// Count retried attempts (per attempt) and committed transactions (per
	// outcome); the hooks left nil do nothing.
	var retries, commits int
	obs := pgtx.Observer{
		AttemptEnd: func(_ context.Context, e pgtx.Event) {
			if e.Retry {
				retries++
			}
		},
		TxEnd: func(_ context.Context, e pgtx.Event) {
			if pgtx.Classify(e.Err).Committed {
				commits++
			}
		},
	}
	attempt := 0
	err := pgtx.RunInTx(ctx, pool, pgtx.Options{Name: "checkout", Observer: obs, BaseBackoff: time.Millisecond}, func(tx pgx.Tx) error {
		attempt++
		if attempt < 3 { // a real serialization failure raised by the server
			_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$`)
			return err
		}
		return nil
	})
	fmt.Println("err:", err, "| attempts:", attempt, "| retries:", retries, "| commits:", commits)
	// Output:
	// err: <nil> | attempts: 3 | retries: 2 | commits: 1
}

func ExampleCommitError() {
	// What a message consumer does with the outcome of its transaction.
	handle := func(err error) string {
		switch {
		case err == nil:
			return "ack"
		case pgtx.Classify(err).OutcomeUnknown:
			return "nack: redelivery and the inbox will tell"
		default:
			return "nack: nothing committed, safe to process again"
		}
	}
	fmt.Println(handle(nil))
	fmt.Println(handle(&pgtx.CommitError{Err: errors.New("connection reset"), Unknown: true}))
	fmt.Println(handle(&pgtx.CommitError{Err: pgx.ErrTxCommitRollback}))
	// Output:
	// ack
	// nack: redelivery and the inbox will tell
	// nack: nothing committed, safe to process again
}

func ExampleOptions_deferBegin() {
	ctx := context.Background()
	db := seckilltest.Example() // a fresh, empty schema
	pool, schema := db.Pool, db.Schema
	table := pgx.Identifier{schema, "orders"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (id int PRIMARY KEY, state text NOT NULL)`); err != nil {
		panic(err)
	}
	// BEGIN, both statements and their results share the first round
	// trip; COMMIT is the second.
	opts := pgtx.Options{DeferBegin: true, LockTimeout: 150 * time.Millisecond}
	var lockTimeout string
	err := pgtx.RunInTx(ctx, pool, opts, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO `+table+` VALUES ($1, $2)`, 1, "created")
		b.Queue(`SELECT current_setting($1)`, "lock_timeout").QueryRow(func(r pgx.Row) error {
			return r.Scan(&lockTimeout)
		})
		return tx.SendBatch(ctx, b).Close()
	})
	fmt.Println("err:", err, "| lock_timeout inside:", lockTimeout)
	// Output:
	// err: <nil> | lock_timeout inside: 150ms
}

func ExampleRunBatch() {
	ctx := context.Background()
	db := seckilltest.Example() // a fresh, empty schema
	pool, schema := db.Pool, db.Schema
	stock, orders := pgx.Identifier{schema, "stock"}.Sanitize(), pgx.Identifier{schema, "orders"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+stock+` (sku int PRIMARY KEY, available int NOT NULL);
		CREATE TABLE `+orders+` (buyer text PRIMARY KEY, sku int NOT NULL);
		INSERT INTO `+stock+` VALUES (1, 1)`); err != nil {
		panic(err)
	}

	// BEGIN, both statements and COMMIT travel in one round trip. Every
	// condition that must stop the order raises: the decrement divides by
	// the rows it updated (sold out → division by zero), the order's
	// primary key refuses a second order of the same buyer.
	buy := func(buyer string) error {
		b := &pgx.Batch{}
		b.Queue(`WITH u AS (UPDATE ` + stock + ` SET available = available - 1 WHERE sku = 1 AND available >= 1 RETURNING 1)
			SELECT 1 / (SELECT count(*) FROM u)::int`)
		b.Queue(`INSERT INTO `+orders+` VALUES ($1, 1)`, buyer)
		return pgtx.RunBatch(ctx, pool, pgtx.Options{}, b)
	}
	fmt.Println("ann:", buy("ann"))
	err := buy("bob")
	var se *pgtx.StatementError
	if errors.As(err, &se) {
		fmt.Println("bob: statement", se.Index, "raised | not committed:", pgtx.Classify(err).NotCommitted)
	}
	// Output:
	// ann: <nil>
	// bob: statement 0 raised | not committed: true
}
