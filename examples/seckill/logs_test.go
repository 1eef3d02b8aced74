package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/web"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// logAPI is a memory-stack service whose pool has the service's tracer
// (as openPool sets it) and whose log records, every level, go to logs.
func logAPI(t *testing.T, logs *logRecords) (*api, string) {
	t.Helper()
	ctx := pgtest.Context(t, 3*time.Minute)
	cfg := smallConfig(t)
	useStack(t, &cfg, stackMemory, false)
	cfg.Stock, cfg.Buckets, cfg.OrderTTL, cfg.FrontDrift = 5, 1, time.Hour, 0
	sec := testSecurity
	sec.BuyerRate, sec.AddrRate = -1, -1
	cfg.Security = sec
	pool := pgtest.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = poolTracer{} })
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, err := newAPI(ctx, pool, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	srv := serveTest(t, a)
	return a, srv.URL
}

// TestOrderTransactionLog: each order message's transaction leaves one
// record with the ids of the purchase and the figures docs/observability.md lists, consistent
// with the database's row.
func TestOrderTransactionLog(t *testing.T) {
	t.Parallel()
	logs := &logRecords{}
	a, base := logAPI(t, logs)
	code, out := doAs(t, 7, "POST", base+"/orders", map[string]any{})
	if code != http.StatusAccepted {
		t.Fatalf("POST /orders = %d %v", code, out)
	}
	traceID, reqID := out["trace_id"].(string), out["request_id"].(string)
	rec := waitLog(t, logs, "order message processed", traceID, "code", flow.CodeOrderCreated)
	want := map[string]string{
		"request_id": reqID, "reservation_id": fmt.Sprint(out["reservation_id"]), "user_id": "7",
		"activity_id": fmt.Sprint(a.s.Item.ActivityID), "sku_id": fmt.Sprint(a.s.Item.SKUID), "inventory_bucket": "0",
		"consumer_group": flow.ConsumerGroup, "commit_result": "committed", "sqlstate": "", "duplicate": "false",
		"order_id": fmt.Sprint(orderOf(t, base, uuid.MustParse(reqID))),
	}
	for k, v := range want {
		if got := fmt.Sprint(rec[k]); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	for _, k := range []string{"message_id", "transaction_attempt", "affected_rows", "db_duration_ms", "pool_acquire_ms", "span_id"} {
		if _, ok := rec[k]; !ok {
			t.Errorf("the record has no %s: %v", k, rec)
		}
	}
	// A fresh order writes at least the inbox row, the reservation, the
	// order and its ORDER_CREATED event.
	if n, _ := rec["affected_rows"].(json.Number).Int64(); n < 4 {
		t.Errorf("affected_rows = %d, want at least the 4 rows of a fresh order", n)
	}
	if n, _ := rec["transaction_attempt"].(json.Number).Int64(); n < 1 {
		t.Errorf("transaction_attempt = %d, want at least 1", n)
	}
	if d, _ := rec["db_duration_ms"].(json.Number).Float64(); d <= 0 {
		t.Errorf("db_duration_ms = %v, want > 0", d)
	}
}

// TestPaymentSecretsNotLogged: payment callbacks that carry a card-like
// number and are signed with the provider's secret — accepted, badly
// signed, malformed, replayed — leave neither the number, nor the secret,
// nor the signature in any log record, at any level.
func TestPaymentSecretsNotLogged(t *testing.T) {
	t.Parallel()
	const card = "4111111111111111"
	logs := &logRecords{}
	a, base := logAPI(t, logs)
	orderID, amount := createdOrder(t, base, 9)
	secret := testSecurity.CallbackSecrets[0]
	good := callback(t, flow.Payment{OrderID: orderID, ProviderTradeNo: card, CallbackID: "cb-" + card, Amount: amount, Currency: "CNY"})
	malformed := []byte(`{"order_id": ` + fmt.Sprint(orderID) + `, "card_number": "` + card + `", "cvv": "123"}`)
	now := time.Now()
	var sigs []string
	for _, c := range []struct {
		name string
		sig  string
		body []byte
		want int
	}{
		{"accepted", web.SignCallback(now, good, secret), good, http.StatusOK},
		{"replayed", web.SignCallback(now, good, secret), good, http.StatusUnauthorized},
		{"wrong secret", web.SignCallback(now, good, []byte("not-the-secret")), good, http.StatusUnauthorized},
		{"unsigned", "", good, http.StatusUnauthorized},
		{"malformed", web.SignCallback(now.Add(time.Second), malformed, secret), malformed, http.StatusBadRequest},
		{"garbage signature", "t=1,v1=" + card, good, http.StatusUnauthorized},
	} {
		code, out := postCallback(a, c.sig, c.body)
		if code != c.want {
			t.Errorf("%s: POST /payments/callback = %d %v, want %d", c.name, code, out, c.want)
		}
		if c.sig != "" {
			sigs = append(sigs, c.sig)
		}
	}
	waitQuiet(t, pgtest.Context(t, time.Minute), a)
	logs.mu.Lock()
	all := logs.buf.String()
	logs.mu.Unlock()
	if !strings.Contains(all, `"msg":"order message processed"`) {
		t.Fatalf("the capture saw no record of the order transaction: %q", all)
	}
	forbidden := append([]string{card, string(secret), hex.EncodeToString(secret), "cvv"}, sigs...)
	for _, f := range forbidden {
		if f != "" && strings.Contains(all, f) {
			for line := range strings.Lines(all) {
				if strings.Contains(line, f) {
					t.Errorf("a log record holds %q: %s", f, line)
				}
			}
		}
	}
	if bytes.Contains([]byte(all), secret) {
		t.Error("a log record holds the callback secret")
	}
}
