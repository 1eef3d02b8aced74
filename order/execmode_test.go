package order_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

// TestQueryExecModes runs every statement of the package through pools in
// the query exec modes where pgx does not learn parameter types from the
// server (exec, simple_protocol: what PgBouncer in transaction mode needs)
// or encodes from a cached description (cache_describe).
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	for _, mode := range pgtest.ExecModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setupWith(t, pgtest.NewPool(t, pgtest.WithExecMode(mode)))
			ctx := b.ctx

			// A sub-microsecond expiry checks that times survive the
			// text encoding (rounded by the server, truncated by pgx's
			// binary encoding: either way within a microsecond).
			expire := time.Now().Add(15*time.Minute + 1234*time.Nanosecond)
			paid, cancelled, expired, dup := newOrder(1), newOrder(2), newOrder(3), newOrder(4)
			paid.ExpireAt, paid.SKUTitle = expire, `Phone "O'Brien" ü \ x`
			expired.ExpireAt = time.Now().Add(-time.Minute)

			var created order.Result
			var queued order.Result
			err := inTx(ctx, b.pool, func(tx pgx.Tx) error {
				var err error
				if created, err = b.store.Create(ctx, tx, paid); err != nil {
					return err
				}
				batch := &pgx.Batch{}
				for _, in := range []order.NewOrder{cancelled, expired} {
					var r order.Result
					if err := b.store.QueueCreate(batch, in, &r, pgtx.Return); err != nil {
						return err
					}
				}
				if err := b.store.QueueCreate(batch, dup, &queued, pgtx.Return); err != nil {
					return err
				}
				return tx.SendBatch(ctx, batch).Close()
			})
			if err != nil {
				t.Fatal(err)
			}
			o := created.Order
			if created.Existing || o.OrderID != paid.OrderID || o.RequestID != paid.RequestID ||
				o.TotalAmount != 9900 || o.Status != order.StatusCreated || o.ExpireAt.Sub(expire).Abs() > time.Microsecond {
				t.Fatalf("Create = %+v, want a new order from %+v", created, paid)
			}
			if queued.Existing || queued.Order.OrderID != dup.OrderID {
				t.Fatalf("queued create = %+v, want new", queued)
			}
			// A queued repeat conflicts; ClassifyConflict explains it in the
			// same transaction.
			var classified order.Result
			err = inTx(ctx, b.pool, func(tx pgx.Tx) error {
				batch := &pgx.Batch{}
				var r order.Result
				if err := b.store.QueueCreate(batch, dup, &r, pgtx.Return); err != nil {
					return err
				}
				if err := tx.SendBatch(ctx, batch).Close(); !errors.Is(err, order.ErrConflict) {
					t.Errorf("queued repeat = %v, want ErrConflict", err)
				}
				classified, err = b.store.ClassifyConflict(ctx, tx, dup)
				return err
			})
			if err != nil || !classified.Existing || classified.Order.OrderID != dup.OrderID {
				t.Fatalf("ClassifyConflict = %+v, %v; want the existing order", classified, err)
			}
			// Another request of the same user: classified conflict.
			again := newOrder(1)
			err = inTx(ctx, b.pool, func(tx pgx.Tx) error {
				_, err := b.store.Create(ctx, tx, again)
				return err
			})
			var uae *order.Error
			if !errors.As(err, &uae) || !errors.Is(err, order.ErrUserAlreadyOrdered) || uae.Order.OrderID != paid.OrderID {
				t.Fatalf("second order of the user = %v, want UserAlreadyOrderedError", err)
			}

			// Reads.
			if got, err := b.store.Get(ctx, b.pool, seckill.Request{OrderID: paid.OrderID}); err != nil || got.OrderID != paid.OrderID {
				t.Fatalf("Get = %+v, %v", got, err)
			}
			if got, err := b.store.Get(ctx, b.pool, seckill.Request{RequestID: paid.RequestID}); err != nil || got.OrderID != paid.OrderID {
				t.Fatalf("GetByRequest = %+v, %v", got, err)
			}
			items, err := b.store.Items(ctx, b.pool, paid.OrderID)
			if err != nil || len(items) != 1 || items[0].SKUTitle != paid.SKUTitle || items[0].LineAmount != 9900 {
				t.Fatalf("Items = %+v, %v", items, err)
			}

			// Payment (statement and batch form), duplicate, then transitions.
			pay := order.Payment{
				PaymentID: uuid.New(), PaymentRequestID: uuid.New(), OrderID: paid.OrderID,
				Provider: "alipay", ProviderTradeNo: "T'1", CallbackID: "cb-1", Amount: 9900, Currency: "CNY",
				RawPayload: json.RawMessage(`{"trade": "T'1", "note": "ü \"q\" \\", "n": [1, null]}`),
			}
			var pr, prDup order.PaymentResult
			err = inTx(ctx, b.pool, func(tx pgx.Tx) error {
				batch := &pgx.Batch{}
				if err := b.store.QueueRecordPayment(batch, pay, &pr, pgtx.Return); err != nil {
					return err
				}
				if err := tx.SendBatch(ctx, batch).Close(); err != nil {
					return err
				}
				var err error
				prDup, err = b.store.RecordPayment(ctx, tx, pay)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if pr.Kind != order.PaymentPaid || pr.Order.Status != order.StatusPaid || prDup.Kind != order.PaymentDuplicate ||
				prDup.PaymentID != pay.PaymentID {
				t.Fatalf("payments = %+v, %+v; want paid, then duplicate", pr, prDup)
			}
			var classifiedPay order.PaymentResult
			err = inTx(ctx, b.pool, func(tx pgx.Tx) error {
				batch := &pgx.Batch{}
				var r order.PaymentResult
				if err := b.store.QueueRecordPayment(batch, pay, &r, pgtx.Return); err != nil {
					return err
				}
				if err := tx.SendBatch(ctx, batch).Close(); !errors.Is(err, order.ErrConflict) {
					t.Errorf("queued repeat payment = %v, want ErrConflict", err)
				}
				classifiedPay, err = b.store.ClassifyPaymentConflict(ctx, tx, pay)
				return err
			})
			if err != nil || classifiedPay.Kind != order.PaymentDuplicate || classifiedPay.PaymentID != pay.PaymentID {
				t.Fatalf("ClassifyPaymentConflict = %+v, %v", classifiedPay, err)
			}
			var raw string
			if err := b.pool.QueryRow(ctx, `SELECT raw_payload::text FROM `+pgx.Identifier{b.schema, "payment_record"}.Sanitize()).Scan(&raw); err != nil ||
				!pgtest.JSONSame(t, []byte(raw), pay.RawPayload) {
				t.Fatalf("raw_payload = %s, %v; want %s", raw, err, pay.RawPayload)
			}
			recs, err := b.store.Payments(ctx, b.pool, paid.OrderID)
			if err != nil || len(recs) != 1 || recs[0].ProviderTradeNo != "T'1" || recs[0].Status != order.PaymentSucceeded {
				t.Fatalf("Payments = %+v, %v", recs, err)
			}

			tr, err := b.store.TransitionOrder(ctx, b.pool, userCancel(cancelled.OrderID))
			if err != nil || !tr.Changed || tr.Order.CancelReason == "" {
				t.Fatalf("UserCancel = %+v, %v", tr, err)
			}
			var trq order.Result
			batch := &pgx.Batch{}
			if err := b.store.QueueTransitionOrder(batch, userCancel(cancelled.OrderID), &trq, pgtx.Return); err != nil {
				t.Fatal(err)
			}
			if err := b.pool.SendBatch(ctx, batch).Close(); err != nil || !trq.Existing {
				t.Fatalf("queued repeat cancel = %+v, %v", trq, err)
			}
			if _, err := b.store.TransitionOrder(ctx, b.pool, order.TimeoutCancel(dup.OrderID)); !errors.Is(err, order.ErrNotExpired) {
				t.Fatalf("early timeout cancel = %v, want NotExpiredError", err)
			}

			// Expiry: only the expired order is due and cancelled.
			var due []order.Order
			var cancelledNow, queuedCancel []order.Result
			err = inTx(ctx, b.pool, func(tx pgx.Tx) error {
				var err error
				if due, err = b.store.DueForExpiry(ctx, tx, 10); err != nil {
					return err
				}
				batch := &pgx.Batch{}
				if err := b.store.QueueCancelExpired(batch, 10, &queuedCancel); err != nil {
					return err
				}
				if err := tx.SendBatch(ctx, batch).Close(); err != nil {
					return err
				}
				cancelledNow, err = b.store.CancelExpired(ctx, tx, 10)
				return err
			})
			if err != nil || len(due) != 1 || due[0].OrderID != expired.OrderID || len(queuedCancel) != 1 ||
				queuedCancel[0].Order.OrderID != expired.OrderID || len(cancelledNow) != 0 {
				t.Fatalf("expiry = %+v, %+v, %+v, %v", due, queuedCancel, cancelledNow, err)
			}
			if f, err := b.store.Audit(ctx, b.pool); err != nil || len(f) != 0 {
				t.Fatalf("Audit = %v, %v", f, err)
			}
		})
	}
}
