package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckillkit/seckill/examples/seckill/web"
)

// testSecurity is the HTTP face's configuration in the tests: fixed keys,
// an operator token, no rate limits (the rate-limit tests set their own).
var testSecurity = web.SecurityConfig{
	BuyerKeys:       [][]byte{[]byte("test-buyer-token-key-0123456789abcdef")},
	CallbackSecrets: [][]byte{[]byte("test-callback-secret-0123456789abcdef")},
	OperatorToken:   "test-operator-token-0123456789abcdef",
	BuyerRate:       -1, AddrRate: -1,
}

// owners remembers which buyer placed which request (request id → buyer),
// so that a test's GET /orders/{request_id} is sent by its owner.
var owners sync.Map

// testRequest builds a request as the tests' clients send it. POST
// /orders: a body map's "user_id" (or buyer, when not 0) is the buyer, who
// sends a bearer token and a body without it; GET /orders/{request_id}:
// the request's owner's token; POST /payments/callback: signed with the
// first test secret, now.
func testRequest(t testing.TB, ctx context.Context, buyer int64, method, target string, body any) *http.Request {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	case map[string]any:
		if u, ok := b["user_id"]; ok {
			if buyer == 0 {
				fmt.Sscan(fmt.Sprint(u), &buyer)
			}
			c := map[string]any{}
			for k, v := range b {
				if k != "user_id" {
					c[k] = v
				}
			}
			b = c
		}
		raw, _ = json.Marshal(b)
	default:
		raw, _ = json.Marshal(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(target)
	switch {
	case u.Path == "/orders" && method == "POST":
		if buyer > 0 {
			req.Header.Set("Authorization", "Bearer "+testToken(t, buyer))
			req = req.WithContext(context.WithValue(ctx, testBuyer{}, buyer))
		}
	case strings.HasPrefix(u.Path, "/orders/") && method == "GET":
		if buyer == 0 {
			buyer = 1
			if v, ok := owners.Load(strings.TrimPrefix(u.Path, "/orders/")); ok {
				buyer = v.(int64)
			}
		}
		req.Header.Set("Authorization", "Bearer "+testToken(t, buyer))
	case u.Path == "/payments/callback":
		req.Header.Set(web.SignatureHeader, web.SignCallback(signTime(), raw, testSecurity.CallbackSecrets[0]))
	}
	return req
}

// testBuyer keys the buyer of a test's request in its context.
type testBuyer struct{}

var (
	signMu   sync.Mutex
	lastSign int64
)

// signTime is the time the tests' provider signs a callback at: now, or a
// second after the previous one, so that the same callback delivered
// twice within a second carries two signatures, as two deliveries of a
// provider a second apart would (a signature is used once).
func signTime() time.Time {
	signMu.Lock()
	defer signMu.Unlock()
	lastSign = max(time.Now().Unix(), lastSign+1)
	return time.Unix(lastSign, 0)
}

// noteOwner records the owner of a request POST /orders queued.
func noteOwner(req *http.Request, code int, out map[string]any) {
	if code != http.StatusAccepted || req.URL.Path != "/orders" {
		return
	}
	if id, ok := out["request_id"].(string); ok {
		buyer, _ := req.Context().Value(testBuyer{}).(int64)
		owners.Store(id, buyer)
	}
}

// testToken is a test buyer's bearer token, signed with the test key.
func testToken(t testing.TB, buyer int64) string {
	t.Helper()
	tok, err := web.MintBuyerToken(testSecurity.BuyerKeys[0], buyer, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// serveTest serves a's two faces on one test server: the operator routes
// from the operators' face (as on its loopback listener), the rest from
// the buyers' face. It stops when the test ends.
func serveTest(t testing.TB, a *api) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("/", a)
	for _, p := range []string{"GET /{$}", "GET /events", "GET /audit", "GET /stats", "GET /reconcile", "GET /metrics"} {
		mux.Handle(p, a.Operator())
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}
