package order_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

// hostile are strings an attacker would try through a text parameter.
var hostile = []string{
	`'; DROP TABLE orders; --`, `"quoted"`, `$1`, `' OR '1'='1`, `\`, `%s%d%!`, `);--`, `{schema}`,
	`"; TRUNCATE payment_record CASCADE; --`, "é主🚀\u200b", `E'\x41'`, "tab\tnew\nline",
}

// TestEveryEntryPointRejectsInvalidInput covers what TestInvalidInput
// (validation_test.go) does not: ClassifyPaymentConflict, Items, Payments,
// DueForExpiry, CancelExpired and QueueCancelExpired (limits), nil batches
// and destinations of QueueCreate, QueueRecordPayment and
// QueueCancelExpired, the zero id through TimeoutCancel/UserCancel, and
// text PostgreSQL cannot store (NUL bytes in every text field, JSON that
// jsonb rejects) — those were database errors before. Covered there:
// Create, QueueCreate, ClassifyConflict, TransitionOrder,
// QueueTransitionOrder, RecordPayment, QueueRecordPayment, Get,
// GetByRequest; New in TestNewConfig. Nothing is written: orders, items
// and payments are counted, and the order's version is unchanged. A nil
// pgx.Tx or pgtx.Querier panics at once, before anything is sent, like any
// nil interface.
func TestEveryEntryPointRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.create(t, newOrder(1))
	rows := func() int {
		return b.count(t, "orders") + b.count(t, "order_items") + b.count(t, "payment_record")
	}
	before := rows()
	check := func(name string, err error) {
		t.Helper()
		var ve *order.Error
		if !errors.Is(err, order.ErrInvalidArgument) || !errors.As(err, &ve) {
			t.Errorf("%s: %v, want a *ValidationError", name, err)
		}
	}
	pay := func(f func(*order.Payment)) order.Payment { p := newPayment(o); f(&p); return p }
	no := func(f func(*order.NewOrder)) order.NewOrder { in := newOrder(2); f(&in); return in }
	badPayments := map[string]order.Payment{
		"zero order":      pay(func(p *order.Payment) { p.OrderID = 0 }),
		"NUL provider":    pay(func(p *order.Payment) { p.Provider = "p\x00" }),
		"NUL trade no":    pay(func(p *order.Payment) { p.ProviderTradeNo = "\x00" }),
		"NUL callback":    pay(func(p *order.Payment) { p.CallbackID = "c\x00" }),
		"JSON \\u0000":    pay(func(p *order.Payment) { p.RawPayload = json.RawMessage(`{"a":"\u0000"}`) }),
		"lone surrogate":  pay(func(p *order.Payment) { p.RawPayload = json.RawMessage(`"\ud800"`) }),
		"huge number":     pay(func(p *order.Payment) { p.RawPayload = json.RawMessage(`1e999999`) }),
		"invalid UTF-8":   pay(func(p *order.Payment) { p.RawPayload = json.RawMessage("\"\xff\"") }),
		"invalid UTF-8 p": pay(func(p *order.Payment) { p.Provider = "\xff" }),
	}
	err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		for name, p := range badPayments {
			_, err := b.store.ClassifyPaymentConflict(b.ctx, tx, p)
			check("ClassifyPaymentConflict/"+name, err)
			_, err = b.store.RecordPayment(b.ctx, tx, p)
			check("RecordPayment/"+name, err)
			check("QueueRecordPayment/"+name, b.store.QueueRecordPayment(batch, p, new(order.PaymentResult), pgtx.Return))
		}
		for name, in := range map[string]order.NewOrder{
			"NUL title":    no(func(in *order.NewOrder) { in.SKUTitle = "a\x00" }),
			"NUL order no": no(func(in *order.NewOrder) { in.OrderNo = "\x00" }),
		} {
			_, err := b.store.Create(b.ctx, tx, in)
			check("Create/"+name, err)
			check("QueueCreate/"+name, b.store.QueueCreate(batch, in, new(order.Result), pgtx.Return))
		}
		_, err := b.store.TransitionOrder(b.ctx, tx, order.Transition{OrderID: o.OrderID, To: order.StatusCancelled, CancelReason: "r\x00"})
		check("TransitionOrder/NUL reason", err)
		_, err = b.store.TransitionOrder(b.ctx, tx, order.TimeoutCancel(0))
		check("TransitionOrder/TimeoutCancel(0)", err)
		_, err = b.store.TransitionOrder(b.ctx, tx, userCancel(-1))
		check("TransitionOrder/UserCancel(-1)", err)
		for _, limit := range []int{0, -1, 10000 + 1} {
			_, err := b.store.DueForExpiry(b.ctx, tx, limit)
			check("DueForExpiry", err)
			_, err = b.store.CancelExpired(b.ctx, tx, limit)
			check("CancelExpired", err)
			check("QueueCancelExpired", b.store.QueueCancelExpired(batch, limit, new([]order.Result)))
		}
		_, err = b.store.Items(b.ctx, tx, 0)
		check("Items(0)", err)
		_, err = b.store.Payments(b.ctx, tx, -1)
		check("Payments(-1)", err)
		check("QueueCreate(nil batch)", b.store.QueueCreate(nil, newOrder(3), new(order.Result), pgtx.Return))
		check("QueueRecordPayment(nil batch)", b.store.QueueRecordPayment(nil, newPayment(o), new(order.PaymentResult), pgtx.Return))
		check("QueueCancelExpired(nil batch)", b.store.QueueCancelExpired(nil, 1, new([]order.Result)))
		if batch.Len() != 0 {
			t.Errorf("%d statements queued for invalid input", batch.Len())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if after := rows(); after != before {
		t.Errorf("rows %d → %d", before, after)
	}
	if got, _ := b.store.Get(b.ctx, b.pool, seckill.Request{OrderID: o.OrderID}); got.Version != o.Version || got.Status != order.StatusCreated {
		t.Errorf("order changed: %+v", got)
	}
}

// TestNoSQLInjection sends hostile strings through every string-taking
// entry point — order no, SKU title, currency, provider, trade no, callback
// id, raw payload, cancel reason — and checks each is stored and read back
// verbatim (or rejected with a *ValidationError: currencies must be three
// upper-case letters; strings over a column limit), and that the tables
// are intact.
func TestNoSQLInjection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, h := range append(hostile, strings.Repeat("'", 41)) {
		in := newOrder(int64(100 + i))
		in.OrderNo, in.SKUTitle = h, h
		var res order.Result
		err := inTx(b.ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			res, err = b.store.Create(b.ctx, tx, in)
			return err
		})
		if len([]rune(h)) > 40 {
			if !errors.Is(err, order.ErrInvalidArgument) {
				t.Errorf("%q: %v, want ErrInvalidArgument", h, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("create %q: %v", h, err)
		}
		items, err := b.store.Items(b.ctx, b.pool, in.OrderID)
		if err != nil || res.Order.OrderNo != h || len(items) != 1 || items[0].SKUTitle != h {
			t.Fatalf("%q stored as %q / %v (%v)", h, res.Order.OrderNo, items, err)
		}
		if _, err := b.pay(order.Payment{PaymentID: uuid.New(), PaymentRequestID: uuid.New(), OrderID: in.OrderID,
			Provider: h[:min(len(h), 32)], ProviderTradeNo: h, CallbackID: h, Amount: res.Order.TotalAmount, Currency: h,
			RawPayload: json.RawMessage(`{"note": ` + mustJSON(h) + `}`)}); !errors.Is(err, order.ErrInvalidArgument) {
			t.Errorf("currency %q: %v, want ErrInvalidArgument", h, err)
		}
		p := order.Payment{PaymentID: uuid.New(), PaymentRequestID: uuid.New(), OrderID: in.OrderID,
			Provider: string([]rune(h)[:min(len([]rune(h)), 32)]), ProviderTradeNo: h, CallbackID: h, Amount: res.Order.TotalAmount,
			Currency: res.Order.Currency, RawPayload: json.RawMessage(`{"note": ` + mustJSON(h) + `}`)}
		if _, err := b.pay(p); err != nil {
			t.Fatalf("pay %q: %v", h, err)
		}
		recs, err := b.store.Payments(b.ctx, b.pool, in.OrderID)
		if err != nil || len(recs) != 1 || recs[0].Provider != p.Provider || recs[0].ProviderTradeNo != h || recs[0].CallbackID != h {
			t.Fatalf("payment %q stored as %+v (%v)", h, recs, err)
		}
		var note string
		if err := b.pool.QueryRow(b.ctx, `SELECT raw_payload->>'note' FROM `+pgx.Identifier{b.schema, "payment_record"}.Sanitize()+
			` WHERE payment_id = $1`, p.PaymentID).Scan(&note); err != nil || note != h {
			t.Fatalf("raw payload note %q (%v), want %q", note, err, h)
		}
		// A cancel reason on a second order.
		in2 := newOrder(int64(1000 + i))
		b.create(t, in2)
		tr, err := b.store.TransitionOrder(b.ctx, b.pool, order.Transition{OrderID: in2.OrderID, To: order.StatusCancelled, CancelReason: h})
		if err != nil || !tr.Changed {
			t.Fatalf("cancel with %q: %+v, %v", h, tr, err)
		}
		if got, err := b.store.Get(b.ctx, b.pool, seckill.Request{OrderID: in2.OrderID}); err != nil || got.CancelReason != h {
			t.Fatalf("cancel reason %q (%v), want %q", got.CancelReason, err, h)
		}
	}
	for _, tbl := range []string{"orders", "order_items", "payment_record"} {
		if n := b.count(t, "seckill_schema_migrations WHERE component = 'order'"); n == 0 {
			t.Fatal("migration bookkeeping gone")
		}
		var ok bool
		if err := b.pool.QueryRow(b.ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{b.schema, tbl}.Sanitize()).Scan(&ok); err != nil || !ok {
			t.Errorf("table %s gone (%v)", tbl, err)
		}
	}
	if n := b.count(t, "orders"); n != 2*len(hostile) {
		t.Errorf("%d orders, want %d", n, 2*len(hostile))
	}
}

func mustJSON(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestQueuedFormsAcceptNilDst: every queued form takes a nil dst (the
// result is discarded) in both modes, and its statement runs.
func TestQueuedFormsAcceptNilDst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	paying, paid := b.create(t, newOrder(1)), b.create(t, newOrder(2))
	for _, on := range []pgtx.OnRefusal{pgtx.Return, pgtx.Abort} {
		var batch pgx.Batch
		created := newOrder(10 + int64(on))
		for name, err := range map[string]error{
			"QueueCreate":          b.store.QueueCreate(&batch, created, nil, on),
			"QueueTransitionOrder": b.store.QueueTransitionOrder(&batch, order.Transition{OrderID: paying.OrderID, To: order.StatusPaying}, nil, on),
			"QueueRecordPayment":   b.store.QueueRecordPayment(&batch, newPayment(paid), nil, on),
			"QueueCancelExpired":   b.store.QueueCancelExpired(&batch, 1, nil),
		} {
			if err != nil {
				t.Fatalf("%s(nil dst, %d): %v", name, on, err)
			}
		}
		if err := pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, &batch); err != nil {
			t.Fatalf("batch with nil dsts (%d): %v", on, err)
		}
		if got := b.get(t, created.OrderID); got.Status != order.StatusCreated {
			t.Fatalf("queued create (%d): %+v", on, got)
		}
		if got := b.get(t, paying.OrderID); got.Status != order.StatusPaying {
			t.Fatalf("queued transition (%d): %+v", on, got)
		}
	}
	if got := b.get(t, paid.OrderID); got.Status != order.StatusPaid {
		t.Fatalf("queued payment: %+v", got)
	}
}
