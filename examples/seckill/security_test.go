package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/guardstore"
	"github.com/seckillkit/seckill/examples/seckill/web"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// secAPI starts the HTTP API on a small sale for the security tests, with
// sec as its security (zero fields: testSecurity's).
func secAPI(t *testing.T, stack string, sec web.SecurityConfig, log *slog.Logger) (*api, *httptest.Server) {
	t.Helper()
	ctx := pgtest.Context(t, 3*time.Minute)
	cfg := smallConfig(t)
	useStack(t, &cfg, stack, false)
	cfg.Stock, cfg.Buckets, cfg.OrderTTL, cfg.FrontDrift = 5, 1, time.Hour, 0
	if sec.BuyerKeys == nil {
		sec.BuyerKeys = testSecurity.BuyerKeys
	}
	if sec.CallbackSecrets == nil {
		sec.CallbackSecrets = testSecurity.CallbackSecrets
	}
	if sec.OperatorToken == "" {
		sec.OperatorToken = testSecurity.OperatorToken
	}
	sec.BuyerRate, sec.AddrRate = cmpOrInt(sec.BuyerRate, -1), cmpOrInt(sec.AddrRate, -1)
	cfg.Security = sec
	a, err := newAPI(ctx, pgtest.Pool(t), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a, serveTest(t, a)
}

func cmpOrInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// createdOrder places an order for buyer over HTTP and waits until it is
// CREATED; it returns the order's id and amount.
func createdOrder(t *testing.T, base string, buyer int64) (int64, int64) {
	t.Helper()
	code, out := doAs(t, buyer, "POST", base+"/orders", map[string]any{})
	if code != http.StatusAccepted {
		t.Fatalf("POST /orders as %d = %d %v", buyer, code, out)
	}
	o := waitStatus(t, base, out["request_id"].(string), "CREATED")
	// A float64 cannot hold every order id: read it exactly.
	return orderOf(t, base, uuid.MustParse(out["request_id"].(string))), int64(o["amount"].(float64))
}

// orderOf reads the order id of a request from GET /orders with exact
// integers.
func orderOf(t *testing.T, base string, reqID uuid.UUID) int64 {
	t.Helper()
	req := testRequest(t, context.Background(), 0, "GET", base+"/orders/"+reqID.String(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		OrderID int64 `json:"order_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.OrderID == 0 {
		t.Fatalf("GET /orders/%s: %v %+v", reqID, err, out)
	}
	return out.OrderID
}

// callback is a payment callback's raw body.
func callback(t *testing.T, p flow.Payment) []byte {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// postCallback posts a raw callback body with the given signature header
// ("" for none) through the buyers' face, in process.
func postCallback(a *api, sig string, body []byte) (int, map[string]any) {
	req := httptest.NewRequest("POST", "/payments/callback", bytes.NewReader(body))
	if sig != "" {
		req.Header.Set(web.SignatureHeader, sig)
	}
	return serve(a, req)
}

// metricValue reads one value of the operators' GET /metrics.
func metricValue(t *testing.T, base, name string, labels ...string) float64 {
	t.Helper()
	return value(scrape(t, base), name, labels...)
}

// TestForgedCallbackRefused: the callback that marked any order paid —
// no credentials at all — is refused with 401, counted, and changes
// nothing in the database or the front door.
func TestForgedCallbackRefused(t *testing.T) {
	t.Parallel()
	for _, stack := range []string{stackReal, stackMemory} {
		t.Run(stack, func(t *testing.T) {
			t.Parallel()
			ctx := pgtest.Context(t, 3*time.Minute)
			a, srv := secAPI(t, stack, web.SecurityConfig{}, nil)
			orderID, amount := createdOrder(t, srv.URL, 4242)
			waitQuiet(t, ctx, a)
			if err := a.s.waitEventsConsumed(ctx); err != nil {
				t.Fatal(err)
			}
			before := footprint(t, ctx, a)
			forged := fmt.Sprintf(`{"order_id":%d, "provider_trade_no":"forged-1", "callback_id":"x1", "amount":%d, "currency":"CNY"}`, orderID, amount)
			resp, err := http.Post(srv.URL+"/payments/callback", "application/json", strings.NewReader(forged))
			if err != nil {
				t.Fatal(err)
			}
			var out map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || out["reason"] != web.SigMissing || resp.Header.Get("WWW-Authenticate") != web.SignatureHeader {
				t.Fatalf("forged callback = %d %v (WWW-Authenticate %q), want 401 missing", resp.StatusCode, out, resp.Header.Get("WWW-Authenticate"))
			}
			if after := footprint(t, ctx, a); after != before {
				t.Fatalf("the forged callback wrote something:\nbefore %s\nafter  %s", before, after)
			}
			o, err := a.s.Orders.Get(ctx, a.s.Pool, seckill.Request{OrderID: orderID})
			if err != nil || o.Status.String() != "CREATED" {
				t.Fatalf("order after the forged callback: %v %v, want CREATED", o.Status, err)
			}
			if n := metricValue(t, srv.URL, "seckill_callbacks_refused_total", "reason", web.SigMissing); n != 1 {
				t.Errorf("seckill_callbacks_refused_total{reason=missing} = %v, want 1", n)
			}
		})
	}
}

// TestCallbackSignatures: a callback is accepted only with a signature over
// its timestamp and raw body under an active secret, within the
// tolerance, once. Missing, malformed, wrong, expired (either way),
// replayed, and body-changed-after-signing callbacks are 401 with the
// reason, counted, and write nothing; during a rotation either secret
// signs; after it, the old one no longer does.
func TestCallbackSignatures(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	oldSecret, newSecret := []byte("old-callback-secret-0123456789abcdef"), []byte("new-callback-secret-0123456789abcdef")
	a, srv := secAPI(t, stackMemory, web.SecurityConfig{CallbackSecrets: [][]byte{oldSecret}}, nil)
	o1, amount := createdOrder(t, srv.URL, 1)
	o2, _ := createdOrder(t, srv.URL, 2)
	o3, _ := createdOrder(t, srv.URL, 3)
	waitQuiet(t, ctx, a)
	body := callback(t, flow.Payment{OrderID: o1, ProviderTradeNo: "T1", CallbackID: "C1", Amount: amount, Currency: "CNY"})
	now := time.Now()
	tol := a.Security().Tolerance
	changed := bytes.Replace(body, []byte(strconv.FormatInt(amount, 10)), []byte(strconv.FormatInt(amount-1, 10)), 1)
	changedTrade := bytes.Replace(body, []byte(`"T1"`), []byte(`"T9"`), 1)
	other := []byte("not-the-secret-0123456789abcdef0123")

	before := footprint(t, ctx, a)
	for _, c := range []struct {
		name, sig, reason string
		body              []byte
	}{
		{"missing", "", web.SigMissing, body},
		{"no v1", fmt.Sprintf("t=%d", now.Unix()), web.SigMalformed, body},
		{"no t", "v1=" + web.MACHex(oldSecret, now.Unix(), body), web.SigMalformed, body},
		{"t twice", fmt.Sprintf("t=%d,t=%d,v1=%s", now.Unix(), now.Unix(), web.MACHex(oldSecret, now.Unix(), body)), web.SigMalformed, body},
		{"short v1", fmt.Sprintf("t=%d,v1=abcd", now.Unix()), web.SigMalformed, body},
		{"wrong secret", web.SignCallback(now, body, other), web.SigWrong, body},
		{"not yet rotated in", web.SignCallback(now, body, newSecret), web.SigWrong, body},
		{"a v0 only", fmt.Sprintf("t=%d,v0=%s", now.Unix(), web.MACHex(oldSecret, now.Unix(), body)), web.SigMalformed, body},
		{"expired", web.SignCallback(now.Add(-tol-2*time.Second), body, oldSecret), web.SigExpired, body},
		{"from the future", web.SignCallback(now.Add(tol+2*time.Second), body, oldSecret), web.SigExpired, body},
		{"amount changed after signing", web.SignCallback(now, body, oldSecret), web.SigWrong, changed},
		{"trade number changed after signing", web.SignCallback(now, body, oldSecret), web.SigWrong, changedTrade},
		{"signed over another timestamp", fmt.Sprintf("t=%d,v1=%s", now.Unix(), web.MACHex(oldSecret, now.Unix()-1, body)), web.SigWrong, body},
	} {
		code, out := postCallback(a, c.sig, c.body)
		if code != http.StatusUnauthorized || out["reason"] != c.reason {
			t.Errorf("%s: %d %v, want 401 %s", c.name, code, out, c.reason)
		}
	}
	if after := footprint(t, ctx, a); after != before {
		t.Fatalf("refused callbacks wrote something:\nbefore %s\nafter  %s", before, after)
	}
	for reason, want := range map[string]float64{web.SigMissing: 1, web.SigMalformed: 5, web.SigWrong: 5, web.SigExpired: 2} {
		if n := metricValue(t, srv.URL, "seckill_callbacks_refused_total", "reason", reason); n != want {
			t.Errorf("seckill_callbacks_refused_total{reason=%s} = %v, want %v", reason, n, want)
		}
	}

	// Valid, then replayed as captured: the replay is refused and writes
	// nothing; a fresh delivery of the same callback is a duplicate.
	sig := web.SignCallback(now, body, oldSecret)
	if code, out := postCallback(a, sig, body); code != http.StatusOK || out["result"] != "paid" {
		t.Fatalf("signed callback = %d %v, want 200 paid", code, out)
	}
	waitQuiet(t, ctx, a) // the relays mark ORDER_PAID sent
	paid := footprint(t, ctx, a)
	if code, out := postCallback(a, sig, body); code != http.StatusUnauthorized || out["reason"] != web.SigReplayed {
		t.Fatalf("replayed callback = %d %v, want 401 replayed", code, out)
	}
	if after := footprint(t, ctx, a); after != paid {
		t.Fatalf("the replay wrote something:\nbefore %s\nafter  %s", paid, after)
	}
	if code, out := postCallback(a, web.SignCallback(now.Add(-time.Second), body, oldSecret), body); code != http.StatusOK || out["result"] != "duplicate" {
		t.Fatalf("the same callback delivered again, signed afresh = %d %v, want 200 duplicate", code, out)
	}
	// The same callback id with another payment: 422, nothing written.
	other1 := callback(t, flow.Payment{OrderID: o1, ProviderTradeNo: "T1-other", CallbackID: "C1", Amount: amount, Currency: "CNY"})
	if code, out := postCallback(a, web.SignCallback(now, other1, oldSecret), other1); code != http.StatusUnprocessableEntity || out["status"] != web.StatusMismatch {
		t.Fatalf("callback id reused for another payment = %d %v, want 422 %s", code, out, web.StatusMismatch)
	}
	if after := footprint(t, ctx, a); after != paid {
		t.Fatalf("the reused callback id wrote something:\nbefore %s\nafter  %s", paid, after)
	}

	// Rotation: both secrets active, either signs (a provider may send a
	// v1 for each); then the old one is retired.
	a.Security().CallbackSecrets = [][]byte{newSecret, oldSecret}
	b2 := callback(t, flow.Payment{OrderID: o2, ProviderTradeNo: "T2", CallbackID: "C2", Amount: amount, Currency: "CNY"})
	if code, out := postCallback(a, web.SignCallback(now, b2, oldSecret), b2); code != http.StatusOK || out["result"] != "paid" {
		t.Fatalf("during the rotation, signed with the old secret = %d %v, want 200 paid", code, out)
	}
	b3 := callback(t, flow.Payment{OrderID: o3, ProviderTradeNo: "T3", CallbackID: "C3", Amount: amount, Currency: "CNY"})
	a.Security().CallbackSecrets = [][]byte{newSecret}
	if code, out := postCallback(a, web.SignCallback(now, b3, oldSecret), b3); code != http.StatusUnauthorized || out["reason"] != web.SigWrong {
		t.Fatalf("after the rotation, signed with the retired secret = %d %v, want 401 wrong", code, out)
	}
	if code, out := postCallback(a, web.SignCallback(now, b3, other, newSecret), b3); code != http.StatusOK || out["result"] != "paid" {
		t.Fatalf("after the rotation, one v1 under the new secret = %d %v, want 200 paid", code, out)
	}
}

// TestBuyerTokens: the buyer is the subject of a verified token. Forged,
// expired, mis-signed or mis-addressed tokens are 401 and write nothing;
// a body naming a buyer is 400; a valid token places the order for its
// subject, whose request another buyer cannot read; during a key rotation
// either key verifies.
func TestBuyerTokens(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	a, srv := secAPI(t, stackMemory, web.SecurityConfig{}, nil)
	before := footprint(t, ctx, a)
	reqID := uuid.NewString()
	for _, tok := range forgedTokens(t) {
		for _, r := range []*http.Request{httptest.NewRequest("POST", "/orders", strings.NewReader(`{}`)), httptest.NewRequest("GET", "/orders/"+reqID, nil)} {
			if tok != "" {
				r.Header.Set("Authorization", tok)
			}
			if code, out := serve(a, r); code != http.StatusUnauthorized {
				t.Errorf("%s %s with Authorization %.60q = %d %v, want 401", r.Method, r.URL.Path, tok, code, out)
			}
		}
	}
	if after := footprint(t, ctx, a); after != before {
		t.Fatalf("refused buyers wrote something:\nbefore %s\nafter  %s", before, after)
	}
	if n := metricValue(t, srv.URL, "seckill_buyer_auth_refused_total"); n != float64(2*len(forgedTokens(t))) {
		t.Errorf("seckill_buyer_auth_refused_total = %v, want %d", n, 2*len(forgedTokens(t)))
	}
	// The request: a buyer id in the body.
	if code, out := doAs(t, 7, "POST", srv.URL+"/orders", `{"user_id":4242}`); code != http.StatusBadRequest {
		t.Fatalf("a body naming a buyer = %d %v, want 400", code, out)
	}
	if code, out := doAs(t, 7, "POST", srv.URL+"/orders", `{"sku_id": 999}`); code != http.StatusNotFound || out["status"] != "unknown_item" {
		t.Fatalf("another item = %d %v, want 404 unknown_item", code, out)
	}
	code, out := doAs(t, 7, "POST", srv.URL+"/orders", `{"sku_id": 1001}`)
	if code != http.StatusAccepted {
		t.Fatalf("POST /orders as 7 = %d %v", code, out)
	}
	req7 := out["request_id"].(string)
	waitStatus(t, srv.URL, req7, "CREATED")
	o, err := a.s.Orders.Get(ctx, a.s.Pool, seckill.Request{RequestID: uuid.MustParse(req7)})
	if err != nil || o.UserID != 7 {
		t.Fatalf("the order of buyer 7's request: user %d, %v", o.UserID, err)
	}
	if code, out := doAs(t, 8, "GET", srv.URL+"/orders/"+req7, nil); code != http.StatusNotFound {
		t.Errorf("buyer 8 reads buyer 7's request = %d %v, want 404", code, out)
	}
	// Rotation: a token signed with the key being retired still verifies.
	oldKey := testSecurity.BuyerKeys[0]
	newKey := []byte("new-buyer-token-key-0123456789abcdef")
	a.Security().BuyerKeys = [][]byte{newKey, oldKey}
	for _, k := range [][]byte{oldKey, newKey} {
		tok, err := web.MintBuyerToken(k, 7, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("GET", "/orders/"+req7, nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		if code, out := serve(a, r); code != http.StatusOK || out["status"] != "CREATED" {
			t.Errorf("during the rotation, a token under key %.8q = %d %v, want 200", k, code, out)
		}
	}
	a.Security().BuyerKeys = [][]byte{newKey}
	tok, _ := web.MintBuyerToken(oldKey, 7, time.Minute)
	r := httptest.NewRequest("GET", "/orders/"+req7, nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	if code, _ := serve(a, r); code != http.StatusUnauthorized {
		t.Errorf("after the rotation, a token under the retired key = %d, want 401", code)
	}
}

// TestIdempotencyKey: POST /orders under an Idempotency-Key answers a
// retry with the first answer (the same request, reservation and order
// ids), also when the client never read the first one (the connection cut
// once the front door held the reservation); another body under the key
// is 422; keys are per buyer. The same on Redis and on the in-process
// stand-in.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	for _, stack := range []string{stackReal, stackMemory} {
		t.Run(stack, func(t *testing.T) { t.Parallel(); testIdempotencyKey(t, stack) })
	}
}

func testIdempotencyKey(t *testing.T, stack string) {
	ctx := pgtest.Context(t, 3*time.Minute)
	a, srv := secAPI(t, stack, web.SecurityConfig{}, nil)
	post := func(buyer int64, key, body string) (*http.Response, []byte) {
		t.Helper()
		req := testRequest(t, ctx, buyer, "POST", srv.URL+"/orders", body)
		if key != "" {
			req.Header.Set(web.IdempotencyHeader, key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return resp, buf.Bytes()
	}
	first, b1 := post(1, "k-1", `{}`)
	if first.StatusCode != http.StatusAccepted || first.Header.Get(web.ReplayedHeader) != "" {
		t.Fatalf("first POST = %d %s", first.StatusCode, b1)
	}
	again, b2 := post(1, "k-1", `{}`)
	if again.StatusCode != http.StatusAccepted || !bytes.Equal(b1, b2) || again.Header.Get(web.ReplayedHeader) != "true" {
		t.Fatalf("retry with the same key = %d %s (replayed %q), want the first answer %s", again.StatusCode, b2, again.Header.Get(web.ReplayedHeader), b1)
	}
	quoted, b3 := post(1, `"k-1"`, `{}`)
	if quoted.StatusCode != http.StatusAccepted || !bytes.Equal(b1, b3) {
		t.Errorf("the key as a structured-field string = %d %s, want the first answer", quoted.StatusCode, b3)
	}
	if resp, b := post(1, "k-1", `{"sku_id": 1001}`); resp.StatusCode != http.StatusUnprocessableEntity || !bytes.Contains(b, []byte(web.StatusMismatch)) {
		t.Errorf("the key with another body = %d %s, want 422 %s", resp.StatusCode, b, web.StatusMismatch)
	}
	if resp, b := post(1, "k-2", `{}`); resp.StatusCode != http.StatusConflict || !bytes.Contains(b, []byte("already_reserved")) {
		t.Errorf("a new key for a buyer who holds a reservation = %d %s, want 409 already_reserved", resp.StatusCode, b)
	}
	if resp, b := post(2, "k-1", `{}`); resp.StatusCode != http.StatusAccepted || bytes.Equal(b, b1) {
		t.Errorf("another buyer's k-1 = %d %s, want 202 of their own", resp.StatusCode, b)
	}
	for _, bad := range []string{strings.Repeat("k", 256), "k\x01", `"`, "k\"1", "k\x7f", "ключ"} {
		r := httptest.NewRequest("POST", "/orders", nil)
		r.Header.Set("Authorization", "Bearer "+testToken(t, 3))
		r.Header.Set(web.IdempotencyHeader, bad)
		if code, out := serve(a, r); code != http.StatusBadRequest {
			t.Errorf("Idempotency-Key %q = %d %v, want 400", bad, code, out)
		}
	}

	// The first response is cut: the client sends its request and goes
	// away once the front door holds its reservation, never reading the
	// answer. Its retry gets the ids of that reservation.
	held := func() map[uuid.UUID]int16 {
		st, err := a.s.front.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Held
	}
	heldBefore := held()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	req := testRequest(t, ctx, 4, "POST", srv.URL+"/orders", `{}`)
	req.Header.Set(web.IdempotencyHeader, "cut-1")
	w := bufio.NewWriter(conn)
	if err := req.Write(w); err != nil || w.Flush() != nil {
		t.Fatalf("send: %v", err)
	}
	var mine uuid.UUID
	for mine == uuid.Nil {
		for id := range held() {
			if _, ok := heldBefore[id]; !ok {
				mine = id
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the front door never held the cut request's reservation")
		}
		time.Sleep(time.Millisecond)
	}
	conn.Close() // the answer is never read
	var out struct {
		RequestID     uuid.UUID `json:"request_id"`
		ReservationID uuid.UUID `json:"reservation_id"`
		OrderID       int64     `json:"order_id"`
		Status        string    `json:"status"`
	}
	for {
		resp, b := post(4, "cut-1", `{}`)
		if resp.StatusCode == http.StatusConflict && bytes.Contains(b, []byte(web.StatusInProgress)) && resp.Header.Get("Retry-After") != "" {
			time.Sleep(20 * time.Millisecond) // the first request is still finishing
			continue
		}
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &out) != nil {
			t.Fatalf("retry after the cut = %d %s, want 202 with the first ids", resp.StatusCode, b)
		}
		break
	}
	if out.ReservationID != mine {
		t.Fatalf("retry after the cut answered reservation %s, the front door holds %s for it", out.ReservationID, mine)
	}
	owners.Store(out.RequestID.String(), int64(4))
	o := waitStatus(t, srv.URL, out.RequestID.String(), "CREATED")
	if got := orderOf(t, srv.URL, out.RequestID); got != out.OrderID {
		t.Errorf("order %d for the request, the answer said %d (%v)", got, out.OrderID, o)
	}
	if n := countRows(t, ctx, a.s.Pool, a.s.Schema, "orders", "user_id = 4"); n != 1 {
		t.Errorf("buyer 4 has %v orders, want 1", n)
	}
	if n := metricValue(t, srv.URL, "seckill_idempotency_total", "outcome", "replayed"); n < 3 {
		t.Errorf("seckill_idempotency_total{outcome=replayed} = %v, want at least 3", n)
	}
}

// TestRateLimits: POST /orders over the per-buyer or the per-address rate
// is 429 with Retry-After, counted, and reserves nothing; the windows
// count exactly, on Redis and in process.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	for _, stack := range []string{stackReal, stackMemory} {
		t.Run(stack, func(t *testing.T) {
			t.Parallel()
			ctx := pgtest.Context(t, 3*time.Minute)
			a, srv := secAPI(t, stack, web.SecurityConfig{BuyerRate: 2, AddrRate: 5}, nil)
			// The windows themselves, with a window no test outlasts.
			store, prefix := a.s.GuardStore()
			for i := 1; i <= 4; i++ {
				waits, err := store.Hit(ctx, []string{guardstore.Key(prefix, "test", "w"), guardstore.Key(prefix, "test", "v")}, []int{3, 1}, time.Hour, nil)
				if err != nil || len(waits) != 2 || (i <= 3) != (waits[0] == 0) || (i > 3 && (waits[0] <= 0 || waits[0] > time.Hour)) ||
					(i <= 1) != (waits[1] == 0) {
					t.Fatalf("hit %d of limits 3 and 1: waits %v, %v", i, waits, err)
				}
			}
			click := func(buyer int64, addr string) (int, http.Header) {
				r := httptest.NewRequest("POST", "/orders", nil)
				r.RemoteAddr = addr + ":5000"
				r.Header.Set("Authorization", "Bearer "+testToken(t, buyer))
				rec := httptest.NewRecorder()
				a.ServeHTTP(rec, r)
				return rec.Code, rec.Header()
			}
			check := func(what string, codes []int, headers []http.Header) int {
				limited, accepted := 0, 0
				for i, c := range codes {
					switch c {
					case http.StatusTooManyRequests:
						limited++
						if ra, err := strconv.Atoi(headers[i].Get("Retry-After")); err != nil || ra < 1 {
							t.Errorf("%s: 429 with Retry-After %q", what, headers[i].Get("Retry-After"))
						}
					case http.StatusAccepted:
						accepted++
					}
				}
				if limited == 0 {
					t.Errorf("%s: %v, want some 429", what, codes)
				}
				return accepted
			}
			// One buyer, many clicks: the first is queued, the next ones
			// are already reserved until the rate is exceeded.
			var codes []int
			var headers []http.Header
			for range 20 {
				c, h := click(1, "198.51.100.1")
				codes, headers = append(codes, c), append(headers, h)
			}
			check("one buyer", codes, headers)
			// Many buyers from one address.
			codes, headers = nil, nil
			for b := int64(10); b < 40; b++ {
				c, h := click(b, "198.51.100.2")
				codes, headers = append(codes, c), append(headers, h)
			}
			accepted := check("one address", codes, headers)
			waitQuiet(t, ctx, a)
			st, err := a.s.front.State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Held) != accepted+1 {
				t.Errorf("the front door holds %d reservations for %d accepted clicks: a refused click kept a unit", len(st.Held), accepted+1)
			}
			// A limited request under an Idempotency-Key gives its claim
			// back: once the window passes, the key runs (it is not left
			// in progress).
			keyed := func(key string) (int, map[string]any, time.Duration) {
				r := httptest.NewRequest("POST", "/orders", nil)
				r.RemoteAddr = "198.51.100.3:5000"
				r.Header.Set("Authorization", "Bearer "+testToken(t, 1))
				if key != "" {
					r.Header.Set(web.IdempotencyHeader, key)
				}
				rec := httptest.NewRecorder()
				a.ServeHTTP(rec, r)
				var out map[string]any
				_ = json.Unmarshal(rec.Body.Bytes(), &out)
				ra, _ := strconv.Atoi(rec.Header().Get("Retry-After"))
				return rec.Code, out, time.Duration(ra) * time.Second
			}
			var key string
			var wait time.Duration
			for i := 0; key == "" && ctx.Err() == nil; i++ {
				for code, _, _ := keyed(""); code != http.StatusTooManyRequests; code, _, _ = keyed("") {
				}
				if code, _, ra := keyed(fmt.Sprint("limited-", i)); code == http.StatusTooManyRequests {
					key, wait = fmt.Sprint("limited-", i), ra // refused while its window lasted
				}
			}
			// A client that honours Retry-After (requests count, served or
			// not: one that keeps hammering stays refused).
			for {
				time.Sleep(wait)
				code, out, ra := keyed(key)
				if code == http.StatusTooManyRequests && ctx.Err() == nil {
					wait = ra
					continue
				}
				if code != http.StatusConflict || out["status"] != "already_reserved" {
					t.Errorf("a key first refused with 429, after Retry-After = %d %v, want 409 already_reserved", code, out)
				}
				break
			}
			if metricValue(t, srv.URL, "seckill_rate_limited_total", "scope", web.ScopeBuyer) == 0 || metricValue(t, srv.URL, "seckill_rate_limited_total", "scope", web.ScopeAddress) == 0 {
				t.Errorf("seckill_rate_limited_total not counted per scope")
			}
		})
	}
}

// TestOperatorRoutes: the operator routes are served on the operators'
// face without credentials, and on the buyers' face only with the
// operator token (401 otherwise, a buyer's token included; 404 when no
// operator token is configured). -serve refuses an operator listener
// that is not on a loopback address.
func TestOperatorRoutes(t *testing.T) {
	t.Parallel()
	a, _ := secAPI(t, stackMemory, web.SecurityConfig{}, nil)
	for _, path := range []string{"/", "/audit", "/stats", "/reconcile", "/metrics"} {
		for _, c := range []struct {
			name, auth string
			want       int
		}{
			{"no credentials", "", http.StatusUnauthorized},
			{"a buyer's token", "Bearer " + testToken(t, 1), http.StatusUnauthorized},
			{"a wrong operator token", "Bearer " + testSecurity.OperatorToken[1:], http.StatusUnauthorized},
			{"the operator token", "Bearer " + testSecurity.OperatorToken, http.StatusOK},
		} {
			r := httptest.NewRequest("GET", path, nil)
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			rec := httptest.NewRecorder()
			a.ServeHTTP(rec, r)
			// With the token, the route answers as on the operators' face
			// (/audit and /reconcile: 500 when a check fails).
			if got := rec.Code; (c.want == http.StatusOK && (got == http.StatusUnauthorized || got == http.StatusNotFound)) ||
				(c.want != http.StatusOK && got != c.want) {
				t.Errorf("buyers' face GET %s with %s = %d, want %d", path, c.name, got, c.want)
			}
		}
		rec := httptest.NewRecorder()
		a.Operator().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code == http.StatusUnauthorized || rec.Code == http.StatusNotFound {
			t.Errorf("operators' face GET %s = %d", path, rec.Code)
		}
	}
	a.Security().OperatorToken = ""
	for _, path := range []string{"/", "/audit", "/metrics"} {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("Authorization", "Bearer "+testSecurity.OperatorToken)
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, r)
		if rec.Code != http.StatusNotFound {
			t.Errorf("without an operator token, buyers' face GET %s = %d, want 404", path, rec.Code)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:0": true, "[::1]:8081": true, "localhost:8081": true, "0.0.0.0:8081": false,
		":8081": false, "192.0.2.1:8081": false, "": false} {
		if web.Loopback(addr) != want {
			t.Errorf("web.Loopback(%q) = %v, want %v", addr, !want, want)
		}
	}
	if err := serveHTTP(context.Background(), nil, config{}, ":0", ":8081", nil); err == nil || !strings.Contains(err.Error(), "web.Loopback") {
		t.Errorf("-serve with the operator routes on every address: %v, want refused", err)
	}
}

// TestInternalErrorHasID: a 500 answer carries an error id and no internal
// text; the log has the id with the error.
func TestInternalErrorHasID(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	logs := &lockedBuffer{}
	a, srv := secAPI(t, stackMemory, web.SecurityConfig{}, slog.New(slog.NewJSONHandler(logs, nil)))
	code, out := doAs(t, 5, "POST", srv.URL+"/orders", map[string]any{})
	if code != http.StatusAccepted {
		t.Fatalf("POST /orders = %d %v", code, out)
	}
	reqID := out["request_id"].(string)
	waitStatus(t, srv.URL, reqID, "CREATED")
	orders := pgx.Identifier{a.s.Schema, "orders"}.Sanitize()
	if _, err := a.s.Pool.Exec(ctx, `ALTER TABLE `+orders+` RENAME TO orders_away`); err != nil {
		t.Fatal(err)
	}
	code, out = doAs(t, 5, "GET", srv.URL+"/orders/"+reqID, nil)
	if _, err := a.s.Pool.Exec(ctx, `ALTER TABLE `+pgx.Identifier{a.s.Schema, "orders_away"}.Sanitize()+` RENAME TO orders`); err != nil {
		t.Fatal(err)
	}
	id, _ := out["error_id"].(string)
	if code != http.StatusInternalServerError || len(id) != 16 || out["error"] != "internal error" {
		t.Fatalf("GET /orders with the orders table gone = %d %v, want 500 with an error id", code, out)
	}
	raw, _ := json.Marshal(out)
	if bytes.Contains(raw, []byte("orders")) || bytes.Contains(raw, []byte("relation")) || bytes.Contains(raw, []byte("SQLSTATE")) {
		t.Errorf("the 500 answer carries internal text: %s", raw)
	}
	var found bool
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(line, `"error_id":"`+id+`"`) && strings.Contains(line, "does not exist") {
			found = true
		}
	}
	if !found {
		t.Errorf("no log record with error_id %s and the error:\n%s", id, logs.String())
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger and a test at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestSecurityConfig: -serve needs its keys from the environment, and a
// key too short, or three callback secrets, are refused with a message
// naming the fix.
func TestSecurityConfig(t *testing.T) {
	t.Setenv(web.EnvBuyerKeys, "")
	t.Setenv(web.EnvCallbackSecrets, "")
	t.Setenv(web.EnvOperatorToken, "")
	if _, err := web.SecurityFromEnv(true); err == nil || !strings.Contains(err.Error(), web.EnvBuyerKeys) || !strings.Contains(err.Error(), web.EnvCallbackSecrets) {
		t.Errorf("-serve without keys: %v, want an error naming %s and %s", err, web.EnvBuyerKeys, web.EnvCallbackSecrets)
	}
	if c, err := web.SecurityFromEnv(false); err != nil || len(c.BuyerKeys) != 1 || len(c.CallbackSecrets) != 1 || c.OperatorToken != "" {
		t.Errorf("a run without keys: %+v, %v, want random keys", c, err)
	}
	long := strings.Repeat("k", 32)
	t.Setenv(web.EnvBuyerKeys, long+", "+strings.Repeat("n", 40))
	t.Setenv(web.EnvCallbackSecrets, long+","+long+"2")
	c, err := web.SecurityFromEnv(true)
	if err != nil || len(c.BuyerKeys) != 2 || len(c.CallbackSecrets) != 2 || c.Tolerance != web.DefaultTolerance || c.IdempotencyTTL != web.DefaultIdempotencyTTL {
		t.Errorf("two keys and two secrets: %+v, %v", c, err)
	}
	for env, v := range map[string]string{web.EnvBuyerKeys: "short", web.EnvCallbackSecrets: long + "," + long + "," + long, web.EnvOperatorToken: "short"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, v)
			if _, err := web.SecurityFromEnv(true); err == nil {
				t.Errorf("%s=%q accepted", env, v)
			}
		})
	}
}

// TestHostileClient: a real client over TCP, against a server configured
// as -serve configures it: headers over 16 KiB are 431, bodies over the
// routes' limits 413, a body cut mid-way and a flood of forged callbacks
// write nothing; the service still answers after all of it.
func TestHostileClient(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	a, _ := secAPI(t, stackMemory, web.SecurityConfig{}, nil)
	hs := httptest.NewUnstartedServer(a)
	hs.Config.MaxHeaderBytes = 16 << 10
	hs.Config.ReadHeaderTimeout = 5 * time.Second
	hs.Start()
	t.Cleanup(hs.Close)
	waitQuiet(t, ctx, a)
	before := footprint(t, ctx, a)
	send := func(method, path string, header http.Header, body []byte) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, hs.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	auth := http.Header{"Authorization": {"Bearer " + testToken(t, 9)}}
	big := bytes.Repeat([]byte("x"), 1<<20)
	if code := send("POST", "/orders", http.Header{"Authorization": {"Bearer " + testToken(t, 9)}, "X-Pad": {strings.Repeat("p", 64<<10)}}, nil); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB of headers = %d, want 431", code)
	}
	if code := send("POST", "/orders", auth, big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("POST /orders with 1 MiB = %d, want 413", code)
	}
	body := bytes.Repeat([]byte("y"), 20<<10)
	sig := http.Header{web.SignatureHeader: {web.SignCallback(time.Now(), body, testSecurity.CallbackSecrets[0])}}
	if code := send("POST", "/payments/callback", sig, body); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a signed 20 KiB callback = %d, want 413", code)
	}
	for i := range 200 { // a flood of forged callbacks
		forged := []byte(fmt.Sprintf(`{"order_id":%d,"provider_trade_no":"f%d","amount":99900,"currency":"CNY"}`, i+1, i))
		if code := send("POST", "/payments/callback", http.Header{web.SignatureHeader: {web.SignCallback(time.Now(), forged, []byte("guessed-secret-0123456789abcdef0123"))}}, forged); code != http.StatusUnauthorized {
			t.Fatalf("forged callback %d = %d, want 401", i, code)
		}
	}
	// A body cut mid-way: declared 4000 bytes, 10 sent, connection closed.
	conn, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 4000\r\n\r\n{\"sku_id\":", testToken(t, 10))
	conn.Close()
	if after := footprint(t, ctx, a); after != before {
		t.Fatalf("the hostile client wrote something:\nbefore %s\nafter  %s", before, after)
	}
	if code := send("POST", "/orders", auth, nil); code != http.StatusAccepted {
		t.Errorf("after the hostile client, a buyer's click = %d, want 202", code)
	}
}
