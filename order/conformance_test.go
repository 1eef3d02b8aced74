package order_test

// The order package's conformance table and scenarios, run by
// internal/conformance: nil handles, invalid and hostile input, nil
// destinations, every pgx exec mode, and the fuzz targets.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/conformance"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

// hostile are strings an attacker would try through a text parameter.
var hostile = conformance.Hostile("orders", "payment_record CASCADE")

// invalid is the order package's refusal of invalid input; nilHandle its
// refusal of a nil transaction or connection.
var (
	invalid   = conformance.Typed(order.ErrInvalidArgument, func(e *order.Error) string { return e.Field })
	nilHandle = conformance.Typed(order.ErrInvalidArgument, func(e *order.Error) string { return e.Field }, "tx", "db", "q")
)

// exempt lists the methods of *order.Store (with those export_test.go
// adds) with nothing to conform to, with the reason; every other method
// has a row in orderEntries (TestConformanceTableCoversStore checks both).
var exempt = map[string]string{
	"Schema":           "test export: returns the configured schema name",
	"DueForExpirySQL":  "test export: returns SQL text",
	"CancelExpiredSQL": "test export: returns SQL text",
}

// TestConformanceTableCoversStore: every method of *order.Store is in the
// conformance table or exempt.
func TestConformanceTableCoversStore(t *testing.T) {
	t.Parallel()
	conformance.Covered(t, &order.Store{}, orderEntries(testBundle{}, order.Order{}), exempt)
}

// orderEntries is the conformance table, for the existing order o. The
// invalid cases cover what TestInvalidInput (validation_test.go) does not:
// ClassifyPaymentConflict, Items, Payments, DueForExpiry, CancelExpired
// and QueueCancelExpired (limits), nil batches of QueueCreate,
// QueueRecordPayment and QueueCancelExpired, the zero id through
// TimeoutCancel/UserCancel, and text PostgreSQL cannot store (NUL bytes in
// every text field, JSON that jsonb rejects) — those were database errors
// before. Covered there: Create, QueueCreate, ClassifyConflict,
// TransitionOrder, QueueTransitionOrder, RecordPayment,
// QueueRecordPayment, Get, GetByRequest; New in TestNewConfig.
func orderEntries(b testBundle, o order.Order) []conformance.Entry {
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
	badOrders := map[string]order.NewOrder{
		"NUL title":    no(func(in *order.NewOrder) { in.SKUTitle = "a\x00" }),
		"NUL order no": no(func(in *order.NewOrder) { in.OrderNo = "\x00" }),
	}
	var classifyPay, recordPay, queuePay, create, queueCreate, due, cancel, queueCancel []conformance.Case
	for name, p := range badPayments {
		classifyPay = append(classifyPay, conformance.Case{Name: name, Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
			_, err := b.store.ClassifyPaymentConflict(ctx, tx, p)
			return err
		}})
		recordPay = append(recordPay, conformance.Case{Name: name, Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
			_, err := b.store.RecordPayment(ctx, tx, p)
			return err
		}})
		queuePay = append(queuePay, conformance.Case{Name: name, Do: func(_ context.Context, _ pgx.Tx, qb *pgx.Batch) error {
			return b.store.QueueRecordPayment(qb, p, new(order.PaymentResult), pgtx.Return)
		}})
	}
	for name, in := range badOrders {
		create = append(create, conformance.Case{Name: name, Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
			_, err := b.store.Create(ctx, tx, in)
			return err
		}})
		queueCreate = append(queueCreate, conformance.Case{Name: name, Do: func(_ context.Context, _ pgx.Tx, qb *pgx.Batch) error {
			return b.store.QueueCreate(qb, in, new(order.Result), pgtx.Return)
		}})
	}
	for _, limit := range []int{0, -1, 10000 + 1} {
		due = append(due, conformance.Case{Name: "limit", Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
			_, err := b.store.DueForExpiry(ctx, tx, limit)
			return err
		}})
		cancel = append(cancel, conformance.Case{Name: "limit", Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
			_, err := b.store.CancelExpired(ctx, tx, limit)
			return err
		}})
		queueCancel = append(queueCancel, conformance.Case{Name: "limit", Do: func(_ context.Context, _ pgx.Tx, qb *pgx.Batch) error {
			return b.store.QueueCancelExpired(qb, limit, new([]order.Result))
		}})
	}
	nilBatch := func(call func() error) conformance.Case {
		return conformance.Case{Name: "nil batch", Do: func(context.Context, pgx.Tx, *pgx.Batch) error { return call() }}
	}
	transition := func(name string, tr order.Transition) conformance.Case {
		return conformance.Case{Name: name, Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
			_, err := b.store.TransitionOrder(ctx, tx, tr)
			return err
		}}
	}
	nilCall := func(name string, call func(ctx context.Context) error) conformance.Call {
		return conformance.Call{Name: name, Do: call}
	}
	return []conformance.Entry{
		{Method: "Check", Nil: []conformance.Call{nilCall("catalog", func(ctx context.Context) error { return b.store.Check(ctx, nil) })}},
		{Method: "Audit", Nil: []conformance.Call{nilCall("all", func(ctx context.Context) error { _, err := b.store.Audit(ctx, nil); return err })}},
		{Method: "AuditSince", Nil: []conformance.Call{nilCall("all", func(ctx context.Context) error { _, err := b.store.AuditSince(ctx, nil, time.Time{}); return err })}},
		{Method: "Create", Invalid: create, Nil: []conformance.Call{nilCall("zero", func(ctx context.Context) error {
			_, err := b.store.Create(ctx, nil, order.NewOrder{})
			return err
		})}},
		{Method: "QueueCreate",
			Invalid: append(queueCreate, nilBatch(func() error { return b.store.QueueCreate(nil, newOrder(3), new(order.Result), pgtx.Return) })),
			Queue:   func(qb *pgx.Batch) error { return b.store.QueueCreate(qb, newOrder(3), nil, pgtx.Return) }},
		{Method: "ClassifyConflict", Nil: []conformance.Call{nilCall("zero", func(ctx context.Context) error {
			_, err := b.store.ClassifyConflict(ctx, nil, order.NewOrder{})
			return err
		})}},
		{Method: "DueForExpiry", Invalid: due, Nil: []conformance.Call{nilCall("1", func(ctx context.Context) error {
			_, err := b.store.DueForExpiry(ctx, nil, 1)
			return err
		})}},
		{Method: "CancelExpired", Invalid: cancel, Nil: []conformance.Call{nilCall("1", func(ctx context.Context) error {
			_, err := b.store.CancelExpired(ctx, nil, 1)
			return err
		})}},
		{Method: "QueueCancelExpired",
			Invalid: append(queueCancel, nilBatch(func() error { return b.store.QueueCancelExpired(nil, 1, new([]order.Result)) })),
			Queue:   func(qb *pgx.Batch) error { return b.store.QueueCancelExpired(qb, 1, nil) }},
		{Method: "RecordPayment", Invalid: recordPay, Nil: []conformance.Call{nilCall("zero", func(ctx context.Context) error {
			_, err := b.store.RecordPayment(ctx, nil, order.Payment{})
			return err
		})}},
		{Method: "QueueRecordPayment",
			Invalid: append(queuePay, nilBatch(func() error {
				return b.store.QueueRecordPayment(nil, newPayment(o), new(order.PaymentResult), pgtx.Return)
			})),
			Queue: func(qb *pgx.Batch) error { return b.store.QueueRecordPayment(qb, newPayment(o), nil, pgtx.Return) }},
		{Method: "ClassifyPaymentConflict", Invalid: classifyPay, Nil: []conformance.Call{nilCall("zero", func(ctx context.Context) error {
			_, err := b.store.ClassifyPaymentConflict(ctx, nil, order.Payment{})
			return err
		})}},
		{Method: "Get", Nil: []conformance.Call{
			nilCall("id", func(ctx context.Context) error {
				_, err := b.store.Get(ctx, nil, seckill.Request{OrderID: 1})
				return err
			}),
			nilCall("request", func(ctx context.Context) error {
				_, err := b.store.Get(ctx, nil, seckill.Request{RequestID: uuid.New()})
				return err
			}),
			nilCall("buyer", func(ctx context.Context) error {
				_, err := b.store.Get(ctx, nil, seckill.Request{ActivityID: 1, SKUID: 1, UserID: 1})
				return err
			}),
		}},
		{Method: "Items",
			Nil: []conformance.Call{nilCall("1", func(ctx context.Context) error { _, err := b.store.Items(ctx, nil, 1); return err })},
			Invalid: []conformance.Case{{Name: "0", Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
				_, err := b.store.Items(ctx, tx, 0)
				return err
			}}}},
		{Method: "Payments",
			Nil: []conformance.Call{nilCall("1", func(ctx context.Context) error { _, err := b.store.Payments(ctx, nil, 1); return err })},
			Invalid: []conformance.Case{{Name: "-1", Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
				_, err := b.store.Payments(ctx, tx, -1)
				return err
			}}}},
		{Method: "RecordPaymentReview", Nil: []conformance.Call{nilCall("zero", func(ctx context.Context) error {
			_, _, err := b.store.RecordPaymentReview(ctx, nil, order.Payment{}, order.PaymentResult{}, order.ErrNotFound)
			return err
		})}},
		{Method: "OpenPaymentReviews", Nil: []conformance.Call{nilCall("1", func(ctx context.Context) error {
			_, err := b.store.OpenPaymentReviews(ctx, nil, 1)
			return err
		})}},
		{Method: "ResolvePaymentReview", Nil: []conformance.Call{nilCall("1", func(ctx context.Context) error {
			_, err := b.store.ResolvePaymentReview(ctx, nil, 1, "x", "y")
			return err
		})}},
		{Method: "QuantitiesByStatus", Nil: []conformance.Call{nilCall("sku", func(ctx context.Context) error {
			_, err := b.store.QuantitiesByStatus(ctx, nil, 1, 1)
			return err
		})}},
		{Method: "TransitionOrder",
			Nil: []conformance.Call{nilCall("zero", func(ctx context.Context) error {
				_, err := b.store.TransitionOrder(ctx, nil, order.Transition{})
				return err
			})},
			Invalid: []conformance.Case{
				transition("NUL reason", order.Transition{OrderID: o.OrderID, To: order.StatusCancelled, CancelReason: "r\x00"}),
				transition("TimeoutCancel(0)", order.TimeoutCancel(0)),
				transition("UserCancel(-1)", userCancel(-1)),
			}},
		{Method: "QueueTransitionOrder",
			Queue: func(qb *pgx.Batch) error {
				return b.store.QueueTransitionOrder(qb, order.Transition{OrderID: o.OrderID, To: order.StatusPaying}, nil, pgtx.Return)
			}},
	}
}

// TestNilHandleIsATypedError: every method that takes a transaction or
// connection rejects a nil one with a typed error instead of panicking.
func TestNilHandleIsATypedError(t *testing.T) {
	t.Parallel()
	s, err := order.New(order.Config{})
	if err != nil {
		t.Fatal(err)
	}
	conformance.NilHandles(t, orderEntries(testBundle{store: s}, order.Order{}), nilHandle)
}

// TestEveryEntryPointRejectsInvalidInput runs the table's invalid cases:
// each is refused with an *order.Error matching ErrInvalidArgument, and
// nothing is queued or written: orders, items and payments are counted,
// and the order's version is unchanged.
func TestEveryEntryPointRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.create(t, newOrder(1))
	rows := func() int64 {
		return int64(b.count(t, "orders") + b.count(t, "order_items") + b.count(t, "payment_record"))
	}
	conformance.Refusals(t, b.ctx, b.pool, orderEntries(b, o), invalid, rows)
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
			RawPayload: json.RawMessage(`{"note": ` + conformance.MustJSON(h) + `}`)}); !errors.Is(err, order.ErrInvalidArgument) {
			t.Errorf("currency %q: %v, want ErrInvalidArgument", h, err)
		}
		p := order.Payment{PaymentID: uuid.New(), PaymentRequestID: uuid.New(), OrderID: in.OrderID,
			Provider: string([]rune(h)[:min(len([]rune(h)), 32)]), ProviderTradeNo: h, CallbackID: h, Amount: res.Order.TotalAmount,
			Currency: res.Order.Currency, RawPayload: json.RawMessage(`{"note": ` + conformance.MustJSON(h) + `}`)}
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

// TestQueryExecModes runs every statement of the package through pools in
// the query exec modes where pgx does not learn parameter types from the
// server (exec, simple_protocol: what PgBouncer in transaction mode needs)
// or encodes from a cached description (cache_describe).
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	conformance.ExecModes(t, func(t *testing.T, pool *pgxpool.Pool) {
		b := setupWith(t, pool)
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

// FuzzPaymentValidation feeds arbitrary provider strings, amounts,
// currencies and raw payloads to RecordPayment for an existing order.
// Validation never panics; it rejects with a *ValidationError (nothing
// queued, nothing written) or accepts, and then PostgreSQL accepts too:
// the payment is recorded verbatim, or classified (amount/currency
// mismatch) — never a database error. Each input runs in a transaction
// that is rolled back.
func FuzzPaymentValidation(f *testing.F) {
	b := setup(f)
	o := b.create(f, newOrder(1))
	for _, s := range []struct {
		provider, tradeNo, callbackID, currency, raw string
		amount                                       int64
	}{
		{"simpay", "T1", "cb1", "CNY", `{"ok":true}`, 9900},
		{"'; DROP TABLE orders; --", `"quoted"`, "$1", "CNY", ``, 9900},
		{"p\x00", "t", "", "CNY", ``, 9900},
		{"p", "t\x00", "", "CNY", ``, 9900},
		{"p", "t", "c\x00", "CNY", ``, 9900},
		{"p", "t", "", "CNY", `{"a":"\u0000"}`, 9900},
		{"p", "t", "", "CNY", `"\udfff"`, 9900},
		{"p", "t", "", "CNY", `1e400000`, 9900},
		{"p", "t", "", "CNY", "\"\xff\"", 9900},
		{"支付宝", strings.Repeat("号", 128), "🚀", "USD", `[]`, -1},
		{"p", "t", "", "CNY", `null`, 1 << 62},
		{"p", "t", "", "cny", `{}`, 9900},
	} {
		f.Add(s.provider, s.tradeNo, s.callbackID, s.currency, []byte(s.raw), s.amount)
	}
	f.Fuzz(func(t *testing.T, provider, tradeNo, callbackID, currency string, raw []byte, amount int64) {
		if len(raw) == 0 {
			raw = nil
		}
		p := order.Payment{PaymentID: uuid.Must(uuid.NewV7()), PaymentRequestID: uuid.Must(uuid.NewV7()), OrderID: o.OrderID,
			Provider: provider, ProviderTradeNo: tradeNo, CallbackID: callbackID, Amount: amount, Currency: currency,
			RawPayload: json.RawMessage(raw)}
		var qb pgx.Batch
		if conformance.Rejected(t, b.store.QueueRecordPayment(&qb, p, new(order.PaymentResult), pgtx.Return), qb.Len(), invalid) {
			return
		}
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(b.ctx)
		res, err := b.store.RecordPayment(b.ctx, tx, p)
		switch {
		case errors.Is(err, order.ErrMismatch):
			return
		case err != nil:
			t.Fatalf("validation accepted a payment PostgreSQL rejects: %v\npayment %+q", err, p)
		case res.Kind != order.PaymentPaid:
			t.Fatalf("first payment: %+v", res)
		}
		var gotProvider, gotTrade, gotCallback string
		var sameRaw bool
		if raw == nil {
			raw = []byte("{}")
		}
		err = tx.QueryRow(b.ctx, `SELECT provider, provider_trade_no, coalesce(callback_id, ''), raw_payload = $2::jsonb
			FROM `+pgx.Identifier{b.schema, "payment_record"}.Sanitize()+` WHERE payment_id = $1`, p.PaymentID, string(raw)).
			Scan(&gotProvider, &gotTrade, &gotCallback, &sameRaw)
		if err != nil {
			t.Fatal(err)
		}
		if gotProvider != provider || gotTrade != tradeNo || gotCallback != callbackID || !sameRaw {
			t.Fatalf("stored %q %q %q raw same %v, want %q %q %q", gotProvider, gotTrade, gotCallback, sameRaw, provider, tradeNo, callbackID)
		}
	})
}

// FuzzNewOrderValidation feeds arbitrary order numbers, titles,
// currencies, buckets, quantities and prices to Create: a
// *ValidationError before the database, or an order stored verbatim.
func FuzzNewOrderValidation(f *testing.F) {
	b := setup(f)
	f.Add("", "Flash-sale phone", "CNY", int16(3), int16(1), int64(9900))
	f.Add("'; DROP TABLE orders; --", `"quoted" $1`, "USD", int16(0), int16(1), int64(0))
	f.Add("no\x00", "title", "CNY", int16(0), int16(1), int64(1))
	f.Add("no", "title\x00", "CNY", int16(0), int16(1), int64(1))
	f.Add("no", strings.Repeat("手", 256), "CNY", int16(32767), int16(1), int64(1<<63-1))
	f.Add("no", "t", "€€€", int16(-1), int16(2), int64(-5))
	f.Fuzz(func(t *testing.T, orderNo, title, currency string, bucket, quantity int16, price int64) {
		in := newOrder(1)
		in.OrderNo, in.SKUTitle, in.Currency, in.Bucket, in.Quantity, in.UnitPrice = orderNo, title, currency, bucket, quantity, price
		var qb pgx.Batch
		if conformance.Rejected(t, b.store.QueueCreate(&qb, in, new(order.Result), pgtx.Return), qb.Len(), invalid) {
			return
		}
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(b.ctx)
		res, err := b.store.Create(b.ctx, tx, in)
		if err != nil {
			t.Fatalf("validation accepted an order PostgreSQL rejects: %v\norder %+q", err, in)
		}
		items, err := b.store.Items(b.ctx, tx, in.OrderID)
		if err != nil || len(items) != 1 {
			t.Fatalf("items %v, %v", items, err)
		}
		if res.Order.OrderNo != orderNo || items[0].SKUTitle != title || res.Order.Bucket != bucket || res.Order.UnitPrice != price {
			t.Fatalf("stored %+v / %+v", res.Order, items[0])
		}
	})
}
