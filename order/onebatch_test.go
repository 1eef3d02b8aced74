package order_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

func TestQueueCreateOrAbort(t *testing.T) {
	t.Parallel()
	for _, citus := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "citus"}[citus], func(t *testing.T) {
			t.Parallel()
			queueCreateOrAbort(t, setupCfg(t, pgtest.Pool(t), order.Config{Citus: citus}))
		})
	}
}

func queueCreateOrAbort(t *testing.T, b testBundle) {
	create := func(in order.NewOrder) error {
		var batch pgx.Batch
		if err := b.store.QueueCreateOrAbort(&batch, in); err != nil {
			t.Fatal(err)
		}
		return pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, &batch)
	}
	first := newOrder(1)
	if err := create(first); err != nil {
		t.Fatalf("new order: %v", err)
	}
	got, err := b.store.Get(b.ctx, b.pool, first.OrderID)
	if err != nil || got.Status != order.StatusCreated || got.TotalAmount != first.UnitPrice || got.UserID != 1 {
		t.Fatalf("order = %+v, %v", got, err)
	}
	items, err := b.store.Items(b.ctx, b.pool, first.OrderID)
	if err != nil || len(items) != 1 || items[0].SKUTitle != first.SKUTitle || items[0].LineAmount != first.UnitPrice {
		t.Fatalf("items = %+v, %v", items, err)
	}

	// Every conflict raises at the order insert (statement 0); nothing is
	// written, not even the item line.
	sameUser := newOrder(1)
	sameRequest := newOrder(2)
	sameRequest.RequestID = first.RequestID
	sameReservation := newOrder(3)
	sameReservation.ReservationID = first.ReservationID
	sameMessage := newOrder(4)
	sameMessage.SourceMessageID = first.SourceMessageID
	sameID := newOrder(5)
	sameID.OrderID = first.OrderID
	for name, c := range map[string]struct {
		in         order.NewOrder
		constraint string
		sentinel   error
	}{
		"buyer already ordered": {sameUser, "uq_orders_user_sku", order.ErrUserAlreadyOrdered},
		"same request":          {sameRequest, "uq_orders_request", order.ErrConflict},
		"same reservation":      {sameReservation, "uq_orders_reservation", order.ErrConflict},
		"same source message":   {sameMessage, "uq_orders_source_message", order.ErrConflict},
		"order id in use":       {sameID, "orders_pkey", order.ErrIDCollision},
	} {
		err := create(c.in)
		var se *pgtx.StatementError
		con, ok := pgtx.UniqueViolationOf(err)
		if !errors.As(err, &se) || se.Index != 0 || !ok || con != c.constraint || !pgtx.Classify(err).NotCommitted {
			t.Fatalf("%s: err = %v, want statement 0 to violate %s", name, err, c.constraint)
		}
		if !errors.Is(err, c.sentinel) || se.Call != fmt.Sprintf("order.Store.QueueCreateOrAbort(order %d)", c.in.OrderID) {
			t.Fatalf("%s: err = %v (call %q), want %v from the named call", name, err, se.Call, c.sentinel)
		}
		for _, other := range []error{order.ErrUserAlreadyOrdered, order.ErrConflict, order.ErrIDCollision} {
			if other != c.sentinel && errors.Is(err, other) {
				t.Fatalf("%s: err = %v also matches %v", name, err, other)
			}
		}
	}
	var orders, lines int
	if err := b.pool.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM `+pgx.Identifier{b.schema, "orders"}.Sanitize()+`),
		(SELECT count(*) FROM `+pgx.Identifier{b.schema, "order_items"}.Sanitize()+`)`).Scan(&orders, &lines); err != nil {
		t.Fatal(err)
	}
	if orders != 1 || lines != 1 {
		t.Fatalf("orders %d, item lines %d; want 1 and 1", orders, lines)
	}

	// Bad input queues nothing.
	var batch pgx.Batch
	bad := newOrder(9)
	bad.SKUTitle = ""
	if err := b.store.QueueCreateOrAbort(&batch, bad); !errors.Is(err, order.ErrInvalidArgument) || batch.Len() != 0 {
		t.Fatalf("bad order: %v, %d queued", err, batch.Len())
	}
	bad = newOrder(9)
	bad.ReservationID = uuid.Nil
	if err := b.store.QueueCreateOrAbort(&batch, bad); !errors.Is(err, order.ErrInvalidArgument) || batch.Len() != 0 {
		t.Fatalf("bad order: %v, %d queued", err, batch.Len())
	}
	if err := b.store.QueueCreateOrAbort(nil, newOrder(9)); !errors.Is(err, order.ErrInvalidArgument) {
		t.Fatalf("nil batch: %v", err)
	}
}
