package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/pgtx"
)

// scrape reads GET /metrics and parses it with the Prometheus project's
// own text parser (legacy metric names: the strictest form).
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics = %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return parseExposition(t, resp.Body)
}

func parseExposition(t *testing.T, r interface{ Read([]byte) (int, error) }) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("GET /metrics is not valid text exposition format: %v", err)
	}
	return fams
}

// value returns the value of the series of fams[name] whose labels
// include labels (name=value pairs), summed over the series that match; a
// histogram gives its count.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

func countRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema, table, where string, args ...any) float64 {
	t.Helper()
	var n int64
	q := `SELECT count(*) FROM ` + pgx.Identifier{schema, table}.Sanitize() + ` WHERE ` + where
	if err := pool.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return float64(n)
}

// waitQuiet waits until every order message is acknowledged and every
// outbox event is SENT.
func waitQuiet(t *testing.T, ctx context.Context, a *api) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := a.s.Outbox.Stats(ctx, a.s.Pool)
		if err == nil && st.Pending+st.Sending+st.Retry == 0 && a.s.q.Pending(ctx) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not quiet after a minute: outbox %+v (%v), queue %d", st, err, a.s.q.Pending(ctx))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMetricsMatchDatabase: after a small sale over HTTP, the figures at
// GET /metrics equal the database's counts: orders created (counted after
// COMMIT), committed order transactions (pgtx TxEnd: one per message
// processed, which is one inbox row), events published (the relays'
// committed marks: the SENT rows), and the per-attempt counters add up
// (attempts = calls + retries).
func TestMetricsMatchDatabase(t *testing.T) {
	t.Parallel()
	for _, stack := range []string{stackReal, stackMemory} {
		t.Run(stack, func(t *testing.T) { t.Parallel(); testMetricsMatchDatabase(t, stack) })
	}
}

func testMetricsMatchDatabase(t *testing.T, stack string) {
	ctx := pgtest.Context(t, 3*time.Minute)
	cfg := smallConfig(t)
	useStack(t, &cfg, stack, false)
	cfg.Stock, cfg.Buckets, cfg.OrderTTL = 20, 2, time.Hour
	pool := pgtest.Pool(t)
	a, err := newAPI(ctx, pool, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveTest(t, a)
	defer func() { srv.Close(); a.Close() }()

	const buyers = 30 // more than the stock: some are sold out at the front door
	var wg sync.WaitGroup
	codes := make([]int, buyers)
	for i := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				code, _ := do(t, "POST", srv.URL+"/orders", map[string]any{"user_id": i + 1})
				if code != http.StatusServiceUnavailable {
					codes[i] = code
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	accepted := 0
	for _, c := range codes {
		if c == http.StatusAccepted {
			accepted++
		}
	}
	waitQuiet(t, ctx, a)

	fams := scrape(t, srv.URL)
	orders := countRows(t, ctx, pool, cfg.Schema, "orders", "true")
	inboxRows := countRows(t, ctx, pool, cfg.Schema, "consumer_inbox", "consumer_group = $1", flow.ConsumerGroup)
	sent := countRows(t, ctx, pool, cfg.Schema, "event_outbox", "status = 20")
	allocated := countRows(t, ctx, pool, cfg.Schema, "inventory_ledger", "ledger_type = 10")
	if orders == 0 || orders != float64(accepted) || allocated != orders {
		t.Fatalf("%v orders, %v ALLOCATE rows for %d accepted clicks", orders, allocated, accepted)
	}
	checks := []struct {
		what      string
		got, want float64
	}{
		{"seckill_orders_total{result=created}", value(fams, "seckill_orders_total", "result", "created"), orders},
		{"seckill_front_door_total{result=accepted}", value(fams, "seckill_front_door_total", "result", "accepted"), float64(accepted)},
		{"seckill_tx_total{name=place_order,outcome=committed}", value(fams, "seckill_tx_total", "name", orderTxName, "outcome", "committed"), inboxRows},
		{"seckill_outbox_published_total", value(fams, "seckill_outbox_published_total"), sent},
		{"seckill_events_published_total{tag=ORDER_CREATED}", value(fams, "seckill_events_published_total", "tag", flow.TagOrderCreated), orders},
		{"seckill_tx_duration_seconds{name=place_order} count", value(fams, "seckill_tx_duration_seconds", "name", orderTxName),
			value(fams, "seckill_tx_total", "name", orderTxName)},
		{"attempts = calls + retries", value(fams, "seckill_tx_attempts_total", "name", orderTxName),
			value(fams, "seckill_tx_total", "name", orderTxName) + value(fams, "seckill_tx_retries_total", "name", orderTxName)},
		{"seckill_queue_pending", value(fams, "seckill_queue_pending"), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v (the database's count)", c.what, c.got, c.want)
		}
	}
	// Per attempt, inside open transactions: at least every committed
	// allocation (more when a transaction was retried or rolled back).
	if ok := value(fams, "seckill_stock_allocations_total", "result", "ok"); ok < allocated {
		t.Errorf("seckill_stock_allocations_total{result=ok} = %v, below the %v committed allocations", ok, allocated)
	}
}

// TestMetricsRetriesPerAttempt: a transaction that meets a real
// serialization failure and is retried counts two attempts and one retry
// (per attempt) but one committed transaction (per commit), in the
// exposition the service serves.
func TestMetricsRetriesPerAttempt(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	probe := pgx.Identifier{schema, "probe"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()+`; CREATE TABLE `+probe+` (id int PRIMARY KEY, v int NOT NULL); INSERT INTO `+probe+` VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	m := newServiceMetrics()
	stats := &counters{}
	runs := 0
	err := pgtx.RunInTx(ctx, pool, pgtx.Options{Name: orderTxName, IsoLevel: pgx.RepeatableRead, BaseBackoff: time.Millisecond,
		Observer: txObserver{m: m, stats: stats}.observer()}, func(tx pgx.Tx) error {
		runs++
		var v int
		if err := tx.QueryRow(ctx, `SELECT v FROM `+probe+` WHERE id = 1`).Scan(&v); err != nil { // the snapshot
			return err
		}
		if runs == 1 { // another session changes the row after the snapshot
			if _, err := pool.Exec(ctx, `UPDATE `+probe+` SET v = v + 1`); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `UPDATE `+probe+` SET v = v + 1`)
		return err
	})
	if err != nil || runs != 2 {
		t.Fatalf("RunInTx = %v after %d runs, want nil after 2", err, runs)
	}
	var buf bytes.Buffer
	if err := m.write(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	fams := parseExposition(t, &buf)
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"attempts", value(fams, "seckill_tx_attempts_total", "name", orderTxName), 2},
		{"retries (serialization failure)", value(fams, "seckill_tx_retries_total", "name", orderTxName, "cause", "serialization_failure"), 1},
		{"committed", value(fams, "seckill_tx_total", "name", orderTxName, "outcome", "committed"), 1},
		{"not committed", value(fams, "seckill_tx_total", "name", orderTxName, "outcome", "not_committed"), 0},
		{"report's retries", float64(stats.retries.Load()), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

// TestMetricsExposition: label values that need escaping survive the
// round trip through the Prometheus parser, histograms are cumulative and
// a family without series is still valid.
func TestMetricsExposition(t *testing.T) {
	t.Parallel()
	m := &metrics{}
	c := m.counter("x_total", "A help text with a \\ and a\nnewline.", "name")
	h := m.histogram("x_seconds", "Durations.", "name")
	m.gauge("x_empty", "No series.")
	odd := "quote \" backslash \\ newline \n end"
	c.inc(3, odd)
	c.inc(1, "plain")
	for _, v := range []float64{0.0005, 0.003, 0.003, 7} {
		h.observe(v, odd)
	}
	var buf bytes.Buffer
	if err := m.write(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	fams := parseExposition(t, bytes.NewReader(buf.Bytes()))
	if got := value(fams, "x_total", "name", odd); got != 3 {
		t.Fatalf("x_total{name=odd} = %v, want 3\n%s", got, buf.String())
	}
	hist := fams["x_seconds"].GetMetric()[0].GetHistogram()
	if hist.GetSampleCount() != 4 || hist.GetSampleSum() != 0.0065+7 {
		t.Fatalf("histogram count %d sum %v", hist.GetSampleCount(), hist.GetSampleSum())
	}
	for _, b := range hist.GetBucket() {
		want := map[float64]uint64{0.001: 1, 0.0025: 1, 0.005: 3, 5: 3}[b.GetUpperBound()]
		if want != 0 && b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if fams["x_empty"] != nil && len(fams["x_empty"].GetMetric()) != 0 {
		t.Errorf("x_empty has series")
	}
}

// logRecords is a slog handler's output, safe to read while the service
// writes.
type logRecords struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logRecords) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// find returns the records (JSON lines) whose msg is msg and whose
// trace_id is traceID.
func (l *logRecords) find(msg, traceID string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(l.buf.Bytes(), []byte("\n")) {
		var rec map[string]any
		d := json.NewDecoder(bytes.NewReader(line))
		d.UseNumber() // ids as they were written
		if d.Decode(&rec) == nil && rec["msg"] == msg && rec["trace_id"] == traceID {
			out = append(out, rec)
		}
	}
	return out
}

// waitLog waits until a record msg of traceID whose attrs include the
// pairs given was logged.
func waitLog(t *testing.T, l *logRecords, msg, traceID string, attrs ...string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
	records:
		for _, rec := range l.find(msg, traceID) {
			for i := 0; i+1 < len(attrs); i += 2 {
				if fmt.Sprint(rec[attrs[i]]) != attrs[i+1] {
					continue records
				}
			}
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q record with trace_id %s and %v", msg, traceID, attrs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// eventTrace returns the traceparent header of the outbox event tag of
// aggregate id.
func eventTrace(t *testing.T, ctx context.Context, a *api, tag, id string) string {
	t.Helper()
	var tp *string
	q := `SELECT headers->>'traceparent' FROM ` + pgx.Identifier{a.s.Schema, "event_outbox"}.Sanitize() +
		` WHERE tag = $1 AND aggregate_id = $2`
	if err := a.s.Pool.QueryRow(ctx, q, tag, id).Scan(&tp); err != nil || tp == nil {
		t.Fatalf("the %s event of %s: traceparent %v, %v", tag, id, tp, err)
	}
	return *tp
}

// TestTracePropagation: the trace id of a POST's traceparent header
// reaches the order consumer's log record, the ORDER_CREATED event's
// headers (with a span id of the consumer's own), the event consumer's log
// record, and, for a payment, the ORDER_PAID event's headers; a request
// without (or with an invalid) traceparent starts a trace of its own.
func TestTracePropagation(t *testing.T) {
	t.Parallel()
	for _, stack := range []string{stackReal, stackMemory} {
		t.Run(stack, func(t *testing.T) { t.Parallel(); testTracePropagation(t, stack) })
	}
}

func testTracePropagation(t *testing.T, stack string) {
	ctx := pgtest.Context(t, 3*time.Minute)
	cfg := smallConfig(t)
	useStack(t, &cfg, stack, false)
	cfg.Stock, cfg.Buckets, cfg.OrderTTL = 5, 1, time.Hour
	logs := &logRecords{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, err := newAPI(ctx, pgtest.Pool(t), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveTest(t, a)
	defer func() { srv.Close(); a.Close() }()

	const traceID, span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	post := func(traceparent string, body map[string]any, path string) (*http.Response, map[string]any) {
		req := testRequest(t, ctx, 0, "POST", srv.URL+path, body)
		if traceparent != "" {
			req.Header.Set(traceHeader, traceparent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		d := json.NewDecoder(resp.Body)
		d.UseNumber() // order ids exceed a float64's precision
		_ = d.Decode(&out)
		return resp, out
	}
	resp, out := post("00-"+traceID+"-"+span+"-01", map[string]any{"user_id": 1}, "/orders")
	if resp.StatusCode != http.StatusAccepted || out["trace_id"] != traceID {
		t.Fatalf("POST /orders = %d %v, want 202 with trace_id %s", resp.StatusCode, out, traceID)
	}
	if tc, ok := parseTraceparent(resp.Header.Get(traceHeader)); !ok || tc.TraceIDString() != traceID || strings.Contains(resp.Header.Get(traceHeader), span) {
		t.Errorf("response traceparent %q: want the trace, with the server's span", resp.Header.Get(traceHeader))
	}
	orderID := out["order_id"].(json.Number).String()
	waitStatus(t, srv.URL, out["request_id"].(string), "CREATED")

	rec := waitLog(t, logs, "order message processed", traceID, "code", flow.CodeOrderCreated, "order_id", orderID)
	consumerSpan, _ := rec["span_id"].(string)
	tp := eventTrace(t, ctx, a, flow.TagOrderCreated, orderID)
	if tc, ok := parseTraceparent(tp); !ok || tc.TraceIDString() != traceID || !strings.Contains(tp, consumerSpan) {
		t.Fatalf("ORDER_CREATED traceparent %q: want trace %s with the order consumer's span %s", tp, traceID, consumerSpan)
	}
	waitLog(t, logs, "event consumed", traceID, "tag", flow.TagOrderCreated)

	// A payment continues the payer's trace into ORDER_PAID.
	const payTrace = "0af7651916cd43dd8448eb211c80319c"
	o := waitStatus(t, srv.URL, out["request_id"].(string), "CREATED")
	resp, _ = post("00-"+payTrace+"-b7ad6b7169203331-01", map[string]any{"order_id": json.Number(orderID), "provider_trade_no": "T1",
		"callback_id": "C1", "amount": o["amount"], "currency": o["currency"]}, "/payments/callback")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("payment = %d", resp.StatusCode)
	}
	if tc, ok := parseTraceparent(eventTrace(t, ctx, a, flow.TagOrderPaid, orderID)); !ok || tc.TraceIDString() != payTrace {
		t.Fatalf("ORDER_PAID carries trace %v, want %s", tc, payTrace)
	}

	// No traceparent, or a malformed one: the service starts a trace, and
	// that one is followed.
	for i, bad := range []string{"", "00-" + strings.ToUpper(traceID) + "-" + span + "-01"} {
		resp, out := post(bad, map[string]any{"user_id": 10 + i}, "/orders")
		got, _ := out["trace_id"].(string)
		if resp.StatusCode != http.StatusAccepted || len(got) != 32 || got == traceID || strings.EqualFold(got, traceID) {
			t.Fatalf("POST with traceparent %q = %d, trace_id %q: want a new trace", bad, resp.StatusCode, got)
		}
		waitLog(t, logs, "order message processed", got, "code", flow.CodeOrderCreated)
	}
}

func TestParseTraceparent(t *testing.T) {
	t.Parallel()
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"00-" + tid + "-" + sid + "-01", true},
		{"00-" + tid + "-" + sid + "-00", true},
		{"01-" + tid + "-" + sid + "-01-future", true}, // a later version may add fields
		{"00-" + tid + "-" + sid + "-01-extra", false}, // version 00 has four
		{"ff-" + tid + "-" + sid + "-01", false},
		{"00-" + strings.ToUpper(tid) + "-" + sid + "-01", false},
		{"00-00000000000000000000000000000000-" + sid + "-01", false},
		{"00-" + tid + "-0000000000000000-01", false},
		{"00-" + tid[:31] + "-" + sid + "-01", false},
		{"00-" + tid + "-" + sid + "-zz", false},
		{"", false},
	} {
		tc, ok := parseTraceparent(c.in)
		if ok != c.ok {
			t.Errorf("parseTraceparent(%q) ok = %v, want %v", c.in, ok, c.ok)
		}
		if ok && c.in[:2] == "00" && tc.String() != c.in {
			t.Errorf("round trip %q → %q", c.in, tc.String())
		}
	}
}
