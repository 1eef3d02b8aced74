package order_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

func newPayment(o order.Order) order.Payment {
	return order.Payment{
		PaymentID:        uuid.Must(uuid.NewV7()),
		PaymentRequestID: uuid.New(),
		OrderID:          o.OrderID,
		Provider:         "alipay",
		ProviderTradeNo:  "T" + uuid.NewString(),
		CallbackID:       "C" + uuid.NewString(),
		Amount:           o.TotalAmount,
		Currency:         o.Currency,
		RawPayload:       json.RawMessage(`{"trade_status":"TRADE_SUCCESS"}`),
	}
}

func (b testBundle) pay(p order.Payment) (order.PaymentResult, error) {
	var (
		res order.PaymentResult
		err error
	)
	txErr := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		res, err = b.store.RecordPayment(b.ctx, tx, p)
		return nil
	})
	if txErr != nil {
		return res, txErr
	}
	return res, err
}

func TestRecordPayment(t *testing.T) {
	t.Parallel()
	bothModes(t, recordpayment)
}

func recordpayment(t *testing.T, citus bool) {
	b := setupCfg(t, pgtest.Pool(t), order.Config{Citus: citus})

	o := b.create(t, newOrder(1))
	first := newPayment(o)
	res, err := b.pay(first)
	if err != nil || res.Kind != order.PaymentPaid || res.PaymentID != first.PaymentID ||
		res.PaymentStatus != order.PaymentSucceeded || res.Order.Status != order.StatusPaid ||
		res.Order.PaidAt == nil || res.Refund != nil || res.Order.Version != 1 {
		t.Fatalf("first payment: %+v, %v", res, err)
	}

	t.Run("duplicate callback, same trade no", func(t *testing.T) {
		p := newPayment(o)
		p.ProviderTradeNo = first.ProviderTradeNo
		res, err := b.pay(p)
		if err != nil || res.Kind != order.PaymentDuplicate || res.PaymentID != first.PaymentID ||
			res.Order.Status != order.StatusPaid || res.Refund != nil {
			t.Fatalf("got %+v, %v; want Duplicate of %s", res, err, first.PaymentID)
		}
	})
	t.Run("duplicate callback id", func(t *testing.T) {
		p := newPayment(o)
		p.CallbackID = first.CallbackID
		res, err := b.pay(p)
		if err != nil || res.Kind != order.PaymentDuplicate || res.PaymentID != first.PaymentID {
			t.Fatalf("got %+v, %v; want Duplicate", res, err)
		}
	})
	t.Run("same payment request, other trade no and callback", func(t *testing.T) {
		p := newPayment(o) // found by its payment request id alone
		p.PaymentRequestID = first.PaymentRequestID
		res, err := b.pay(p)
		if err != nil || res.Kind != order.PaymentDuplicate || res.PaymentID != first.PaymentID {
			t.Fatalf("got %+v, %v; want Duplicate of %s", res, err, first.PaymentID)
		}
	})
	paidAt := *res.Order.PaidAt
	t.Run("exact redelivery", func(t *testing.T) {
		res, err := b.pay(first)
		if err != nil || res.Kind != order.PaymentDuplicate || res.PaymentID != first.PaymentID {
			t.Fatalf("got %+v, %v; want Duplicate", res, err)
		}
		// No duplicate wrote the paid order.
		if got := b.get(t, o.OrderID); got.Status != order.StatusPaid || got.Version != 1 || got.PaidAt == nil || !got.PaidAt.Equal(paidAt) {
			t.Fatalf("paid order after duplicates: %+v; want version 1, paid at %v", got, paidAt)
		}
	})
	t.Run("second payment on a paid order", func(t *testing.T) {
		p := newPayment(o)
		res, err := b.pay(p)
		if err != nil || res.Kind != order.PaymentOnPaidOrder || res.PaymentStatus != order.PaymentRefundPending ||
			res.Refund == nil || res.Refund.PaymentID != p.PaymentID || res.Refund.Amount != o.TotalAmount ||
			res.Order.Status != order.StatusPaid {
			t.Fatalf("got %+v, %v; want PaidOnPaidOrder with refund", res, err)
		}
	})
	t.Run("paid after cancel", func(t *testing.T) {
		c := b.create(t, newOrder(2))
		if _, err := b.transition(userCancel(c.OrderID)); err != nil {
			t.Fatal(err)
		}
		p := newPayment(c)
		res, err := b.pay(p)
		if err != nil || res.Kind != order.PaymentAfterCancel || res.PaymentStatus != order.PaymentRefundPending ||
			res.Refund == nil || *res.Refund != (order.Refund{OrderID: c.OrderID, PaymentID: p.PaymentID, Provider: p.Provider,
			ProviderTradeNo: p.ProviderTradeNo, Amount: c.TotalAmount, Currency: c.Currency}) {
			t.Fatalf("got %+v, %v; want PaidAfterCancel with refund", res, err)
		}
		got, _ := b.store.Get(b.ctx, b.pool, seckill.Request{OrderID: c.OrderID})
		if got.Status != order.StatusCancelled || got.PaidAt != nil || got.Version != 1 {
			t.Fatalf("cancelled order touched by a late payment: %+v", got)
		}
		// The same callback again is a duplicate and asks for no second refund.
		res, err = b.pay(p)
		if err != nil || res.Kind != order.PaymentDuplicate || res.Refund != nil || res.PaymentStatus != order.PaymentRefundPending {
			t.Fatalf("redelivered late payment: %+v, %v", res, err)
		}
		// And after CLOSED too.
		if _, err := b.transition(order.Transition{OrderID: c.OrderID, To: order.StatusClosed}); err != nil {
			t.Fatal(err)
		}
		res, err = b.pay(newPayment(c))
		if err != nil || res.Kind != order.PaymentAfterCancel || res.Refund == nil {
			t.Fatalf("payment on closed cancelled order: %+v, %v", res, err)
		}
	})

	payments := b.count(t, "payment_record")
	version := func(id int64) int64 {
		got, err := b.store.Get(b.ctx, b.pool, seckill.Request{OrderID: id})
		if err != nil {
			t.Fatal(err)
		}
		return got.Version
	}
	fresh := b.create(t, newOrder(3))
	t.Run("unknown order", func(t *testing.T) {
		p := newPayment(fresh)
		p.OrderID = 424242
		_, err := b.pay(p)
		var nf *order.Error
		if !errors.As(err, &nf) || nf.OrderID != 424242 || !errors.Is(err, order.ErrNotFound) {
			t.Fatalf("got %v; want NotFoundError", err)
		}
	})
	t.Run("amount mismatch", func(t *testing.T) {
		p := newPayment(fresh)
		p.Amount--
		_, err := b.pay(p)
		var me *order.Error
		if !errors.Is(err, order.ErrMismatch) || !errors.As(err, &me) || me.Field != "amount" || me.Value != strconv.FormatInt(p.Amount, 10) ||
			me.Order.OrderID != fresh.OrderID || me.Order.TotalAmount != fresh.TotalAmount {
			t.Fatalf("got %v; want ErrMismatch of the amount", err)
		}
	})
	t.Run("currency mismatch", func(t *testing.T) {
		p := newPayment(fresh)
		p.Currency = "USD"
		_, err := b.pay(p)
		var me *order.Error
		if !errors.Is(err, order.ErrMismatch) || !errors.As(err, &me) || me.Field != "currency" || me.Value != "USD" {
			t.Fatalf("got %v; want ErrMismatch of the currency", err)
		}
	})
	if n := b.count(t, "payment_record"); n != payments {
		t.Fatalf("%d payment records after rejected payments, want %d", n, payments)
	}
	t.Run("failed attempt with the same payment id", func(t *testing.T) {
		// Another component recorded the attempt as FAILED (30): the
		// callback conflicts with it and pays nothing.
		u := b.create(t, newOrder(4))
		p := newPayment(u)
		b.exec(t, `INSERT INTO payment_record (payment_id, payment_request_id, order_id, provider, provider_trade_no,
			amount, currency, status) VALUES ($1, $2, $3, $4, $5, $6, $7, 30)`,
			p.PaymentID, p.PaymentRequestID, u.OrderID, p.Provider, p.ProviderTradeNo, p.Amount, p.Currency)
		res, err := b.pay(p)
		if err != nil || res.Kind != order.PaymentDuplicate || res.PaymentID != p.PaymentID || res.PaymentStatus != 30 || res.Refund != nil {
			t.Fatalf("payment over a failed attempt: %+v, %v; want Duplicate of the FAILED payment", res, err)
		}
		if got := b.get(t, u.OrderID); got.Status != order.StatusCreated || got.Version != 0 || got.PaidAt != nil {
			t.Fatalf("order paid through a failed payment: %+v", got)
		}
	})
	if v := version(fresh.OrderID); v != 0 {
		t.Fatalf("order version %d after rejected payments, want 0", v)
	}
	if _, err := b.store.Payments(b.ctx, b.pool, 0); !errors.Is(err, order.ErrInvalidArgument) {
		t.Fatalf("Payments(0) = %v, want ErrInvalidArgument", err)
	}
	recs, err := b.store.Payments(b.ctx, b.pool, o.OrderID)
	if err != nil || len(recs) != 2 || recs[0].PaymentID != first.PaymentID || recs[0].Status != order.PaymentSucceeded ||
		recs[1].Status != order.PaymentRefundPending {
		t.Fatalf("payments of order = %+v, %v", recs, err)
	}
	if f, err := b.store.Audit(b.ctx, b.pool); err != nil || len(f) != 0 {
		t.Fatalf("Audit = %v, %v", f, err)
	}
}

func TestRecordPaymentConflictOnOtherOrder(t *testing.T) {
	t.Parallel()
	bothModes(t, recordpaymentconflictonotherorder)
}

func recordpaymentconflictonotherorder(t *testing.T, citus bool) {
	b := setupCfg(t, pgtest.Pool(t), order.Config{Citus: citus})
	o1, o2 := b.create(t, newOrder(1)), b.create(t, newOrder(2))
	p1 := newPayment(o1)
	if _, err := b.pay(p1); err != nil {
		t.Fatal(err)
	}
	p2 := newPayment(o2)
	p2.ProviderTradeNo = p1.ProviderTradeNo // the provider reuses a trade number for another order
	if _, err := b.pay(p2); !errors.Is(err, order.ErrModel) {
		t.Fatalf("trade no of another order: %v, want ErrModel", err)
	}
	p3 := newPayment(o2)
	p3.PaymentID = p1.PaymentID
	if _, err := b.pay(p3); !errors.Is(err, order.ErrIDCollision) {
		t.Fatalf("payment id collision: %v, want ErrIDCollision", err)
	}
	if got, _ := b.store.Get(b.ctx, b.pool, seckill.Request{OrderID: o2.OrderID}); got.Status != order.StatusCreated {
		t.Fatalf("order 2 is %s, want CREATED", got.Status)
	}
}

func TestQueueRecordPayment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.create(t, newOrder(1))
	p := newPayment(o)
	var res order.PaymentResult
	err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		if err := b.store.QueueRecordPayment(batch, p, &res, pgtx.Return); err != nil {
			return err
		}
		return tx.SendBatch(b.ctx, batch).Close()
	})
	if err != nil || res.Kind != order.PaymentPaid {
		t.Fatalf("queued payment: %+v, %v", res, err)
	}
	err = inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		if err := b.store.QueueRecordPayment(batch, p, &res, pgtx.Return); err != nil {
			return err
		}
		if err := tx.SendBatch(b.ctx, batch).Close(); !errors.Is(err, order.ErrConflict) {
			t.Errorf("queued duplicate: %v, want ErrConflict", err)
		}
		res, err := b.store.ClassifyPaymentConflict(b.ctx, tx, p)
		if err != nil || res.Kind != order.PaymentDuplicate || res.PaymentID != p.PaymentID {
			t.Errorf("ClassifyPaymentConflict = %+v, %v", res, err)
		}
		// The documented way: RecordPayment again in the same transaction.
		res, err = b.store.RecordPayment(b.ctx, tx, p)
		if err != nil || res.Kind != order.PaymentDuplicate || res.PaymentID != p.PaymentID {
			t.Errorf("RecordPayment after the queued conflict = %+v, %v", res, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// createExpired creates n orders (users 1..n) that expired a second ago,
// in one batch.
func (b testBundle) createExpired(t *testing.T, n int) []order.Order {
	t.Helper()
	orders := make([]order.Order, n)
	err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		res := make([]order.Result, n)
		for i := range n {
			in := newOrder(int64(i + 1))
			in.ExpireAt = time.Now().Add(-time.Second)
			if err := b.store.QueueCreate(batch, in, &res[i], pgtx.Return); err != nil {
				return err
			}
		}
		if err := tx.SendBatch(b.ctx, batch).Close(); err != nil {
			return err
		}
		for i := range res {
			orders[i] = res[i].Order
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return orders
}

// TestPaymentRacesTimeoutCancel: 500 expired orders, each paid and
// timeout-cancelled concurrently (1,000 transactions). No order ends both
// paid and cancelled; each is PAID (payment won) or CANCELLED with a
// REFUND_PENDING payment (cancel won); successful cancels are reported
// exactly once each, so stock would be released exactly once; Audit clean.
func TestPaymentRacesTimeoutCancel(t *testing.T) {
	t.Parallel()
	bothModes(t, paymentracestimeoutcancel)
}

func paymentracestimeoutcancel(t *testing.T, citus bool) {
	pool := pgtest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 24 })
	b := setupCfg(t, pool, order.Config{Citus: citus})
	const n = 500
	orders := b.createExpired(t, n)

	cancels := make([]order.Result, n)
	cancelErrs := make([]error, n)
	pays := make([]order.PaymentResult, n)
	payErrs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			cancels[i], cancelErrs[i] = b.transition(order.TimeoutCancel(orders[i].OrderID))
		}()
		go func() {
			defer wg.Done()
			<-start
			pays[i], payErrs[i] = b.pay(newPayment(orders[i]))
		}()
	}
	close(start)
	testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")

	released, paid := 0, 0
	for i := range n {
		c, p := cancels[i], pays[i]
		if payErrs[i] != nil {
			t.Fatalf("order %d: payment error %v", i, payErrs[i])
		}
		switch {
		case cancelErrs[i] == nil && c.Changed:
			released++ // the caller would release stock here, exactly once
			if p.Kind != order.PaymentAfterCancel || p.Refund == nil {
				t.Fatalf("order %d: cancel won but payment says %d", i, p.Kind)
			}
		case errors.Is(cancelErrs[i], order.ErrIllegalTransition):
			paid++
			var ie *order.Error
			errors.As(cancelErrs[i], &ie)
			if ie.From != order.StatusPaid || p.Kind != order.PaymentPaid {
				t.Fatalf("order %d: cancel refused from %s, payment %d", i, ie.From, p.Kind)
			}
		default:
			t.Fatalf("order %d: cancel %+v, %v", i, c, cancelErrs[i])
		}
	}
	t.Logf("payment won %d, cancel won %d", paid, released)
	if got := b.count(t, "orders WHERE status = 40"); got != released {
		t.Fatalf("%d CANCELLED orders, %d successful cancels", got, released)
	}
	if got := b.count(t, "orders WHERE status = 30"); got != paid {
		t.Fatalf("%d PAID orders, %d paid", got, paid)
	}
	if got := b.count(t, "orders WHERE paid_at IS NOT NULL AND (status = 40 OR cancelled_at IS NOT NULL)"); got != 0 {
		t.Fatalf("%d orders both paid and cancelled", got)
	}
	if got := b.count(t, "payment_record WHERE status = 40"); got != released {
		t.Fatalf("%d refund-pending payments, want %d", got, released)
	}
	if f, err := b.store.Audit(b.ctx, b.pool); err != nil || len(f) != 0 {
		t.Fatalf("Audit = %v, %v", f, err)
	}
}

// TestSweepersRacePayments: two CancelExpired sweepers and 300 payments on
// 300 expired orders, all at once. Every order ends PAID or CANCELLED, the
// sweepers report each cancelled order exactly once between them, and every
// late payment is REFUND_PENDING.
func TestSweepersRacePayments(t *testing.T) {
	t.Parallel()
	bothModes(t, sweepersracepayments)
}

func sweepersracepayments(t *testing.T, citus bool) {
	pool := pgtest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
	b := setupCfg(t, pool, order.Config{Citus: citus})
	const n = 300
	orders := b.createExpired(t, n)

	var paysDone sync.WaitGroup
	pays := make([]order.PaymentResult, n)
	payErrs := make([]error, n)
	swept := make([][]order.Result, 2)
	sweepErrs := make([]error, 2)
	start := make(chan struct{})
	for i := range n {
		paysDone.Add(1)
		go func() {
			defer paysDone.Done()
			<-start
			pays[i], payErrs[i] = b.pay(newPayment(orders[i]))
		}()
	}
	allPaid := make(chan struct{})
	go func() { paysDone.Wait(); close(allPaid) }()
	var sweepers sync.WaitGroup
	for s := range 2 {
		sweepers.Add(1)
		go func() {
			defer sweepers.Done()
			<-start
			for {
				// Read "payments done" before sweeping: a sweep that then
				// finds nothing has seen every payment's outcome.
				done := false
				select {
				case <-allPaid:
					done = true
				default:
				}
				var got []order.Result
				err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
					if s == 1 { // one sweeper pipelines
						batch := &pgx.Batch{}
						if err := b.store.QueueCancelExpired(batch, 25, &got); err != nil {
							return err
						}
						return tx.SendBatch(b.ctx, batch).Close()
					}
					var err error
					got, err = b.store.CancelExpired(b.ctx, tx, 25)
					return err
				})
				if err != nil {
					sweepErrs[s] = err
					return
				}
				swept[s] = append(swept[s], got...)
				if done && len(got) == 0 {
					return
				}
			}
		}()
	}
	close(start)
	testwait.WaitWithin(t, &sweepers, testwait.Long, "the concurrent transactions")
	testwait.Recv(t, allPaid, "every payment to commit")
	for s, err := range sweepErrs {
		if err != nil {
			t.Fatalf("sweeper %d: %v", s, err)
		}
	}
	cancelled := map[int64]bool{}
	for _, rs := range swept {
		for _, r := range rs {
			if cancelled[r.Order.OrderID] {
				t.Fatalf("order %d cancelled twice", r.Order.OrderID)
			}
			cancelled[r.Order.OrderID] = true
		}
	}
	for i := range n {
		if payErrs[i] != nil {
			t.Fatalf("payment %d: %v", i, payErrs[i])
		}
		want := order.PaymentPaid
		if cancelled[orders[i].OrderID] {
			want = order.PaymentAfterCancel
		}
		if pays[i].Kind != want {
			t.Fatalf("order %d: payment %d, want %d", i, pays[i].Kind, want)
		}
	}
	t.Logf("sweepers cancelled %d+%d, payments won %d", len(swept[0]), len(swept[1]), n-len(cancelled))
	if got := b.count(t, "orders WHERE status = 40"); got != len(cancelled) {
		t.Fatalf("%d CANCELLED orders, sweepers reported %d", got, len(cancelled))
	}
	if got := b.count(t, "orders WHERE status = 30"); got != n-len(cancelled) {
		t.Fatalf("%d PAID orders, want %d", got, n-len(cancelled))
	}
	if f, err := b.store.Audit(b.ctx, b.pool); err != nil || len(f) != 0 {
		t.Fatalf("Audit = %v, %v", f, err)
	}
}

// bothModes runs a test with the one-statement Create and RecordPayment
// and with their Citus forms (Config.Citus: two round trips of statements
// Citus routes whole): both must give the same results.
func bothModes(t *testing.T, test func(t *testing.T, citus bool)) {
	for _, citus := range []bool{false, true} {
		t.Run(map[bool]string{false: "one statement", true: "citus"}[citus], func(t *testing.T) {
			t.Parallel()
			test(t, citus)
		})
	}
}

// TestPayingOrderIsPaid: a payment for an order in PAYING (the buyer opened
// the cashier) makes it PAID, as one for a CREATED order does, in every
// form of the call: RecordPayment (and its Citus form), and
// QueueRecordPayment with pgtx.Return and with pgtx.Abort.
func TestPayingOrderIsPaid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	citus, err := order.New(order.Config{Schema: b.schema, Citus: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, mode := range []string{"RecordPayment", "Return", "Abort", "Citus"} {
		t.Run(mode, func(t *testing.T) {
			o := b.create(t, newOrder(int64(i+1)))
			err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
				res, err := b.store.TransitionOrder(b.ctx, tx, order.Transition{OrderID: o.OrderID, To: order.StatusPaying})
				if err == nil && (!res.Changed || res.Order.Status != order.StatusPaying) {
					err = fmt.Errorf("to PAYING: %+v", res)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			var res order.PaymentResult
			err = inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
				switch mode {
				case "RecordPayment":
					res, err = b.store.RecordPayment(b.ctx, tx, newPayment(o))
					return err
				case "Citus":
					res, err = citus.RecordPayment(b.ctx, tx, newPayment(o))
					return err
				}
				batch := &pgx.Batch{}
				on := pgtx.Return
				if mode == "Abort" {
					on = pgtx.Abort
				}
				if err := b.store.QueueRecordPayment(batch, newPayment(o), &res, on); err != nil {
					return err
				}
				return tx.SendBatch(b.ctx, batch).Close()
			})
			if err != nil || res.Kind != order.PaymentPaid || res.PaymentStatus != order.PaymentSucceeded ||
				res.Order.Status != order.StatusPaid || res.Order.PaidAt == nil {
				t.Fatalf("payment of a PAYING order: %+v, %v; want PAID", res, err)
			}
			if got, err := b.store.Get(b.ctx, b.pool, seckill.Request{OrderID: o.OrderID}); err != nil || got.Status != order.StatusPaid {
				t.Fatalf("stored order %+v, %v; want PAID", got, err)
			}
		})
	}
	if f, err := b.store.Audit(b.ctx, b.pool); err != nil || len(f) != 0 {
		t.Fatalf("Audit = %v, %v", f, err)
	}
}
