package order_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

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
		if err := b.store.QueueRecordPayment(&qb, p, new(order.PaymentResult), pgtx.Return); err != nil {
			var ve *order.Error
			if !errors.Is(err, order.ErrInvalidArgument) || !errors.As(err, &ve) || ve.Field == "" || qb.Len() != 0 {
				t.Fatalf("rejection %v (queued %d) is not a *ValidationError", err, qb.Len())
			}
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
		if err := b.store.QueueCreate(&qb, in, new(order.Result), pgtx.Return); err != nil {
			var ve *order.Error
			if !errors.Is(err, order.ErrInvalidArgument) || !errors.As(err, &ve) || ve.Field == "" || qb.Len() != 0 {
				t.Fatalf("rejection %v (queued %d) is not a *ValidationError", err, qb.Len())
			}
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
