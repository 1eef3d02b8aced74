package order_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

func TestCreate(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, citus bool) {
		b := setupCfg(t, pgtest.Pool(t), order.Config{Citus: citus})
		in := newOrder(7)
		o := b.create(t, in)
		if o.OrderID != in.OrderID || o.OrderNo != in.OrderNo || o.Currency != in.Currency || o.Status != order.StatusCreated ||
			o.TotalAmount != 9900 || o.Version != 0 || o.PaidAt != nil || o.CancelledAt != nil || o.CreatedAt.IsZero() {
			t.Fatalf("created order = %+v", o)
		}
		items, err := b.store.Items(b.ctx, b.pool, o.OrderID)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != 1 || items[0].LineNo != 1 || items[0].LineAmount != 9900 || items[0].SKUTitle != in.SKUTitle {
			t.Fatalf("items = %+v", items)
		}
		got, err := b.store.Get(b.ctx, b.pool, seckill.Request{OrderID: o.OrderID})
		if err != nil || got.OrderID != o.OrderID || got.RequestID != in.RequestID {
			t.Fatalf("Get = %+v, %v", got, err)
		}
		got, err = b.store.Get(b.ctx, b.pool, seckill.Request{RequestID: in.RequestID})
		if err != nil || got.OrderID != o.OrderID {
			t.Fatalf("GetByRequest = %+v, %v", got, err)
		}
		if _, err := b.store.Get(b.ctx, b.pool, seckill.Request{OrderID: 12345}); !errors.Is(err, order.ErrNotFound) {
			t.Fatalf("Get missing: %v", err)
		}
		if by, err := b.store.Get(b.ctx, b.pool, seckill.Request{ActivityID: in.ActivityID, SKUID: in.SKUID, UserID: in.UserID}); err != nil || by.OrderID != in.OrderID {
			t.Fatalf("Get by buyer = %+v, %v", by, err)
		}
		// The same buyer's orders of another activity and of another SKU:
		// each key names its own order.
		otherActivity, otherSKU := newOrder(in.UserID), newOrder(in.UserID)
		otherActivity.ActivityID = in.ActivityID + 1
		otherSKU.SKUID = in.SKUID + 1
		b.create(t, otherActivity)
		b.create(t, otherSKU)
		for _, want := range []order.NewOrder{in, otherActivity, otherSKU} {
			by, err := b.store.Get(b.ctx, b.pool, seckill.Request{ActivityID: want.ActivityID, SKUID: want.SKUID, UserID: want.UserID})
			if err != nil || by.OrderID != want.OrderID {
				t.Fatalf("Get by buyer (activity %d, SKU %d) = order %d, %v; want %d", want.ActivityID, want.SKUID, by.OrderID, err, want.OrderID)
			}
		}
		if _, err := b.store.Get(b.ctx, b.pool, seckill.Request{ActivityID: in.ActivityID, SKUID: in.SKUID, UserID: in.UserID + 1000}); !errors.Is(err, order.ErrNotFound) {
			t.Fatalf("Get by buyer missing: %v", err)
		}
		if _, err := b.store.Get(b.ctx, b.pool, seckill.Request{SKUID: in.SKUID, UserID: in.UserID}); !errors.Is(err, order.ErrInvalidArgument) {
			t.Fatalf("Get by buyer bad input: %v", err)
		}
		if _, err := b.store.Get(b.ctx, b.pool, seckill.Request{RequestID: uuid.New()}); !errors.Is(err, order.ErrNotFound) {
			t.Fatalf("Get by request missing: %v", err)
		}
	})
}

// createOnce runs Create in its own transaction and returns its outcome.
func (b testBundle) createOnce(in order.NewOrder) (order.Result, error) {
	var (
		res       order.Result
		createErr error
	)
	err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		res, createErr = b.store.Create(b.ctx, tx, in)
		if errors.Is(createErr, order.ErrUserAlreadyOrdered) || errors.Is(createErr, order.ErrIDCollision) ||
			errors.Is(createErr, order.ErrModel) {
			// Classified outcomes do not abort the transaction: commit
			// it, as a consumer that rejects the reservation would.
			return nil
		}
		return createErr
	})
	if err == nil {
		err = createErr
	}
	if err == nil && !res.Existing && res.Order.OrderID == 0 {
		return res, errors.New("no order and no error")
	}
	return res, err
}

func TestCreateConflictClassification(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, citus bool) {
		b := setupCfg(t, pgtest.Pool(t), order.Config{Citus: citus})
		first := newOrder(1)
		o := b.create(t, first)

		// Pay it so that Existing reports the current status.
		if _, err := b.store.TransitionOrder(b.ctx, b.pool, order.Transition{OrderID: o.OrderID, To: order.StatusPaid}); err != nil {
			t.Fatal(err)
		}

		t.Run("same request id", func(t *testing.T) {
			in := newOrder(1)
			in.RequestID = first.RequestID
			res, err := b.createOnce(in)
			if err != nil || !res.Existing || res.Order.OrderID != o.OrderID || res.Order.Status != order.StatusPaid {
				t.Fatalf("got %+v, %v; want Existing order %d PAID", res, err, o.OrderID)
			}
		})
		t.Run("same reservation id", func(t *testing.T) {
			in := newOrder(1)
			in.ReservationID = first.ReservationID
			res, err := b.createOnce(in)
			if err != nil || !res.Existing || res.Order.OrderID != o.OrderID {
				t.Fatalf("got %+v, %v", res, err)
			}
		})
		t.Run("same source message", func(t *testing.T) {
			in := newOrder(1)
			in.MessageID = first.MessageID
			res, err := b.createOnce(in)
			if err != nil || !res.Existing || res.Order.OrderID != o.OrderID {
				t.Fatalf("got %+v, %v", res, err)
			}
		})
		t.Run("exact redelivery", func(t *testing.T) {
			res, err := b.createOnce(first)
			if err != nil || !res.Existing || res.Order.OrderID != o.OrderID {
				t.Fatalf("got %+v, %v", res, err)
			}
		})
		t.Run("same user other request", func(t *testing.T) {
			_, err := b.createOnce(newOrder(1))
			var ua *order.Error
			if !errors.As(err, &ua) || !errors.Is(err, order.ErrUserAlreadyOrdered) || ua.Order.OrderID != o.OrderID {
				t.Fatalf("got %v; want UserAlreadyOrdered(%d)", err, o.OrderID)
			}
		})
		t.Run("order id collision", func(t *testing.T) {
			in := newOrder(2)
			in.OrderID = first.OrderID
			in.OrderNo = "OTHER-NO"
			_, err := b.createOnce(in)
			var ce *order.Error
			if !errors.As(err, &ce) || ce.Field != "order_id" || !errors.Is(err, order.ErrIDCollision) {
				t.Fatalf("got %v; want order_id collision", err)
			}
		})
		t.Run("order no collision", func(t *testing.T) {
			in := newOrder(3)
			in.OrderNo = o.OrderNo
			_, err := b.createOnce(in)
			var ce *order.Error
			if !errors.As(err, &ce) || ce.Field != "order_no" || !errors.Is(err, order.ErrIDCollision) {
				t.Fatalf("got %v; want order_no collision", err)
			}
		})
		// A request, reservation or message id reused by another user's
		// order is a model error naming the order that holds it: the
		// classification must find that order by the reused key alone.
		for i, reuse := range []struct {
			key string
			set func(*order.NewOrder)
		}{
			{"request", func(in *order.NewOrder) { in.RequestID = first.RequestID }},
			{"reservation", func(in *order.NewOrder) { in.ReservationID = first.ReservationID }},
			{"message", func(in *order.NewOrder) { in.MessageID = first.MessageID }},
		} {
			t.Run(reuse.key+" reused by another user", func(t *testing.T) {
				in := newOrder(int64(4 + i))
				reuse.set(&in)
				_, err := b.createOnce(in)
				var me *order.Error
				if !errors.As(err, &me) || !errors.Is(err, order.ErrModel) || me.OrderID != o.OrderID {
					t.Fatalf("got %v; want ErrModel naming order %d", err, o.OrderID)
				}
			})
		}
		if n := b.count(t, "orders"); n != 1 {
			t.Fatalf("%d orders, want 1", n)
		}
		if n := b.count(t, "order_items"); n != 1 {
			t.Fatalf("%d order items, want 1", n)
		}
	})
}

// TestCreateSameUserConcurrently: 2,000 concurrent creates for one (activity,
// sku, user), each with its own request, reservation and message, each in
// its own transaction: exactly one order, every other call gets
// ErrUserAlreadyOrdered carrying that order's id.
func TestCreateSameUserConcurrently(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, citus bool) {
		pool := pgtest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 24 })
		b := setupCfg(t, pool, order.Config{Citus: citus})
		const n = 2000
		type outcome struct {
			res order.Result
			err error
		}
		outs := make([]outcome, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				outs[i].res, outs[i].err = b.createOnce(newOrder(42))
			}()
		}
		close(start)
		testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")

		var winner int64
		created, already := 0, 0
		for _, o := range outs {
			if o.err == nil && !o.res.Existing {
				created++
				winner = o.res.Order.OrderID
			}
		}
		if created != 1 {
			t.Fatalf("%d creates succeeded, want 1", created)
		}
		for i, o := range outs {
			if o.err == nil {
				continue
			}
			var ua *order.Error
			if !errors.As(o.err, &ua) || !errors.Is(o.err, order.ErrUserAlreadyOrdered) || ua.Order.OrderID != winner {
				t.Fatalf("call %d: %v; want UserAlreadyOrdered(%d)", i, o.err, winner)
			}
			already++
		}
		if already != n-1 {
			t.Fatalf("%d ErrUserAlreadyOrdered, want %d", already, n-1)
		}
		if c := b.count(t, "orders WHERE activity_id = 1 AND sku_id = 100 AND user_id = 42"); c != 1 {
			t.Fatalf("%d orders for the user, want 1", c)
		}
		if c := b.count(t, "order_items"); c != 1 {
			t.Fatalf("%d items, want 1", c)
		}
	})
}

// TestCreateRedeliveredConcurrently: the same request delivered 200 times
// at once (each delivery with its own generated order id): one order, every
// other delivery gets Existing with that order.
func TestCreateRedeliveredConcurrently(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, citus bool) {
		pool := pgtest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
		b := setupCfg(t, pool, order.Config{Citus: citus})
		const n = 200
		base := newOrder(9)
		res := make([]order.Result, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := base
				if i%2 == 1 {
					in.OrderID = ids.Next() // a consumer that generates ids itself
					in.OrderNo = orderNo(in.OrderID)
				}
				<-start
				res[i], errs[i] = b.createOnce(in)
			}()
		}
		close(start)
		testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
		created, existing := 0, 0
		var id int64
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("delivery %d: %v", i, errs[i])
			}
			if res[i].Existing {
				existing++
			} else {
				created++
				id = res[i].Order.OrderID
			}
		}
		if created != 1 || existing != n-1 {
			t.Fatalf("created %d existing %d; want 1 and %d", created, existing, n-1)
		}
		for i := range n {
			if res[i].Order.OrderID != id {
				t.Fatalf("delivery %d got order %d, want %d", i, res[i].Order.OrderID, id)
			}
		}
		if c := b.count(t, "orders"); c != 1 {
			t.Fatalf("%d orders, want 1", c)
		}
	})
}

func TestQueueCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in1, in2 := newOrder(1), newOrder(2)
	var r1, r2 order.Result
	err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		if err := b.store.QueueCreate(batch, in1, &r1, pgtx.Return); err != nil {
			return err
		}
		if err := b.store.QueueCreate(batch, in2, &r2, pgtx.Return); err != nil {
			return err
		}
		return tx.SendBatch(b.ctx, batch).Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Order.OrderID != in1.OrderID || r2.Order.OrderID != in2.OrderID || r1.Existing || r2.Existing {
		t.Fatalf("results %+v %+v", r1, r2)
	}

	// A conflicting queued insert reports ErrConflict; ClassifyConflict
	// explains it in the same transaction.
	dup := newOrder(1)
	var r order.Result
	err = inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		if err := b.store.QueueCreate(batch, dup, &r, pgtx.Return); err != nil {
			return err
		}
		err := tx.SendBatch(b.ctx, batch).Close()
		if !errors.Is(err, order.ErrConflict) {
			t.Errorf("batch error %v, want ErrConflict", err)
		}
		_, err = b.store.ClassifyConflict(b.ctx, tx, dup)
		var ua *order.Error
		if !errors.As(err, &ua) || !errors.Is(err, order.ErrUserAlreadyOrdered) || ua.Order.OrderID != in1.OrderID {
			t.Errorf("ClassifyConflict = %v, want UserAlreadyOrdered(%d)", err, in1.OrderID)
		}
		redo, err := b.store.ClassifyConflict(b.ctx, tx, in2)
		if err != nil || !redo.Existing || redo.Order.OrderID != in2.OrderID {
			t.Errorf("ClassifyConflict(redelivery) = %+v, %v", redo, err)
		}
		// The documented way: Create again with the same input, in the
		// same transaction, writes nothing and classifies.
		_, err = b.store.Create(b.ctx, tx, dup)
		if !errors.As(err, &ua) || !errors.Is(err, order.ErrUserAlreadyOrdered) || ua.Order.OrderID != in1.OrderID {
			t.Errorf("Create after the queued conflict = %v, want UserAlreadyOrdered(%d)", err, in1.OrderID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := b.count(t, "orders"); c != 2 {
		t.Fatalf("%d orders, want 2", c)
	}
}

// TestDefaultCurrency: the library picks no currency; a Store configured
// with one fills it into orders and payments that leave it empty.
func TestDefaultCurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	usd, err := order.New(order.Config{Schema: b.schema, DefaultCurrency: "USD"})
	if err != nil {
		t.Fatal(err)
	}
	in := newOrder(8)
	in.Currency = ""
	var res order.Result
	if err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		res, err = usd.Create(b.ctx, tx, in)
		return err
	}); err != nil || res.Order.Currency != "USD" {
		t.Fatalf("Create with the default: %+v, %v", res.Order, err)
	}
	p := newPayment(res.Order)
	p.Currency = ""
	if err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := usd.RecordPayment(b.ctx, tx, p)
		return err
	}); err != nil {
		t.Fatalf("RecordPayment with the default: %v", err)
	}
	// The same order without a configured default is refused, writing nothing.
	in2 := newOrder(9)
	in2.Currency = ""
	if err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.store.Create(b.ctx, tx, in2)
		return err
	}); !errors.Is(err, order.ErrInvalidArgument) {
		t.Fatalf("Create without a currency: %v, want ErrInvalidArgument", err)
	}
	if n := b.count(t, "orders"); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}
