package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/web"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// fuzzAPI starts the HTTP API on a fresh schema for a fuzz target.
func fuzzAPI(f *testing.F, stack string) *api {
	ctx := pgtest.Context(f, 5*time.Minute)
	cfg := defaultConfig()
	cfg.Schema = pgtest.Schema(f)
	cfg.Security = testSecurity
	useStack(f, &cfg, stack, false)
	cfg.Stock, cfg.Buckets, cfg.Consumers, cfg.Relays, cfg.QueueDepth, cfg.OrderTTL = 3, 1, 2, 1, 50, time.Hour
	a, err := newAPI(ctx, pgtest.Pool(f), cfg, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(a.Close)
	return a
}

// serve runs one request through the buyers' face (no network: a panic in
// a handler fails the fuzz target instead of being recovered by net/http).
func serve(a *api, req *http.Request) (int, map[string]any) {
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, req)
	var out map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out
}

// footprint is everything a request could have written: the rows of every
// table of the flow, and the front door's counters and reservations.
func footprint(t testing.TB, ctx context.Context, a *api) string {
	t.Helper()
	var parts []string
	for _, table := range []string{"orders", "order_items", "inventory_reservation", "inventory_ledger", "payment_record",
		"payment_review", "consumer_inbox", "event_outbox", "poison_message", "sku_inventory", "inventory_sale_log", "inventory_sku"} {
		var n int64
		var sum string
		if err := a.s.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '') FROM %s.%s t`,
			a.s.Schema, table)).Scan(&n, &sum); err != nil {
			t.Fatalf("footprint of %s: %v", table, err)
		}
		parts = append(parts, fmt.Sprintf("%s=%d/%s", table, n, sum))
	}
	st, err := a.s.front.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parts = append(parts, fmt.Sprintf("front=%v held=%d", st.Available, len(st.Held)))
	return strings.Join(parts, " ")
}

// forgedTokens are bearer tokens that must all be refused: no key, the
// wrong key, the wrong algorithm, expired, for another audience or issuer,
// without expiry, with a subject that is not a buyer id.
func forgedTokens(t testing.TB) []string {
	key := testSecurity.BuyerKeys[0]
	now := time.Now()
	claims := func(mod func(*jwt.RegisteredClaims)) jwt.RegisteredClaims {
		c := jwt.RegisteredClaims{Issuer: web.TokenIssuer, Audience: jwt.ClaimStrings{web.TokenAudience}, Subject: "42",
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}
		mod(&c)
		return c
	}
	sign := func(m jwt.SigningMethod, k any, c jwt.RegisteredClaims) string {
		s, err := jwt.NewWithClaims(m, c).SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	valid := sign(jwt.SigningMethodHS256, key, claims(func(*jwt.RegisteredClaims) {}))
	parts := strings.Split(valid, ".")
	noneHeader := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	return []string{
		"", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "bearer x.y.z", "Bearer " + strings.Repeat("a", 5000),
		"Bearer " + sign(jwt.SigningMethodHS256, []byte("another-key-0123456789abcdef0123456789"), claims(func(*jwt.RegisteredClaims) {})),
		"Bearer " + sign(jwt.SigningMethodHS256, testSecurity.CallbackSecrets[0], claims(func(*jwt.RegisteredClaims) {})),
		"Bearer " + sign(jwt.SigningMethodHS512, key, claims(func(*jwt.RegisteredClaims) {})),
		"Bearer " + noneHeader + "." + parts[1] + ".",
		"Bearer " + parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString([]byte("forged")),
		"Bearer " + parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"seckill","aud":"seckill-orders","sub":"7","exp":9999999999}`)) + "." + parts[2],
		"Bearer " + sign(jwt.SigningMethodHS256, key, claims(func(c *jwt.RegisteredClaims) { c.ExpiresAt = jwt.NewNumericDate(now.Add(-time.Hour)) })),
		"Bearer " + sign(jwt.SigningMethodHS256, key, claims(func(c *jwt.RegisteredClaims) { c.ExpiresAt = nil })),
		"Bearer " + sign(jwt.SigningMethodHS256, key, claims(func(c *jwt.RegisteredClaims) { c.Audience = jwt.ClaimStrings{"other"} })),
		"Bearer " + sign(jwt.SigningMethodHS256, key, claims(func(c *jwt.RegisteredClaims) { c.Issuer = "other" })),
		"Bearer " + sign(jwt.SigningMethodHS256, key, claims(func(c *jwt.RegisteredClaims) { c.Subject = "0" })),
		"Bearer " + sign(jwt.SigningMethodHS256, key, claims(func(c *jwt.RegisteredClaims) { c.Subject = "-1" })),
		"Bearer " + sign(jwt.SigningMethodHS256, key, claims(func(c *jwt.RegisteredClaims) { c.Subject = "042" })),
		"Bearer " + sign(jwt.SigningMethodHS256, key, claims(func(c *jwt.RegisteredClaims) { c.Subject = "9223372036854775808" })),
		"Bearer " + sign(jwt.SigningMethodHS256, key, claims(func(c *jwt.RegisteredClaims) { c.NotBefore = jwt.NewNumericDate(now.Add(time.Hour)) })),
		"Bearer " + testSecurity.OperatorToken + "x", // not quite the operator token
	}
}

// hostileStatuses are the answers a request without valid credentials
// may get: 400 (a malformed request), 401, 404 (no such route), 405 (no
// such method), 413 (body too large), and net/http's redirects to the
// cleaned path (/orders/../audit, //orders: 307; a missing trailing slash:
// 301).
var hostileStatuses = map[int]bool{
	http.StatusMovedPermanently: true, http.StatusTemporaryRedirect: true, http.StatusBadRequest: true, http.StatusUnauthorized: true, http.StatusNotFound: true,
	http.StatusMethodNotAllowed: true, http.StatusRequestEntityTooLarge: true,
}

// FuzzHostileHTTP sends requests without valid credentials to every
// route of the buyers' face (the operator routes included): malformed,
// oversized and forged (tokens signed with another key or algorithm,
// expired, tampered; callbacks unsigned, signed with another secret, out
// of the window, their body changed after signing). Nothing panics, every
// answer is 301, 307, 400, 401, 404, 405 or 413, and nothing is written: the
// database and the front door are as before, to the byte.
func FuzzHostileHTTP(f *testing.F) {
	{
		a := fuzzAPI(f, stackReal)
		ctx := pgtest.Context(f, 5*time.Minute)
		before := footprint(f, ctx, a)
		item := a.s.Item
		pay, _ := json.Marshal(flow.Payment{OrderID: 1, ProviderTradeNo: "forged-1", CallbackID: "x1", Amount: item.UnitPrice, Currency: item.Currency})
		now := time.Now()
		wrong := []byte("not-the-secret-0123456789abcdef0123456789")
		paths := []string{"/orders", "/orders/" + uuid.NewString(), "/orders/x", "/payments/callback", "/audit", "/audit?at_rest=true",
			"/reconcile", "/metrics", "/stats", "/", "/events", "/nope", "/orders/../audit", "//orders", "/ORDERS", "/payments/callback/"}
		tokens := forgedTokens(f)
		sigs := []string{"", "t=1", "v1=" + strings.Repeat("0", 64), "t=abc,v1=" + strings.Repeat("0", 64),
			web.SignCallback(now, pay, wrong),
			web.SignCallback(now.Add(-time.Hour), pay, testSecurity.CallbackSecrets[0]),
			web.SignCallback(now.Add(time.Hour), pay, testSecurity.CallbackSecrets[0]),
			web.SignCallback(now, append(bytes.Clone(pay), ' '), testSecurity.CallbackSecrets[0]),
			"t=" + fmt.Sprint(now.Unix()) + ",v1=" + strings.Repeat("g", 64),
			strings.Repeat("t=1,", 400)}
		bodies := [][]byte{nil, []byte(`{}`), []byte(`{"user_id": 4242}`), pay, []byte(`{"order_id": 1e30}`), []byte("\xff\xfe\x00"),
			bytes.Repeat([]byte("a"), 1<<15), []byte(`{"a":` + strings.Repeat("[", 10000) + `}`)}
		for i, p := range paths {
			for j, m := range []string{"GET", "POST", "PUT", "DELETE"} {
				f.Add(m, p, tokens[(i+j)%len(tokens)], sigs[(i+j)%len(sigs)], "key-1", bodies[(i+j)%len(bodies)])
			}
		}
		for i, tok := range tokens {
			f.Add("POST", "/orders", tok, "", "", bodies[i%len(bodies)])
			f.Add("GET", "/orders/"+uuid.NewString(), tok, "", "", []byte(nil))
			f.Add("GET", "/audit", tok, "", "", []byte(nil))
		}
		for i, sig := range sigs {
			f.Add("POST", "/payments/callback", "", sig, "", pay)
			f.Add("POST", "/payments/callback", tokens[i%len(tokens)], sig, "x1", bodies[i%len(bodies)])
		}
		f.Add("POST", "/payments/callback", "", "", "", pay) // the forged callback: no credentials at all

		f.Fuzz(func(t *testing.T, method, path, auth, sig, key string, body []byte) {
			req, err := http.NewRequestWithContext(ctx, method, "http://seckill.test"+path, bytes.NewReader(body))
			if err != nil || req.URL.Path == "" {
				t.Skip("not a request net/http would serve")
			}
			req.RemoteAddr = "192.0.2.7:4000"
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			if sig != "" {
				req.Header.Set(web.SignatureHeader, sig)
			}
			if key != "" {
				req.Header.Set(web.IdempotencyHeader, key)
			}
			code, out := serve(a, req)
			if !hostileStatuses[code] {
				t.Fatalf("%s %s (Authorization %.40q, signature %.40q) = %d %v, want 301, 307, 400, 401, 404, 405 or 413", method, path, auth, sig, code, out)
			}
			if after := footprint(t, ctx, a); after != before {
				t.Fatalf("%s %s wrote something:\nbefore %s\nafter  %s", method, path, before, after)
			}
		})
	}
}

// FuzzSignedCallbackHTTP posts arbitrary bodies, correctly signed, to POST
// /payments/callback for a real order: the answer is 200 (paid, duplicate,
// refund) or a 4xx (400 invalid, 404 unknown order, 422 mismatch) —
// never a 5xx, never a panic.
func FuzzSignedCallbackHTTP(f *testing.F) {
	a := fuzzAPI(f, stackReal)
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
		pay("T1", "C1", item.UnitPrice, item.Currency),   // paid
		pay("T1", "C1", item.UnitPrice, item.Currency),   // duplicate
		pay("T1", "C1", item.UnitPrice+1, item.Currency), // the same callback id, another payment: 422
		pay("T2", "", item.UnitPrice, item.Currency),     // refund: already paid
		pay("T3", "", item.UnitPrice+1, item.Currency),   // amount mismatch
		pay("T4", "", item.UnitPrice, "USD"),             // currency mismatch
		pay("'; DROP TABLE payment_record; --", `"quoted"`, item.UnitPrice, item.Currency),
		pay("T\x00", "", item.UnitPrice, item.Currency), // NUL: PostgreSQL text cannot hold it
		pay("T5", "C\x00", item.UnitPrice, item.Currency),
		pay(strings.Repeat("号", 129), "", item.UnitPrice, item.Currency),
		pay("T6", "", -1, "cny"),
		[]byte(`{"order_id": 0}`), []byte(`{"order_id": -1, "provider_trade_no": "x"}`), []byte(`{"order_id": 1e30}`),
		[]byte(`{"order_id": 1, "provider_trade_no": "x", "amount": 1, "currency": "CNY"}`),
		[]byte(`{"order_id": 1, "user_id": 5}`), []byte(`{"order_id": 1} {}`),
		[]byte(``), []byte(`null`), []byte(`[]`), []byte(`{"order_id":` + strings.Repeat("9", 400) + `}`), []byte("\xff\xfe"),
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequestWithContext(ctx, "POST", "/payments/callback", bytes.NewReader(body))
		req.Header.Set(web.SignatureHeader, web.SignCallback(time.Now(), body, testSecurity.CallbackSecrets[0]))
		code, out := serve(a, req)
		switch code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge:
		case http.StatusUnauthorized:
			if out["reason"] != web.SigReplayed { // the fuzzer repeated a body within the second
				t.Fatalf("POST /payments/callback %q = %d %v", body, code, out)
			}
		default:
			t.Fatalf("POST /payments/callback %q = %d %v", body, code, out)
		}
	})
}

// FuzzPlaceOrderHTTP posts arbitrary bodies to POST /orders as an
// authenticated buyer: a body that is neither empty nor {"activity_id",
// "sku_id"} gets 400 (a body naming a buyer included), another item 404;
// a valid one is queued (202) or refused (409 already reserved, 410 sold
// out, 503 busy with Retry-After) — never a 500, never a panic.
func FuzzPlaceOrderHTTP(f *testing.F) {
	a := fuzzAPI(f, stackReal)
	ctx := pgtest.Context(f, 5*time.Minute)
	for i, b := range []string{`{}`, ``, `{"sku_id": 1001}`, `{"activity_id": 1, "sku_id": 1001}`, `{"sku_id": 1002}`, `{"activity_id": 2}`,
		`{"user_id": 1}`, `{"sku_id": -1}`, `{"sku_id": 1.5}`, `{"sku_id": "1001"}`, `{"sku_id": 9223372036854775808}`,
		`{"sku_id": 1001, "sku_id": 1002}`, `{"SKU_ID": 1001}`, `{} trailing`, `'; DROP TABLE orders; --`,
		`null`, "\x00", `{"x": "` + strings.Repeat("a", 5000) + `"}`} {
		f.Add(int64(i%4+1), "", []byte(b))
		f.Add(int64(i%4+1), "k-"+fmt.Sprint(i%3), []byte(b))
	}
	f.Add(int64(9), "\x00", []byte(`{}`))
	f.Add(int64(9), strings.Repeat("k", 256), []byte(`{}`))
	f.Fuzz(func(t *testing.T, buyer int64, key string, body []byte) {
		if buyer <= 0 {
			t.Skip("a token names a positive buyer id")
		}
		req := httptest.NewRequestWithContext(ctx, "POST", "/orders", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken(t, buyer))
		if key != "" {
			req.Header.Set(web.IdempotencyHeader, key)
		}
		code, out := serve(a, req)
		switch code {
		case http.StatusAccepted, http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusGone,
			http.StatusServiceUnavailable, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("POST /orders as %d (key %q) %q = %d %v", buyer, key, body, code, out)
		}
	})
}
