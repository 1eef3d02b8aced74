package order_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

func exampleStore() (context.Context, *pgxpool.Pool, *order.Store) {
	ctx := context.Background()
	db := seckilltest.Example(order.Migrations) // a fresh schema with the order tables
	store, err := order.New(order.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	return ctx, db.Pool, store
}

// ids makes the order ids of the examples (and of the tests). The id and
// order-number scheme is the service's; a process-wide counter is enough
// here because every example and test works in a fresh schema.
var ids idCounter

type idCounter struct{ last atomic.Int64 }

func (c *idCounter) Next() int64 {
	c.last.CompareAndSwap(0, time.Now().UnixMicro())
	return c.last.Add(1)
}

// orderNo is the examples' order number: derived from the id, so a
// redelivered request derives the same number.
func orderNo(id int64) string { return "SO" + strconv.FormatInt(id, 10) }

func exampleOrder(user int64, expireAt time.Time) order.NewOrder {
	id := ids.Next()
	return order.NewOrder{
		Request: seckill.Request{
			OrderID:       id,
			RequestID:     uuid.New(),
			ReservationID: uuid.New(),
			MessageID:     uuid.New(),
			ActivityID:    2026,
			SKUID:         7,
			UserID:        user,
			Bucket:        3,
			Quantity:      1,
		},
		OrderNo:   orderNo(id),
		UnitPrice: 19900,
		Currency:  "CNY",
		ExpireAt:  expireAt,
		SKUTitle:  "Phone, flash-sale price",
	}
}

func ExampleStore_Create() {
	ctx, pool, store := exampleStore()
	in := exampleOrder(1001, time.Now().Add(15*time.Minute))

	consume := func(in order.NewOrder) {
		err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
			res, err := store.Create(ctx, tx, in)
			var already *order.Error
			switch {
			case errors.Is(err, order.ErrUserAlreadyOrdered) && errors.As(err, &already):
				// Reject the reservation and enqueue the front-door
				// release in this transaction, then commit.
				fmt.Println("user already ordered; existing order is", already.Order.Status)
				return nil
			case err != nil:
				return err
			case res.Existing:
				fmt.Println("redelivery: existing order", res.Order.Status, res.Order.OrderID == in.OrderID)
			default:
				fmt.Println("created", res.Order.Status, res.Order.TotalAmount, res.Order.Currency)
			}
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	consume(in)                              // first delivery
	consume(in)                              // the queue redelivers the message
	consume(exampleOrder(1001, in.ExpireAt)) // the same user buys again
	// Output:
	// created CREATED 19900 CNY
	// redelivery: existing order CREATED true
	// user already ordered; existing order is CREATED
}

// A timeout cancel and its stock release in one transaction: stock is
// released only by the call that Changed the order.
func ExampleStore_TransitionOrder() {
	ctx, pool, store := exampleStore()
	var id int64
	err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		res, err := store.Create(ctx, tx, exampleOrder(1, time.Now().Add(-time.Second)))
		id = res.Order.OrderID
		return err
	})
	if err != nil {
		panic(err)
	}

	for range 2 {
		err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
			res, err := store.TransitionOrder(ctx, tx, order.TimeoutCancel(id))
			if err != nil {
				return err
			}
			if res.Changed {
				o := res.Order
				// Release o.Quantity units of (o.ActivityID, o.SKUID, o.Bucket)
				// for o.ReservationID here, in tx, plus a compensation event.
				fmt.Printf("cancelled from %s: release %d unit of sku %d bucket %d\n", res.From, o.Quantity, o.SKUID, o.Bucket)
			} else if res.Existing {
				fmt.Println("already cancelled: nothing to release")
			}
			return nil
		})
		if err != nil {
			panic(err)
		}
	}

	_, err = store.TransitionOrder(ctx, pool, order.Transition{OrderID: id, To: order.StatusPaid})
	var illegal *order.Error
	if errors.Is(err, order.ErrIllegalTransition) && errors.As(err, &illegal) {
		fmt.Println("cannot pay:", illegal.From, "->", illegal.To)
	}
	// Output:
	// cancelled from CREATED: release 1 unit of sku 7 bucket 3
	// already cancelled: nothing to release
	// cannot pay: CANCELLED -> PAID
}

func ExampleStore_RecordPayment() {
	ctx, pool, store := exampleStore()
	var paid, cancelled order.Order
	err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		r1, err := store.Create(ctx, tx, exampleOrder(1, time.Now().Add(time.Minute)))
		if err != nil {
			return err
		}
		r2, err := store.Create(ctx, tx, exampleOrder(2, time.Now().Add(time.Minute)))
		if err != nil {
			return err
		}
		paid, cancelled = r1.Order, r2.Order
		_, err = store.TransitionOrder(ctx, tx, userCancel(cancelled.OrderID))
		return err
	})
	if err != nil {
		panic(err)
	}

	callback := func(o order.Order, tradeNo string) {
		// pgtx.RunInTx retries the whole transaction on deadlock or
		// serialization failure; RecordPayment is safe to run again.
		err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
			res, err := store.RecordPayment(ctx, tx, order.Payment{
				PaymentID:        uuid.Must(uuid.NewV7()),
				PaymentRequestID: uuid.New(),
				OrderID:          o.OrderID,
				Provider:         "alipay",
				ProviderTradeNo:  tradeNo,
				Amount:           o.TotalAmount,
				Currency:         o.Currency,
			})
			if err != nil {
				return err
			}
			kind := map[order.PaymentKind]string{order.PaymentPaid: "Paid", order.PaymentDuplicate: "Duplicate",
				order.PaymentAfterCancel: "PaidAfterCancel", order.PaymentOnPaidOrder: "PaidOnPaidOrder"}[res.Kind]
			payment := map[order.PaymentStatus]string{order.PaymentSucceeded: "SUCCEEDED", order.PaymentRefundPending: "REFUND_PENDING"}[res.PaymentStatus]
			fmt.Println(kind, "order", res.Order.Status, "payment", payment)
			if res.Refund != nil {
				// Enqueue a REFUND_REQUESTED outbox event in tx.
				fmt.Println("refund", res.Refund.Amount, res.Refund.Currency, "for trade", res.Refund.ProviderTradeNo)
			}
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	callback(paid, "2026113000001")
	callback(paid, "2026113000001") // the provider retries its callback
	callback(cancelled, "2026113000002")
	// Output:
	// Paid order PAID payment SUCCEEDED
	// Duplicate order PAID payment SUCCEEDED
	// PaidAfterCancel order CANCELLED payment REFUND_PENDING
	// refund 19900 CNY for trade 2026113000002
}

// A sweeper cancels expired orders in batches; each returned order's stock
// is released in the same transaction.
func ExampleStore_CancelExpired() {
	ctx, pool, store := exampleStore()
	// A sweep has a deadline of its own, like any background job.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
		for user := range int64(5) {
			expire := time.Now().Add(-time.Minute) // expired
			if user == 4 {
				expire = time.Now().Add(time.Hour)
			}
			if _, err := store.Create(ctx, tx, exampleOrder(user+1, expire)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	for {
		var n int
		err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
			cancelled, err := store.CancelExpired(ctx, tx, 3)
			for _, c := range cancelled {
				_ = c.Order.ReservationID // release this reservation's stock here, in tx
			}
			n = len(cancelled)
			return err
		})
		if err != nil {
			panic(err)
		}
		fmt.Println("cancelled", n)
		if n == 0 {
			break
		}
	}
	// Output:
	// cancelled 3
	// cancelled 1
	// cancelled 0
}

// An order placed in one round trip: BEGIN, the queued insert and COMMIT
// sent as one batch, which commits only a fresh order. With pgtx.Abort a
// conflict raises on the server, so nothing of the batch commits; the
// error matches the sentinel and names the call.
func ExampleStore_QueueCreate() {
	ctx, pool, store := exampleStore()
	place := func(in order.NewOrder) error {
		var b pgx.Batch
		var res order.Result
		if err := store.QueueCreate(&b, in, &res, pgtx.Abort); err != nil {
			return err // invalid input: nothing queued
		}
		// Queue the rest of the order transaction here (the outbox event, …).
		if err := pgtx.RunBatch(ctx, pool, pgtx.Options{}, &b); err != nil {
			return err
		}
		fmt.Println("created", res.Order.Status, res.Changed)
		return nil
	}
	in := exampleOrder(7, time.Now().Add(15*time.Minute))
	if err := place(in); err != nil {
		panic(err)
	}
	err := place(exampleOrder(7, in.ExpireAt)) // the same buyer again
	var se *pgtx.StatementError
	if errors.Is(err, order.ErrUserAlreadyOrdered) && errors.As(err, &se) {
		fmt.Println("refused by", strings.SplitN(se.Call, "(", 2)[0], "nothing committed:", pgtx.Classify(err).NotCommitted)
	}
	// Output:
	// created CREATED true
	// refused by order.Store.QueueCreate nothing committed: true
}
