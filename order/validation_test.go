package order_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

func TestNewConfig(t *testing.T) {
	t.Parallel()
	if _, err := order.New(order.Config{Schema: "bad-name"}); !errors.Is(err, migrate.ErrInvalidSchema) {
		t.Errorf("bad schema: %v", err)
	}
	if _, err := order.New(order.Config{DefaultCurrency: "usd"}); !errors.Is(err, order.ErrInvalidArgument) {
		t.Errorf("bad currency: %v", err)
	}
	s, err := order.New(order.Config{})
	if err != nil || s.Schema() != "seckill" {
		t.Errorf("zero config: %v, %v", s, err)
	}
}

// TestInvalidInput: every write helper rejects bad input with a
// *ValidationError before sending anything; nothing is written and nothing
// is queued.
func TestInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.create(t, newOrder(1))
	ordersBefore := b.count(t, "orders")

	no := func(f func(*order.NewOrder)) order.NewOrder { in := newOrder(2); f(&in); return in }
	pay := func(f func(*order.Payment)) order.Payment { p := newPayment(o); f(&p); return p }
	badOrders := map[string]order.NewOrder{
		"zero order id":      no(func(in *order.NewOrder) { in.OrderID = 0 }),
		"negative order id":  no(func(in *order.NewOrder) { in.OrderID = -5 }),
		"long order no":      no(func(in *order.NewOrder) { in.OrderNo = strings.Repeat("x", 41) }),
		"empty order no":     no(func(in *order.NewOrder) { in.OrderNo = "" }),
		"no currency":        no(func(in *order.NewOrder) { in.Currency = "" }),
		"nil request":        no(func(in *order.NewOrder) { in.RequestID = uuid.Nil }),
		"nil reservation":    no(func(in *order.NewOrder) { in.ReservationID = uuid.Nil }),
		"nil message":        no(func(in *order.NewOrder) { in.MessageID = uuid.Nil }),
		"zero activity":      no(func(in *order.NewOrder) { in.ActivityID = 0 }),
		"zero sku":           no(func(in *order.NewOrder) { in.SKUID = 0 }),
		"zero user":          no(func(in *order.NewOrder) { in.UserID = 0 }),
		"negative bucket":    no(func(in *order.NewOrder) { in.Bucket = -1 }),
		"zero quantity":      no(func(in *order.NewOrder) { in.Quantity = 0 }),
		"two units":          no(func(in *order.NewOrder) { in.Quantity = 2 }),
		"negative quantity":  no(func(in *order.NewOrder) { in.Quantity = -1 }),
		"negative price":     no(func(in *order.NewOrder) { in.UnitPrice = -1 }),
		"bad currency":       no(func(in *order.NewOrder) { in.Currency = "cny" }),
		"long currency":      no(func(in *order.NewOrder) { in.Currency = "CNYX" }),
		"zero expiry":        no(func(in *order.NewOrder) { in.ExpireAt = time.Time{} }),
		"empty title":        no(func(in *order.NewOrder) { in.SKUTitle = "" }),
		"long title":         no(func(in *order.NewOrder) { in.SKUTitle = strings.Repeat("手", 257) }),
		"invalid utf8 title": no(func(in *order.NewOrder) { in.SKUTitle = "\xff" }),
	}
	badTransitions := map[string]order.Transition{
		"zero order":           {To: order.StatusPaid},
		"unknown status":       {OrderID: o.OrderID, To: 70},
		"to CREATED":           {OrderID: o.OrderID, To: order.StatusCreated},
		"cancel w/o reason":    {OrderID: o.OrderID, To: order.StatusCancelled},
		"long reason":          {OrderID: o.OrderID, To: order.StatusCancelled, CancelReason: strings.Repeat("r", 65)},
		"expiry on non-cancel": {OrderID: o.OrderID, To: order.StatusPaid, OnlyIfExpired: true},
	}
	badPayments := map[string]order.Payment{
		"nil payment id":   pay(func(p *order.Payment) { p.PaymentID = uuid.Nil }),
		"nil request id":   pay(func(p *order.Payment) { p.PaymentRequestID = uuid.Nil }),
		"zero order":       pay(func(p *order.Payment) { p.OrderID = 0 }),
		"empty provider":   pay(func(p *order.Payment) { p.Provider = "" }),
		"long provider":    pay(func(p *order.Payment) { p.Provider = strings.Repeat("p", 33) }),
		"empty trade no":   pay(func(p *order.Payment) { p.ProviderTradeNo = "" }),
		"long trade no":    pay(func(p *order.Payment) { p.ProviderTradeNo = strings.Repeat("t", 129) }),
		"long callback id": pay(func(p *order.Payment) { p.CallbackID = strings.Repeat("c", 129) }),
		"negative amount":  pay(func(p *order.Payment) { p.Amount = -1 }),
		"bad currency":     pay(func(p *order.Payment) { p.Currency = "R$" }),
		"no currency":      pay(func(p *order.Payment) { p.Currency = "" }),
		"invalid payload":  pay(func(p *order.Payment) { p.RawPayload = json.RawMessage(`{"a":`) }),
	}

	check := func(name string, err error) {
		t.Helper()
		var ve *order.Error
		if !errors.Is(err, order.ErrInvalidArgument) || !errors.As(err, &ve) || ve.Field == "" {
			t.Errorf("%s: got %v, want *ValidationError", name, err)
		}
	}
	err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		for name, in := range badOrders {
			_, err := b.store.Create(b.ctx, tx, in)
			check("Create/"+name, err)
			check("QueueCreate/"+name, b.store.QueueCreate(batch, in, &order.Result{}, pgtx.Return))
			_, err = b.store.ClassifyConflict(b.ctx, tx, in)
			check("ClassifyConflict/"+name, err)
		}
		for name, tr := range badTransitions {
			_, err := b.store.TransitionOrder(b.ctx, tx, tr)
			check("TransitionOrder/"+name, err)
			check("QueueTransitionOrder/"+name, b.store.QueueTransitionOrder(batch, tr, &order.Result{}, pgtx.Return))
		}
		for name, p := range badPayments {
			_, err := b.store.RecordPayment(b.ctx, tx, p)
			check("RecordPayment/"+name, err)
			check("QueueRecordPayment/"+name, b.store.QueueRecordPayment(batch, p, &order.PaymentResult{}, pgtx.Return))
		}
		check("QueueCreate/nil batch", b.store.QueueCreate(nil, newOrder(3), nil, pgtx.Return))
		check("QueueTransitionOrder/nil batch", b.store.QueueTransitionOrder(nil, userCancel(o.OrderID), &order.Result{}, pgtx.Return))
		_, err := b.store.Get(b.ctx, tx, seckill.Request{OrderID: 0})
		check("Get/zero", err)
		_, err = b.store.Get(b.ctx, tx, seckill.Request{RequestID: uuid.Nil})
		check("Get/nil request", err)
		if batch.Len() != 0 {
			t.Errorf("%d statements queued for invalid input", batch.Len())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, "orders"); n != ordersBefore {
		t.Errorf("%d orders, want %d", n, ordersBefore)
	}
	if n := b.count(t, "payment_record"); n != 0 {
		t.Errorf("%d payments written", n)
	}
	if got, _ := b.store.Get(b.ctx, b.pool, seckill.Request{OrderID: o.OrderID}); got.Version != 0 || got.Status != order.StatusCreated {
		t.Errorf("order changed: %+v", got)
	}
}
