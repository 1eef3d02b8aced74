package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

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
// include labels (name=value pairs; value "": the label is absent), summed
// over the series that match; a histogram gives its count.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			got := "" // an absent label is an empty one
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] {
					got = lp.GetValue()
				}
			}
			match = match && got == labels[i+1]
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

// scrapeReported waits until the relays have reported every SENT event
// of schema at srvURL's /metrics (an outbox.Observer's BatchEnd runs after
// the COMMIT that marks the batch SENT, so the rows can be SENT a moment
// before the metric counts them) and returns that scrape.
func scrapeReported(t *testing.T, ctx context.Context, srvURL string, pool *pgxpool.Pool, schema string) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		fams := scrape(t, srvURL)
		sent := countRows(t, ctx, pool, schema, "event_outbox", "status = 20")
		got := value(fams, "messaging_client_sent_messages_total", "error_type", "")
		if got == sent {
			return fams
		}
		if time.Now().After(deadline) {
			t.Fatalf("messaging_client_sent_messages_total{error_type=} = %v after a minute, want the %v SENT events", got, sent)
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

	for a.Monitor().Audit().Status == "PENDING" { // the conservation figure comes from the page's audit
		if ctx.Err() != nil {
			t.Fatal("the operator page's monitor never audited")
		}
		time.Sleep(20 * time.Millisecond)
	}
	fams := scrapeReported(t, ctx, srv.URL, pool, cfg.Schema)
	orders := countRows(t, ctx, pool, cfg.Schema, "orders", "true")
	inboxRows := countRows(t, ctx, pool, cfg.Schema, "consumer_inbox", "consumer_group = $1", flow.ConsumerGroup)
	sent := countRows(t, ctx, pool, cfg.Schema, "event_outbox", "status = 20")
	allocated := countRows(t, ctx, pool, cfg.Schema, "inventory_ledger", "ledger_type = 10")
	if orders == 0 || orders != float64(accepted) || allocated != orders {
		t.Fatalf("%v orders, %v ALLOCATE rows for %d accepted clicks", orders, allocated, accepted)
	}
	const name, outcome = "seckill_tx_name", "seckill_tx_outcome"
	checks := []struct {
		what      string
		got, want float64
	}{
		{"seckill_orders_total{result=created}", value(fams, "seckill_orders_total", "result", "created"), orders},
		{"seckill_front_door_total{result=accepted}", value(fams, "seckill_front_door_total", "result", "accepted"), float64(accepted)},
		{"seckill_tx_duration_seconds{place_order,committed} count",
			value(fams, "seckill_tx_duration_seconds", name, orderTxName, outcome, "committed"), inboxRows},
		{"messaging_client_sent_messages_total{error_type=}", value(fams, "messaging_client_sent_messages_total", "error_type", ""), sent},
		{"seckill_events_published_total{tag=ORDER_CREATED}", value(fams, "seckill_events_published_total", "tag", flow.TagOrderCreated), orders},
		{"attempts = calls + retries", value(fams, "seckill_tx_attempts_total", name, orderTxName),
			value(fams, "seckill_tx_duration_seconds", name, orderTxName) + value(fams, "seckill_tx_attempts_total", name, orderTxName, "seckill_tx_retry", "true")},
		{"seckill_inbox_claims_total{fresh}", value(fams, "seckill_inbox_claims_total", "seckill_inbox_group", flow.ConsumerGroup, "seckill_inbox_result", "fresh"), inboxRows},
		{"seckill_queue_pending", value(fams, "seckill_queue_pending"), 0},
		{"seckill_outbox_events{pending}", value(fams, "seckill_outbox_events", "seckill_outbox_status", "pending"), 0},
		{"seckill_outbox_oldest_waiting_age_seconds", value(fams, "seckill_outbox_oldest_waiting_age_seconds"), 0},
		{"db_client_connection_max", value(fams, "db_client_connection_max"), float64(pool.Config().MaxConns)},
		{"seckill_audit_failed_checks (conservation)", value(fams, "seckill_audit_failed_checks"), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v (the database's count)", c.what, c.got, c.want)
		}
	}
	// Per attempt, inside open transactions: at least every committed
	// allocation (more when a transaction was retried or rolled back).
	if ok := value(fams, "seckill_inventory_allocations_total", "seckill_inventory_result", "allocated"); ok < allocated {
		t.Errorf("seckill_inventory_allocations_total{allocated} = %v, below the %v committed allocations", ok, allocated)
	}
	checkDocTable(t, ctx, pool, cfg.Schema, fams)
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
	tel, err := newTelemetry("")
	if err != nil {
		t.Fatal(err)
	}
	defer tel.close()
	stats := &counters{}
	runs := 0
	err = pgtx.RunInTx(ctx, pool, pgtx.Options{Name: orderTxName, IsoLevel: pgx.RepeatableRead, BaseBackoff: time.Millisecond,
		Observer: tel.txObserver(stats)}, func(tx pgx.Tx) error {
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
	rec := httptest.NewRecorder()
	tel.metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	fams := parseExposition(t, rec.Body)
	const name = "seckill_tx_name"
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"attempts", value(fams, "seckill_tx_attempts_total", name, orderTxName), 2},
		{"retries (serialization failure, 40001)", value(fams, "seckill_tx_attempts_total", name, orderTxName, "seckill_tx_retry", "true",
			"db_response_status_code", "40001"), 1},
		{"committed", value(fams, "seckill_tx_duration_seconds", name, orderTxName, "seckill_tx_outcome", "committed"), 1},
		{"not committed", value(fams, "seckill_tx_duration_seconds", name, orderTxName, "seckill_tx_outcome", "not_committed"), 0},
		{"report's retries", float64(stats.retries.Load()), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
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
	if sc := spanContextOf(resp.Header.Get(traceHeader)); sc.TraceID().String() != traceID || strings.Contains(resp.Header.Get(traceHeader), span) {
		t.Errorf("response traceparent %q: want the trace, with the server's span", resp.Header.Get(traceHeader))
	}
	orderID := out["order_id"].(json.Number).String()
	waitStatus(t, srv.URL, out["request_id"].(string), "CREATED")

	rec := waitLog(t, logs, "order message processed", traceID, "code", flow.CodeOrderCreated, "order_id", orderID)
	consumerSpan, _ := rec["span_id"].(string)
	tp := eventTrace(t, ctx, a, flow.TagOrderCreated, orderID)
	if sc := spanContextOf(tp); sc.TraceID().String() != traceID || sc.SpanID().String() != consumerSpan {
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
	if sc := spanContextOf(eventTrace(t, ctx, a, flow.TagOrderPaid, orderID)); sc.TraceID().String() != payTrace {
		t.Fatalf("ORDER_PAID carries trace %v, want %s", sc.TraceID(), payTrace)
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

// traceHeader is the W3C trace-context header.
const traceHeader = "traceparent"

// spanContextOf reads a traceparent with OpenTelemetry's propagator (an
// invalid span context when it is malformed).
func spanContextOf(traceparent string) trace.SpanContext {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{traceHeader: traceparent})
	return trace.SpanContextFromContext(ctx)
}

// appearOnFirstEvent are the metrics of docs/observability.md's table
// that have no series until their first event (a counter is created by
// its first increment; a standby's lags need a standby), with what makes
// them appear.
var appearOnFirstEvent = map[string]string{
	"seckill.tx.commit_lost":                 "a COMMIT whose answer was lost",
	"seckill.inventory.releases":             "the first stock release (a cancelled order)",
	"seckill.outbox.dead":                    "the first outbox event marked DEAD",
	"seckill.outbox.recovered":               "the first outbox lease recovered",
	"seckill.outbox.released":                "the first claimed event a stopping relay hands back",
	"seckill.postgres.table.last_autovacuum": "the first autovacuum of a table of the schema",
	"seckill.postgres.replication.lag":       "a standby",
	"seckill.postgres.replication.lag_bytes": "a standby",
	"seckill.postgres.replication.standbys":  "a standby",
}

// docTableMetrics reads the metric names of the table in
// docs/observability.md, "Signals and their metrics": the backticked names
// of its Metric column outside parentheses (which hold attributes), less
// the names of spans and span events.
func docTableMetrics(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "## Signals and their metrics")
	if !ok {
		t.Fatal(`docs/observability.md has no "Signals and their metrics" section`)
	}
	paren := regexp.MustCompile(`\([^()]*\)`)
	span := regexp.MustCompile("span `[^`]*`|`[^`]*` event")
	name := regexp.MustCompile("`([a-z_]+(?:\\.[a-z_]+)+)`")
	var names []string
	for line := range strings.Lines(table) {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 4 || strings.HasPrefix(cells[1], "---") || strings.TrimSpace(cells[2]) == "Metric (attributes)" {
			continue
		}
		metricCell := span.ReplaceAllString(paren.ReplaceAllString(cells[2], ""), "")
		for _, m := range name.FindAllStringSubmatch(metricCell, -1) {
			names = append(names, m[1])
		}
	}
	if len(names) < 20 {
		t.Fatalf("read %d metric names from docs/observability.md's table, want the whole table: %v", len(names), names)
	}
	return names
}

// checkDocTable: every metric of docs/observability.md's table is at GET
// /metrics, under its Prometheus name (dots to underscores, the unit,
// _total for a counter), unless it is one that appears on its first event
// and the database says that event has not happened.
func checkDocTable(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string, fams map[string]*dto.MetricFamily) {
	t.Helper()
	var standbys, autovacuumed int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_stat_replication),
		(SELECT count(*) FROM pg_stat_user_tables WHERE schemaname = $1 AND last_autovacuum IS NOT NULL)`, schema).Scan(&standbys, &autovacuumed); err != nil {
		t.Fatal(err)
	}
	for _, n := range docTableMetrics(t) {
		base := strings.ReplaceAll(n, ".", "_")
		found := false
		for _, suffix := range []string{"", "_total", "_seconds", "_seconds_total", "_bytes", "_bytes_total"} {
			found = found || fams[base+suffix] != nil
		}
		why, late := appearOnFirstEvent[n]
		switch {
		case found:
		case late && strings.HasPrefix(n, "seckill.postgres.replication.") && standbys > 0:
			t.Errorf("%s (docs/observability.md) is not at /metrics although pg_stat_replication has %d standbys", n, standbys)
		case late && n == "seckill.postgres.table.last_autovacuum" && autovacuumed > 0:
			t.Errorf("%s (docs/observability.md) is not at /metrics although %d tables were autovacuumed", n, autovacuumed)
		case late:
			t.Logf("%s not at /metrics yet: it appears with %s", n, why)
		default:
			t.Errorf("%s (docs/observability.md) is not at /metrics as %s[_total|_seconds|_bytes]", n, base)
		}
	}
}
