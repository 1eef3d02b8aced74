package order_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

// force puts an order into status with consistent timestamps, bypassing
// the transition table (test setup only).
func (b testBundle) force(t testing.TB, id int64, s order.Status, expireAt time.Time) {
	t.Helper()
	b.exec(t, `UPDATE orders SET status = $2::smallint,
		paid_at = CASE WHEN $2::smallint IN (30, 60) THEN statement_timestamp() END,
		cancelled_at = CASE WHEN $2::smallint IN (40, 50) THEN statement_timestamp() END,
		cancel_reason = CASE WHEN $2::smallint IN (40, 50) THEN 'TEST' END,
		expire_at = $3
		WHERE order_id = $1`, id, int16(s), expireAt)
}

func (b testBundle) transition(tr order.Transition) (order.Result, error) {
	var (
		res order.Result
		err error
	)
	txErr := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		res, err = b.store.TransitionOrder(b.ctx, tx, tr)
		return nil
	})
	if txErr != nil {
		return res, txErr
	}
	return res, err
}

// TestTransitionTable drives every (from, to) pair of statuses through
// TransitionOrder and checks the outcome against the table: Changed with
// the right timestamps, AlreadyInState without a write, or
// IllegalTransitionError without a write; plus not-yet-expired timeout
// cancels and unknown orders.
func TestTransitionTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)

	type target struct {
		name string
		tr   func(id int64) order.Transition
	}
	targets := []target{
		{"PAYING", func(id int64) order.Transition { return order.Transition{OrderID: id, To: order.StatusPaying} }},
		{"PAID", func(id int64) order.Transition { return order.Transition{OrderID: id, To: order.StatusPaid} }},
		{"CANCELLED(user)", userCancel},
		{"CANCELLED(timeout)", order.TimeoutCancel},
		{"REFUND_PENDING", func(id int64) order.Transition { return order.Transition{OrderID: id, To: order.StatusRefundPending} }},
		{"CLOSED", func(id int64) order.Transition { return order.Transition{OrderID: id, To: order.StatusClosed} }},
	}
	user := int64(0)
	for _, from := range order.Statuses() {
		for _, tg := range targets {
			for _, expire := range []time.Time{past, future} {
				name := fmt.Sprintf("%s->%s/expired=%v", from, tg.name, expire.Equal(past))
				user++
				o := b.create(t, newOrder(user))
				b.force(t, o.OrderID, from, expire)
				before, err := b.store.Get(b.ctx, b.pool, seckill.Request{OrderID: o.OrderID})
				if err != nil {
					t.Fatal(err)
				}
				tr := tg.tr(o.OrderID)
				res, err := b.transition(tr)
				after, gerr := b.store.Get(b.ctx, b.pool, seckill.Request{OrderID: o.OrderID})
				if gerr != nil {
					t.Fatal(gerr)
				}
				unchanged := after.Version == before.Version && after.Status == before.Status && after.UpdatedAt.Equal(before.UpdatedAt)
				switch {
				case from == tr.To:
					if err != nil || !res.Existing || res.Changed || !unchanged || res.Order.Status != from {
						t.Errorf("%s: got %+v, %v; want AlreadyInState, nothing written", name, res, err)
					}
				case !order.CanTransition(from, tr.To):
					var ie *order.Error
					if !errors.As(err, &ie) || !errors.Is(err, order.ErrIllegalTransition) ||
						ie.From != from || ie.To != tr.To || ie.OrderID != o.OrderID || !unchanged ||
						res.From != from || res.Order.OrderID != o.OrderID {
						t.Errorf("%s: got %v; want IllegalTransitionError{%s, %s}, nothing written", name, err, from, tr.To)
					}
				case tr.OnlyIfExpired && expire.Equal(future):
					var ne *order.Error
					if !errors.As(err, &ne) || !errors.Is(err, order.ErrNotExpired) || ne.From != from || !unchanged ||
						res.From != from || !ne.Order.ExpireAt.Equal(before.ExpireAt) {
						t.Errorf("%s: got %v; want NotExpiredError, nothing written", name, err)
					}
				default:
					if err != nil || !res.Changed || res.Existing || res.From != from {
						t.Errorf("%s: got %+v, %v; want Changed from %s", name, res, err, from)
						continue
					}
					if after.Status != tr.To || after.Version != before.Version+1 || res.Order.Version != after.Version ||
						res.Order.Status != tr.To {
						t.Errorf("%s: after = %+v (result %+v)", name, after, res.Order)
					}
					if res.Order.ReservationID != o.ReservationID || res.Order.Bucket != o.Bucket || res.Order.Quantity != 1 ||
						res.Order.SKUID != o.SKUID || res.Order.UserID != o.UserID || res.Order.TotalAmount != o.TotalAmount {
						t.Errorf("%s: result lacks the order's data: %+v", name, res.Order)
					}
					switch tr.To {
					case order.StatusPaid:
						if after.PaidAt == nil || after.CancelledAt != nil {
							t.Errorf("%s: paid_at %v cancelled_at %v", name, after.PaidAt, after.CancelledAt)
						}
					case order.StatusCancelled:
						if after.CancelledAt == nil || after.CancelReason != tr.CancelReason || after.PaidAt != nil {
							t.Errorf("%s: cancelled_at %v reason %q paid_at %v", name, after.CancelledAt, after.CancelReason, after.PaidAt)
						}
					}
				}
			}
		}
	}
	for _, tg := range targets {
		if _, err := b.transition(tg.tr(999)); !errors.Is(err, order.ErrNotFound) {
			t.Errorf("%s on unknown order: %v, want ErrNotFound", tg.name, err)
		}
	}
	if f, err := b.store.Audit(b.ctx, b.pool); err != nil || len(f) != 0 {
		t.Fatalf("Audit = %v, %v", f, err)
	}
}

// TestTransitionRepeatedCancelReportsOnce: of many cancels of one order,
// exactly one is Changed; the others are AlreadyInState.
func TestTransitionRepeatedCancelReportsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.create(t, newOrder(1))
	b.force(t, o.OrderID, order.StatusCreated, time.Now().Add(-time.Minute))
	changed := 0
	for i := range 5 {
		tr := order.TimeoutCancel(o.OrderID)
		if i%2 == 1 {
			tr = userCancel(o.OrderID)
		}
		res, err := b.transition(tr)
		if err != nil {
			t.Fatal(err)
		}
		if res.Changed {
			changed++
		} else if !res.Existing {
			t.Fatalf("neither Changed nor AlreadyInState: %+v", res)
		}
	}
	if changed != 1 {
		t.Fatalf("%d cancels Changed, want 1", changed)
	}
}

func TestQueueTransitionOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o1, o2, o3 := b.create(t, newOrder(1)), b.create(t, newOrder(2)), b.create(t, newOrder(3))
	var r1, r2, r3 order.Result
	err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		for _, q := range []struct {
			tr  order.Transition
			dst *order.Result
		}{
			{order.Transition{OrderID: o1.OrderID, To: order.StatusPaying}, &r1},
			{order.Transition{OrderID: o2.OrderID, To: order.StatusPaid}, &r2},
			{userCancel(o3.OrderID), &r3},
		} {
			if err := b.store.QueueTransitionOrder(batch, q.tr, q.dst, pgtx.Return); err != nil {
				return err
			}
		}
		return tx.SendBatch(b.ctx, batch).Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if !r1.Changed || r1.Order.Status != order.StatusPaying || !r2.Changed || r2.Order.PaidAt == nil ||
		!r3.Changed || r3.Order.CancelReason != "USER_CANCEL" || r3.Order.ReservationID != o3.ReservationID {
		t.Fatalf("results %+v %+v %+v", r1, r2, r3)
	}
	// Classified errors come back from Close.
	var r order.Result
	err = inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		if err := b.store.QueueTransitionOrder(batch, order.TimeoutCancel(o2.OrderID), &r, pgtx.Return); err != nil {
			return err
		}
		return tx.SendBatch(b.ctx, batch).Close()
	})
	var ie *order.Error
	if !errors.As(err, &ie) || !errors.Is(err, order.ErrIllegalTransition) || ie.From != order.StatusPaid {
		t.Fatalf("queued cancel of a paid order: %v", err)
	}
	err = inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		if err := b.store.QueueTransitionOrder(batch, userCancel(12345), &r, pgtx.Return); err != nil {
			return err
		}
		return tx.SendBatch(b.ctx, batch).Close()
	})
	if !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("queued cancel of unknown order: %v", err)
	}
}

// TestTransitionConcurrentCancelsClassifiedOnce: 50 expired orders, each
// cancelled by 8 concurrent transactions (timeout and user cancels mixed).
// Per order exactly one call is Changed and every other one is
// AlreadyInState — never an error, which a classification reading a stale
// snapshot would produce (it would see CREATED and find no reason for the
// 0-row UPDATE).
func TestTransitionConcurrentCancelsClassifiedOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
	b := setupWith(t, pool)
	const orders, callers = 50, 8
	ids := make([]int64, orders)
	for i := range ids {
		in := newOrder(int64(i + 1))
		in.ExpireAt = time.Now().Add(-time.Second)
		ids[i] = b.create(t, in).OrderID
	}
	res := make([][]order.Result, orders)
	errs := make([][]error, orders)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range orders {
		res[i] = make([]order.Result, callers)
		errs[i] = make([]error, callers)
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tr := order.TimeoutCancel(ids[i])
				if c%2 == 1 {
					tr = userCancel(ids[i])
				}
				<-start
				res[i][c], errs[i][c] = b.transition(tr)
			}()
		}
	}
	close(start)
	testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
	for i := range orders {
		changed := 0
		for c := range callers {
			if errs[i][c] != nil {
				t.Fatalf("order %d caller %d: %v", i, c, errs[i][c])
			}
			switch r := res[i][c]; {
			case r.Changed:
				changed++
			case !r.Existing:
				t.Fatalf("order %d caller %d: %+v", i, c, r)
			}
		}
		if changed != 1 {
			t.Fatalf("order %d: %d cancels Changed, want 1", i, changed)
		}
	}
}

// TestClosingACancelledOrderKeepsItsCancel: CLOSED after CANCELLED keeps
// cancelled_at and cancel_reason (only a cancel writes them), in both
// forms of the transition statement (pgtx.Return and pgtx.Abort).
func TestClosingACancelledOrderKeepsItsCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, on := range []pgtx.OnRefusal{pgtx.Return, pgtx.Abort} {
		mode := map[pgtx.OnRefusal]string{pgtx.Return: "Return", pgtx.Abort: "Abort"}[on]
		o := b.create(t, newOrder(int64(i+1)))
		cancelled, err := b.transition(userCancel(o.OrderID))
		if err != nil || !cancelled.Changed || cancelled.Order.CancelledAt == nil {
			t.Fatalf("cancel: %+v, %v", cancelled, err)
		}
		var (
			res   order.Result
			batch pgx.Batch
		)
		if err := b.store.QueueTransitionOrder(&batch, order.Transition{OrderID: o.OrderID, To: order.StatusClosed}, &res, on); err != nil {
			t.Fatal(err)
		}
		if err := pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, &batch); err != nil || !res.Changed {
			t.Fatalf("close (%s): %+v, %v", mode, res, err)
		}
		for _, got := range []order.Order{res.Order, b.get(t, o.OrderID)} {
			if got.Status != order.StatusClosed || got.CancelReason != "USER_CANCEL" || got.CancelledAt == nil ||
				!got.CancelledAt.Equal(*cancelled.Order.CancelledAt) || got.PaidAt != nil {
				t.Fatalf("closed order (%s) = %+v; want the cancel's reason and time %v", mode, got, *cancelled.Order.CancelledAt)
			}
		}
	}
}
