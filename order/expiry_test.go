package order_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/order"
)

// seedExpiry creates due orders (CREATED and PAYING, expired), plus orders
// that must never be found: not yet expired, and expired but PAID.
func (b testBundle) seedExpiry(t *testing.T, due int) map[int64]bool {
	t.Helper()
	want := map[int64]bool{}
	user := int64(0)
	for i := range due + 10 {
		user++
		in := newOrder(user)
		in.ExpireAt = time.Now().Add(-time.Duration(i+1) * time.Second)
		o := b.create(t, in)
		switch {
		case i >= due+5: // expired but paid
			if _, err := b.transition(order.Transition{OrderID: o.OrderID, To: order.StatusPaid}); err != nil {
				t.Fatal(err)
			}
		case i >= due: // not yet expired
			b.force(t, o.OrderID, order.StatusCreated, time.Now().Add(time.Hour))
		default:
			if i%3 == 0 {
				if _, err := b.transition(order.Transition{OrderID: o.OrderID, To: order.StatusPaying}); err != nil {
					t.Fatal(err)
				}
			}
			want[o.OrderID] = true
		}
	}
	return want
}

// TestDueForExpirySkipLocked: two open transactions find disjoint sets; the
// batch is bounded by limit and ordered by expiry; only due orders appear.
func TestDueForExpirySkipLocked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := b.seedExpiry(t, 30)

	tx1, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(b.ctx)
	tx2, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(b.ctx)

	first, err := b.store.DueForExpiry(b.ctx, tx1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 10 {
		t.Fatalf("first finder got %d orders, want the limit 10", len(first))
	}
	if !slices.IsSortedFunc(first, func(x, y order.Order) int { return x.ExpireAt.Compare(y.ExpireAt) }) {
		t.Fatal("batch not ordered by expire_at")
	}
	// SKIP LOCKED: the second finder does not wait for the first's locks.
	second, err := b.store.DueForExpiry(testwait.Context(t, b.ctx, testwait.Step), tx2, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(second) != 20 {
		t.Fatalf("second finder got %d orders, want the remaining 20", len(second))
	}
	got := map[int64]bool{}
	for _, o := range append(first, second...) {
		if got[o.OrderID] {
			t.Fatalf("order %d found by both finders", o.OrderID)
		}
		if !want[o.OrderID] {
			t.Fatalf("order %d (%s, expires %v) is not due", o.OrderID, o.Status, o.ExpireAt)
		}
		got[o.OrderID] = true
	}
	// The documented pattern: cancel each due order in the finder's
	// transaction; a Changed result is where the caller releases stock.
	for _, o := range first {
		res, err := b.store.TransitionOrder(b.ctx, tx1, order.TimeoutCancel(o.OrderID))
		if err != nil || !res.Changed {
			t.Fatalf("cancel due order %d: %+v, %v", o.OrderID, res, err)
		}
	}
	if err := tx1.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx2.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, "orders WHERE status = 40"); n != 10 {
		t.Fatalf("%d cancelled, want 10", n)
	}
}

// TestCancelExpired: two concurrent sweepers cancel disjoint batches; every
// due order is cancelled exactly once and reported once; nothing else is
// touched.
func TestCancelExpired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := b.seedExpiry(t, 30)

	tx1, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(b.ctx)
	tx2, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(b.ctx)
	r1, err := b.store.CancelExpired(b.ctx, tx1, 12)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.store.CancelExpired(testwait.Context(t, b.ctx, testwait.Step), tx2, 100) // does not wait for tx1's locks
	if err != nil {
		t.Fatal(err)
	}
	if len(r1) != 12 || len(r2) != 18 {
		t.Fatalf("sweepers cancelled %d and %d, want 12 and 18", len(r1), len(r2))
	}
	seen := map[int64]bool{}
	for _, r := range append(r1, r2...) {
		if seen[r.Order.OrderID] || !want[r.Order.OrderID] {
			t.Fatalf("order %d reported twice or not due", r.Order.OrderID)
		}
		seen[r.Order.OrderID] = true
		if !r.Changed || r.Order.Status != order.StatusCancelled || r.Order.CancelReason != "PAY_TIMEOUT" ||
			r.Order.CancelledAt == nil || (r.From != order.StatusCreated && r.From != order.StatusPaying) ||
			r.Order.ReservationID.String() == "" || r.Order.Quantity != 1 {
			t.Fatalf("result %+v", r)
		}
	}
	if err := tx1.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx2.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	err = inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		again, err := b.store.CancelExpired(b.ctx, tx, 100)
		if err == nil && len(again) != 0 {
			t.Errorf("second sweep cancelled %d more", len(again))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, "orders WHERE status = 40"); n != 30 {
		t.Fatalf("%d cancelled, want 30", n)
	}
	// The queued form sees nothing left either, and reports it in dst.
	queued := []order.Result{{}}
	err = inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		if err := b.store.QueueCancelExpired(batch, 10, &queued); err != nil {
			return err
		}
		return tx.SendBatch(b.ctx, batch).Close()
	})
	if err != nil || len(queued) != 0 {
		t.Fatalf("QueueCancelExpired = %v, %v", queued, err)
	}
	if n := b.count(t, "orders WHERE status IN (10, 20)"); n != 5 {
		t.Fatalf("%d open orders left, want the 5 not yet expired", n)
	}
	if f, err := b.store.Audit(b.ctx, b.pool); err != nil || len(f) != 0 {
		t.Fatalf("Audit = %v, %v", f, err)
	}
}

// TestExpiryUsesPartialIndex: with 20,000 orders of which 1% are open, the
// planner answers both expiry statements from idx_orders_expirable.
func TestExpiryUsesPartialIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `INSERT INTO orders (order_id, order_no, request_id, reservation_id, source_message_id,
		activity_id, sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency,
		status, expire_at, paid_at)
	SELECT g, 'N' || g, gen_random_uuid(), gen_random_uuid(), gen_random_uuid(),
		1, 100, g, 0, 1, 100, 100, 'CNY',
		CASE WHEN g % 100 = 0 THEN 10 ELSE 30 END,
		statement_timestamp() - g * interval '1 second',
		CASE WHEN g % 100 = 0 THEN NULL ELSE statement_timestamp() END
	FROM generate_series(1, 20000) AS g`)
	b.exec(t, `ANALYZE orders`)
	for name, sql := range map[string]string{"DueForExpiry": b.store.DueForExpirySQL(), "CancelExpired": b.store.CancelExpiredSQL()} {
		var plan string
		err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(b.ctx, "EXPLAIN "+sql, 100)
			if err != nil {
				return err
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			plan = strings.Join(lines, "\n")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s plan:\n%s", name, plan)
		if !strings.Contains(plan, "idx_orders_expirable") || strings.Contains(plan, "Seq Scan on orders") {
			t.Errorf("%s does not use idx_orders_expirable:\n%s", name, plan)
		}
	}
	err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		res, err := b.store.CancelExpired(b.ctx, tx, 1000)
		if err == nil && len(res) != 200 {
			t.Errorf("cancelled %d, want the 200 open orders", len(res))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestExpiryLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		for _, limit := range []int{0, -1, 10000 + 1} {
			if _, err := b.store.DueForExpiry(b.ctx, tx, limit); !errors.Is(err, order.ErrInvalidArgument) {
				t.Errorf("DueForExpiry(%d) = %v", limit, err)
			}
			if _, err := b.store.CancelExpired(b.ctx, tx, limit); !errors.Is(err, order.ErrInvalidArgument) {
				t.Errorf("CancelExpired(%d) = %v", limit, err)
			}
			if err := b.store.QueueCancelExpired(&pgx.Batch{}, limit, new([]order.Result)); !errors.Is(err, order.ErrInvalidArgument) {
				t.Errorf("QueueCancelExpired(%d) = %v", limit, err)
			}
		}
		// The bounds are inclusive: 1 and 10,000 are limits.
		for _, limit := range []int{1, 10000} {
			if _, err := b.store.DueForExpiry(b.ctx, tx, limit); err != nil {
				t.Errorf("DueForExpiry(%d) = %v", limit, err)
			}
			if _, err := b.store.CancelExpired(b.ctx, tx, limit); err != nil {
				t.Errorf("CancelExpired(%d) = %v", limit, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
