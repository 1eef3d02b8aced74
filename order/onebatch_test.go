package order_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

func TestQueueCreateAbort(t *testing.T) {
	t.Parallel()
	for _, citus := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "citus"}[citus], func(t *testing.T) {
			t.Parallel()
			queueCreateAbort(t, setupCfg(t, pgtest.Pool(t), order.Config{Citus: citus}))
		})
	}
}

func queueCreateAbort(t *testing.T, b testBundle) {
	create := func(in order.NewOrder) error {
		var batch pgx.Batch
		if err := b.store.QueueCreate(&batch, in, nil, pgtx.Abort); err != nil {
			t.Fatal(err)
		}
		return pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, &batch)
	}
	first := newOrder(1)
	if err := create(first); err != nil {
		t.Fatalf("new order: %v", err)
	}
	got, err := b.store.Get(b.ctx, b.pool, seckill.Request{OrderID: first.OrderID})
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
	sameMessage.MessageID = first.MessageID
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
		if !errors.Is(err, c.sentinel) || se.Call != fmt.Sprintf("order.Store.QueueCreate(order %d)", c.in.OrderID) {
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
	if err := b.store.QueueCreate(&batch, bad, nil, pgtx.Abort); !errors.Is(err, order.ErrInvalidArgument) || batch.Len() != 0 {
		t.Fatalf("bad order: %v, %d queued", err, batch.Len())
	}
	bad = newOrder(9)
	bad.ReservationID = uuid.Nil
	if err := b.store.QueueCreate(&batch, bad, nil, pgtx.Abort); !errors.Is(err, order.ErrInvalidArgument) || batch.Len() != 0 {
		t.Fatalf("bad order: %v, %d queued", err, batch.Len())
	}
	if err := b.store.QueueCreate(nil, newOrder(9), nil, pgtx.Abort); !errors.Is(err, order.ErrInvalidArgument) {
		t.Fatalf("nil batch: %v", err)
	}
}

// TestQueueTransitionOrderAbort: with pgtx.Abort a refused transition
// raises on the server (nothing of the batch commits) and the error names
// the call and matches the sentinel; an allowed or idempotent one commits
// with dst filled.
func TestQueueTransitionOrderAbort(t *testing.T) {
	t.Parallel()
	for _, citus := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "citus"}[citus], func(t *testing.T) {
			t.Parallel()
			b := setupCfg(t, pgtest.Pool(t), order.Config{Citus: citus})
			o := b.create(t, newOrder(1))
			future := b.create(t, newOrder(2))
			marker := newOrder(3)
			run := func(tr order.Transition, dst *order.Result) error {
				var batch pgx.Batch
				if err := b.store.QueueTransitionOrder(&batch, tr, dst, pgtx.Abort); err != nil {
					t.Fatal(err)
				}
				// A later statement of the batch: committed only when the
				// transition is not refused.
				if err := b.store.QueueCreate(&batch, marker, nil, pgtx.Abort); err != nil {
					t.Fatal(err)
				}
				return pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, &batch)
			}
			for name, c := range map[string]struct {
				tr       order.Transition
				sentinel error
			}{
				"no such order":  {order.Transition{OrderID: 987654321, To: order.StatusPaying}, order.ErrNotFound},
				"illegal":        {order.Transition{OrderID: o.OrderID, To: order.StatusRefundPending}, order.ErrIllegalTransition},
				"not expired":    {order.TimeoutCancel(future.OrderID), order.ErrNotExpired},
				"illegal cancel": {order.Transition{OrderID: o.OrderID, To: order.StatusClosed}, order.ErrIllegalTransition},
			} {
				err := run(c.tr, nil)
				var se *pgtx.StatementError
				if !errors.Is(err, c.sentinel) || !errors.As(err, &se) || se.Index != 0 || !pgtx.Classify(err).NotCommitted ||
					se.Call != fmt.Sprintf("order.Store.QueueTransitionOrder(order %d)", c.tr.OrderID) {
					t.Fatalf("%s: err = %v, want %v from the named call", name, err, c.sentinel)
				}
				for _, other := range []error{order.ErrNotFound, order.ErrIllegalTransition, order.ErrNotExpired} {
					if other != c.sentinel && errors.Is(err, other) {
						t.Fatalf("%s: err = %v also matches %v", name, err, other)
					}
				}
				if n := b.count(t, "orders WHERE order_id = $1", marker.OrderID); n != 0 {
					t.Fatalf("%s: the batch's later insert committed", name)
				}
			}
			var res order.Result
			if err := run(order.Transition{OrderID: o.OrderID, To: order.StatusPaying}, &res); err != nil ||
				!res.Changed || res.Existing || res.From != order.StatusCreated || res.Order.Status != order.StatusPaying {
				t.Fatalf("allowed transition: %+v, %v", res, err)
			}
			if got := b.get(t, o.OrderID); got.Status != order.StatusPaying || b.count(t, "orders WHERE order_id = $1", marker.OrderID) != 1 {
				t.Fatalf("allowed transition did not commit whole: %+v", got)
			}
			marker = newOrder(4)
			if err := run(order.Transition{OrderID: o.OrderID, To: order.StatusPaying}, &res); err != nil ||
				res.Changed || !res.Existing || res.From != order.StatusPaying {
				t.Fatalf("repeated transition: %+v, %v", res, err)
			}
			// A timeout cancel of an expired order is allowed; so is PAID,
			// which writes no cancel.
			late := b.create(t, newOrder(5))
			b.force(t, late.OrderID, order.StatusCreated, time.Now().Add(-time.Minute))
			marker = newOrder(6)
			if err := run(order.TimeoutCancel(late.OrderID), &res); err != nil || !res.Changed ||
				res.Order.Status != order.StatusCancelled || res.Order.CancelReason != "PAY_TIMEOUT" || res.Order.CancelledAt == nil {
				t.Fatalf("timeout cancel of an expired order: %+v, %v", res, err)
			}
			marker = newOrder(7)
			if err := run(order.Transition{OrderID: o.OrderID, To: order.StatusPaid}, &res); err != nil || !res.Changed ||
				res.Order.Status != order.StatusPaid || res.Order.PaidAt == nil || res.Order.CancelledAt != nil || res.Order.CancelReason != "" {
				t.Fatalf("PAYING to PAID: %+v, %v", res, err)
			}
		})
	}
}

// TestQueueRecordPaymentAbort: with pgtx.Abort a refused payment (unknown
// order, amount or currency mismatch, a payment already recorded) raises
// on the server; an accepted one commits with dst filled.
func TestQueueRecordPaymentAbort(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.create(t, newOrder(1))
	run := func(p order.Payment, dst *order.PaymentResult) error {
		var batch pgx.Batch
		if err := b.store.QueueRecordPayment(&batch, p, dst, pgtx.Abort); err != nil {
			t.Fatal(err)
		}
		return pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, &batch)
	}
	unknown := newPayment(o)
	unknown.OrderID = 987654321
	amount := newPayment(o)
	amount.Amount++
	currency := newPayment(o)
	currency.Currency = "USD"
	for name, c := range map[string]struct {
		p        order.Payment
		sentinel error
		code     string
	}{
		"unknown order": {unknown, order.ErrNotFound, "SK101"},
		"amount":        {amount, order.ErrMismatch, "SK104"},
		"currency":      {currency, order.ErrMismatch, "SK105"},
	} {
		err := run(c.p, nil)
		var se *pgtx.StatementError
		var pgErr *pgconn.PgError
		if !errors.Is(err, c.sentinel) || !errors.As(err, &se) || !errors.As(err, &pgErr) || pgErr.Code != c.code ||
			se.Call != fmt.Sprintf("order.Store.QueueRecordPayment(order %d)", c.p.OrderID) {
			t.Fatalf("%s: err = %v, want %v (%s) from the named call", name, err, c.sentinel, c.code)
		}
	}
	if n := b.count(t, "payment_record"); n != 0 {
		t.Fatalf("%d payments after refusals", n)
	}
	p := newPayment(o)
	var res order.PaymentResult
	if err := run(p, &res); err != nil || res.Kind != order.PaymentPaid || res.PaymentID != p.PaymentID ||
		res.PaymentStatus != order.PaymentSucceeded || res.Order.Status != order.StatusPaid {
		t.Fatalf("payment: %+v, %v", res, err)
	}
	// The same payment again inserts nothing: a conflict, raised.
	if err := run(p, &res); !errors.Is(err, order.ErrConflict) || !pgtx.Classify(err).NotCommitted {
		t.Fatalf("same payment again: %v, want ErrConflict", err)
	}
	// A second trade for the paid order is no refusal: recorded for refund.
	second := newPayment(o)
	if err := run(second, &res); err != nil || res.Kind != order.PaymentOnPaidOrder || res.Refund == nil {
		t.Fatalf("second trade: %+v, %v", res, err)
	}
	if n := b.count(t, "payment_record"); n != 2 {
		t.Fatalf("%d payments, want 2", n)
	}
}
