package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	store  *inventory.Store
	ids    *atomic.Int64 // order ids and user ids unique within the test
	citus  bool          // store has Config.Citus
	tokens bool          // provision provisions inventory tokens (SKU.Tokens)
}

func setup(t *testing.T) testBundle { return setupMode(t, false) }

// setupMode is setup with Config.Citus set to citus.
func setupMode(t *testing.T, citus bool) testBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	if _, err := migrate.Apply(ctx, pool, schema, inventory.Migrations); err != nil {
		t.Fatal(err)
	}
	store, err := inventory.New(inventory.Config{Schema: schema, Citus: citus})
	if err != nil {
		t.Fatal(err)
	}
	return testBundle{ctx: ctx, pool: pool, schema: schema, store: store, ids: new(atomic.Int64), citus: citus}
}

// bothModes runs fn as two parallel subtests, each on a schema of its
// own: "default", with the one-statement AcquireReservation and
// AllocateBucket, and "citus", with the statement pairs of Config.Citus.
func bothModes(t *testing.T, fn func(t *testing.T, tb testBundle)) {
	t.Helper()
	for _, citus := range []bool{false, true} {
		name := "default"
		if citus {
			name = "citus"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, setupMode(t, citus))
		})
	}
}

// stockModes runs fn as bothModes does, and twice more with the stock
// provisioned as inventory tokens: "tokens" (default statements) and
// "tokens_citus" (the statements of Config.Citus).
func stockModes(t *testing.T, fn func(t *testing.T, tb testBundle)) {
	t.Helper()
	bothModes(t, fn)
	tokenModes(t, fn)
}

// provision provisions a SKU, as inventory tokens when tb.tokens (then
// buckets must be 1).
func (tb testBundle) provision(t *testing.T, activity, sku int64, stock int32, buckets int16) {
	t.Helper()
	res, err := tb.store.Provision(tb.ctx, tb.pool, inventory.SKU{ActivityID: activity, SKUID: sku, Stock: stock, Buckets: buckets, Tokens: tb.tokens})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created {
		t.Fatalf("provision %d/%d: not created", activity, sku)
	}
}

// newReservation returns a fresh reservation of one unit for a new user.
func (tb testBundle) newReservation(activity, sku int64, bucket int16) inventory.NewReservation {
	now := time.Now()
	return inventory.NewReservation{
		Request:    seckill.Request{ReservationID: uuid.Must(uuid.NewV7()), RequestID: uuid.Must(uuid.NewV7()), MessageID: uuid.Must(uuid.NewV7()), ActivityID: activity, SKUID: sku, UserID: tb.ids.Add(1), Bucket: bucket, Quantity: 1},
		ReservedAt: now,
		ExpiresAt:  now.Add(15 * time.Minute),
	}
}

// inTx runs fn in a Read Committed transaction and commits it unless fn
// fails.
func inTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	return tx.Commit(ctx)
}

// buy runs the inventory half of the order transaction for r:
// acquire and lock the reservation, allocate its bucket, mark it ORDERED
// (or REJECTED when sold out) and commit. It returns nil when the stock was
// allocated and an error matching inventory.ErrSoldOut when it was not.
func (tb testBundle) buy(ctx context.Context, r inventory.NewReservation) error {
	var soldOut error
	err := inTx(ctx, tb.pool, func(tx pgx.Tx) error {
		acq, err := tb.store.AcquireReservation(ctx, tx, r)
		if err != nil {
			return err
		}
		if !acq.Created {
			return fmt.Errorf("reservation %s already existed", r.ReservationID)
		}
		orderID := tb.ids.Add(1)
		_, err = tb.store.AllocateBucket(ctx, tx, acq.Reservation.Allocation(orderID, uuid.Nil))
		if errors.Is(err, inventory.ErrSoldOut) {
			soldOut = err
			_, err = tb.store.TransitionReservation(ctx, tx, inventory.Transition{
				ReservationID: r.ReservationID, To: inventory.StatusRejected, FailureCode: "POSTGRES_SOLD_OUT"})
			return err
		}
		if err != nil {
			return err
		}
		_, err = tb.store.TransitionReservation(ctx, tx, inventory.Transition{
			ReservationID: r.ReservationID, To: inventory.StatusOrdered, OrderID: orderID})
		return err
	})
	if err != nil {
		return err
	}
	return soldOut
}

// acquire runs AcquireReservation for r in a transaction of its own.
func (tb testBundle) acquire(r inventory.NewReservation) (inventory.Acquired, error) {
	var out inventory.Acquired
	err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		var err error
		out, err = tb.store.AcquireReservation(tb.ctx, tx, r)
		return err
	})
	return out, err
}

func (tb testBundle) count(t *testing.T, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := tb.pool.QueryRow(tb.ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (tb testBundle) table(name string) string {
	return pgx.Identifier{tb.schema, name}.Sanitize()
}

func (tb testBundle) auditClean(t *testing.T, activity, sku int64) {
	t.Helper()
	findings, err := tb.store.Audit(tb.ctx, tb.pool, activity, sku)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		t.Errorf("audit: %+v", f)
	}
}

func (tb testBundle) totals(t *testing.T, activity, sku int64) inventory.Stock {
	t.Helper()
	tot, err := tb.store.Stock(tb.ctx, tb.pool, activity, sku)
	if err != nil {
		t.Fatal(err)
	}
	return tot
}

func TestNewRejectsBadSchema(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"1abc", "has space", "pg_catalog", `x"y`} {
		if _, err := inventory.New(inventory.Config{Schema: name}); !errors.Is(err, migrate.ErrInvalidSchema) {
			t.Errorf("New(%q) = %v, want migrate.ErrInvalidSchema", name, err)
		}
	}
	s, err := inventory.New(inventory.Config{})
	if err != nil || inventory.SchemaOf(s) != "seckill" {
		t.Fatalf("New(zero) = %v, %v; want schema seckill", s, err)
	}
}

func TestMigrateIdempotentAndValid(t *testing.T) {
	t.Parallel()
	tb := setup(t) // migrated once
	if _, err := migrate.Apply(tb.ctx, tb.pool, tb.schema, inventory.Migrations); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Validate(tb.ctx, tb.pool, tb.schema, inventory.Migrations); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"inventory_sku", "sku_inventory", "inventory_reservation", "inventory_ledger"} {
		if n := tb.count(t, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2`, tb.schema, table); n != 1 {
			t.Errorf("table %s missing", table)
		}
	}
}
