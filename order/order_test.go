package order_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	store  *order.Store
}

func setup(t testing.TB) testBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	return setupWith(t, pool)
}

func setupWith(t testing.TB, pool *pgxpool.Pool) testBundle {
	t.Helper()
	return setupCfg(t, pool, order.Config{})
}

// setupCfg is setupWith with a Store built from cfg (its Schema is set
// here).
func setupCfg(t testing.TB, pool *pgxpool.Pool, cfg order.Config) testBundle {
	t.Helper()
	schema := pgtest.Schema(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	if err := migrateSchema(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	cfg.Schema = schema
	st, err := order.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return testBundle{ctx: ctx, pool: pool, schema: schema, store: st}
}

// newOrder returns a valid NewOrder for user in activity 1, sku 100.
func newOrder(user int64) order.NewOrder {
	id := ids.Next() // see ids in example_test.go
	return order.NewOrder{
		Request: seckill.Request{
			OrderID:       id,
			RequestID:     uuid.New(),
			ReservationID: uuid.New(),
			MessageID:     uuid.New(),
			ActivityID:    1,
			SKUID:         100,
			UserID:        user,
			Bucket:        3,
			Quantity:      1,
		},
		OrderNo:   orderNo(id),
		UnitPrice: 9900,
		Currency:  "CNY",
		ExpireAt:  time.Now().Add(15 * time.Minute),
		SKUTitle:  "Flash-sale phone",
	}
}

// migrateSchema applies the order migrations to schema.
func migrateSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	_, err := migrate.Apply(ctx, pool, schema, order.Migrations)
	return err
}

// userCancel is a buyer's cancel: to CANCELLED, reason USER_CANCEL,
// expired or not (the example service's).
func userCancel(orderID int64) order.Transition {
	return order.Transition{OrderID: orderID, To: order.StatusCancelled, CancelReason: "USER_CANCEL"}
}

// inTx runs fn in a Read Committed transaction on pool and commits unless
// fn fails.
func inTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, fn)
}

// create inserts in and fails the test on any error.
func (b testBundle) create(t testing.TB, in order.NewOrder) order.Order {
	t.Helper()
	var res order.Result
	err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		res, err = b.store.Create(b.ctx, tx, in)
		return err
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if res.Existing {
		t.Fatalf("create: unexpectedly Existing")
	}
	return res.Order
}

// count runs a count(*) query in the test's schema.
func (b testBundle) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+pgx.Identifier{b.schema}.Sanitize()+`.`+sql, args...).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", sql, err)
	}
	return n
}

// exec runs sql with search_path set to the test's schema.
func (b testBundle) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(b.ctx, `SET LOCAL search_path TO `+pgx.Identifier{b.schema}.Sanitize()); err != nil {
			return err
		}
		_, err := tx.Exec(b.ctx, sql, args...)
		return err
	})
	if err != nil {
		t.Fatalf("exec %s: %v", sql, err)
	}
}
