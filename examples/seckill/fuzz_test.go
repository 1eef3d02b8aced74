package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// fuzzAPI starts the HTTP API on a fresh schema for a fuzz target.
func fuzzAPI(f *testing.F) *api {
	ctx := pgtest.Context(f, 5*time.Minute)
	cfg := defaultConfig()
	cfg.Schema = pgtest.Schema(f)
	useStack(f, &cfg, stackReal, false)
	cfg.Stock, cfg.Buckets, cfg.Consumers, cfg.Relays, cfg.QueueDepth, cfg.OrderTTL = 3, 1, 2, 1, 50, time.Hour
	a, err := newAPI(ctx, pgtest.Pool(f), cfg, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(a.Close)
	return a
}

// serve runs one request through the handler (no network: a panic in a
// handler fails the fuzz target instead of being recovered by net/http).
func serve(a *api, method, path string, body []byte) (int, map[string]any) {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, req)
	var out map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out
}

// FuzzPaymentCallbackHTTP posts arbitrary bodies to POST /payments/callback
// for a real order: the answer is 200 (paid, duplicate, refund) or a 4xx
// (400 invalid, 404 unknown order, 422 mismatch) — never a 5xx, never a
// panic.
func FuzzPaymentCallbackHTTP(f *testing.F) {
	a := fuzzAPI(f)
	ctx := pgtest.Context(f, time.Minute)
	item := a.s.Item
	now := time.Now().UTC()
	m := flow.OrderMessage{RequestID: uuid.Must(uuid.NewV7()), ReservationID: uuid.Must(uuid.NewV7()), OrderID: a.s.ids.Next(),
		ActivityID: item.ActivityID, SKUID: item.SKUID, UserID: 424242, UnitPrice: item.UnitPrice, Currency: item.Currency,
		SKUTitle: item.Title, ReservedAt: now, ReservationTo: now.Add(time.Hour), OrderExpireAt: now.Add(time.Hour)}
	raw, _ := json.Marshal(m)
	if out, err := a.s.PlaceOrder(ctx, uuid.Must(uuid.NewV7()), raw); err != nil || out.Code != flow.CodeOrderCreated {
		f.Fatalf("place order: %+v, %v", out, err)
	}
	pay := func(tradeNo, callbackID string, amount int64, currency string) []byte {
		raw, _ := json.Marshal(flow.Payment{OrderID: m.OrderID, ProviderTradeNo: tradeNo, CallbackID: callbackID, Amount: amount, Currency: currency})
		return raw
	}
	for _, b := range [][]byte{
		pay("T1", "C1", item.UnitPrice, item.Currency), // paid
		pay("T1", "C1", item.UnitPrice, item.Currency), // duplicate
		pay("T2", "", item.UnitPrice, item.Currency),   // refund: already paid
		pay("T3", "", item.UnitPrice+1, item.Currency), // amount mismatch
		pay("T4", "", item.UnitPrice, "USD"),           // currency mismatch
		pay("'; DROP TABLE payment_record; --", `"quoted"`, item.UnitPrice, item.Currency),
		pay("T\x00", "", item.UnitPrice, item.Currency), // NUL: PostgreSQL text cannot hold it
		pay("T5", "C\x00", item.UnitPrice, item.Currency),
		pay(strings.Repeat("号", 129), "", item.UnitPrice, item.Currency),
		pay("T6", "", -1, "cny"),
		[]byte(`{"order_id": 0}`), []byte(`{"order_id": -1, "provider_trade_no": "x"}`), []byte(`{"order_id": 1e30}`),
		[]byte(`{"order_id": 1, "provider_trade_no": "x", "amount": 1, "currency": "CNY"}`),
		[]byte(``), []byte(`null`), []byte(`[]`), []byte(`{"order_id":` + strings.Repeat("9", 400) + `}`), []byte("\xff\xfe"),
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		code, out := serve(a, "POST", "/payments/callback", body)
		switch code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity:
		default:
			t.Fatalf("POST /payments/callback %q = %d %v", body, code, out)
		}
	})
}

// FuzzPlaceOrderHTTP posts arbitrary bodies to POST /orders: a body that
// is not {"user_id": <positive integer>} gets 400; a valid one is queued
// (202) or refused (409 already reserved, 410 sold out, 503 busy with
// Retry-After) — never a 500, never a panic.
func FuzzPlaceOrderHTTP(f *testing.F) {
	a := fuzzAPI(f)
	for _, b := range []string{`{"user_id": 1}`, `{"user_id": 1}`, `{"user_id": 2}`, `{"user_id": 0}`, `{"user_id": -1}`,
		`{"user_id": 9223372036854775807}`, `{"user_id": 9223372036854775808}`, `{"user_id": 1.5}`, `{"user_id": "1"}`,
		`{"user_id": 3, "user_id": 4}`, `{"USER_ID": 5}`, `{"user_id": 6} trailing`, `'; DROP TABLE orders; --`,
		``, `null`, "\x00", `{"user_id": 7, "x": "` + strings.Repeat("a", 5000) + `"}`} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		code, out := serve(a, "POST", "/orders", body)
		switch code {
		case http.StatusAccepted, http.StatusBadRequest, http.StatusConflict, http.StatusGone, http.StatusServiceUnavailable:
		default:
			t.Fatalf("POST /orders %q = %d %v", body, code, out)
		}
	})
}
