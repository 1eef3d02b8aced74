package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// GET /metrics serves the service's figures in the Prometheus text
// exposition format (version 0.0.4), fed by the kit's observers
// (pgtx.Observer, inventory.Observer, outbox.Observer) and by the
// service's own outcomes after their transactions committed.
//
// The writer is hand-written (a hundred lines) rather than
// prometheus/client_golang: the point of the example is that the kit's
// hooks are all an exporter needs, and a reader sees every metric's
// meaning — per attempt or per commit — next to the hook that feeds it.
// A service that already runs client_golang (or OpenTelemetry) implements
// the same three observers on its own registry; nothing else changes. The
// tests read the output back with the Prometheus project's own parser.
//
// What each family counts:
//
//   - seckill_tx_attempts_total, seckill_tx_retries_total,
//     seckill_tx_commit_lost_total: per attempt (pgtx AttemptEnd), by
//     transaction name;
//   - seckill_tx_total, seckill_tx_duration_seconds: per call, once its
//     outcome is final (pgtx TxEnd): committed transactions are counted
//     here;
//   - seckill_stock_allocations_total, seckill_stock_releases_total: per
//     attempt, inside the still open transaction (inventory AllocateEnd,
//     ReleaseEnd): contention and sold-out rates, not stock sold;
//   - seckill_outbox_*: per committed claim, mark or recovery (outbox
//     Observer);
//   - seckill_orders_total, seckill_front_door_total, seckill_payments_total,
//     …: the service's outcomes, counted after their transaction committed
//     (the same counters as GET /stats).

// durationBuckets are the histograms' upper bounds, in seconds.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// metrics is a small registry: families in registration order, each a
// set of series by label values.
type metrics struct {
	families []*family
	// collect runs before every scrape, to copy figures kept elsewhere.
	collect []func(ctx context.Context)
}

type family struct {
	name, help, typ string
	labels          []string
	mu              sync.Mutex
	series          map[string]*series // by label values joined with \xff
}

type series struct {
	values  []string
	value   float64  // counter, gauge
	buckets []uint64 // histogram: counts per upper bound (not cumulative)
	sum     float64
	count   uint64
}

func (m *metrics) add(name, help, typ string, labels ...string) *family {
	f := &family{name: name, help: help, typ: typ, labels: labels, series: map[string]*series{}}
	m.families = append(m.families, f)
	return f
}

func (m *metrics) counter(name, help string, labels ...string) *family {
	return m.add(name, help, "counter", labels...)
}

func (m *metrics) gauge(name, help string, labels ...string) *family {
	return m.add(name, help, "gauge", labels...)
}

func (m *metrics) histogram(name, help string, labels ...string) *family {
	return m.add(name, help, "histogram", labels...)
}

// get returns the series of values; the caller holds f.mu.
func (f *family) get(values []string) *series {
	if len(values) != len(f.labels) {
		panic(fmt.Sprintf("metrics: %s takes %d label values, got %d", f.name, len(f.labels), len(values)))
	}
	key := strings.Join(values, "\xff")
	s := f.series[key]
	if s == nil {
		s = &series{values: slices.Clone(values)}
		if f.typ == "histogram" {
			s.buckets = make([]uint64, len(durationBuckets))
		}
		f.series[key] = s
	}
	return s
}

// inc adds n to a counter.
func (f *family) inc(n float64, values ...string) {
	f.mu.Lock()
	f.get(values).value += n
	f.mu.Unlock()
}

// set sets a gauge, or a counter copied from a monotonic figure kept
// elsewhere.
func (f *family) set(v float64, values ...string) {
	f.mu.Lock()
	f.get(values).value = v
	f.mu.Unlock()
}

// observe adds one observation to a histogram.
func (f *family) observe(v float64, values ...string) {
	f.mu.Lock()
	s := f.get(values)
	if i, ok := slices.BinarySearch(durationBuckets, v); ok || i < len(durationBuckets) {
		s.buckets[i]++
	}
	s.sum += v
	s.count++
	f.mu.Unlock()
}

// write renders every family in the text exposition format.
func (m *metrics) write(ctx context.Context, out io.Writer) error {
	for _, c := range m.collect {
		c(ctx)
	}
	w := bufio.NewWriter(out)
	for _, f := range m.families {
		f.mu.Lock()
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.typ)
		keys := make([]string, 0, len(f.series))
		for k := range f.series {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			s := f.series[k]
			if f.typ != "histogram" {
				fmt.Fprintf(w, "%s%s %s\n", f.name, labelSet(f.labels, s.values, ""), formatValue(s.value))
				continue
			}
			var cum uint64
			for i, le := range durationBuckets {
				cum += s.buckets[i]
				fmt.Fprintf(w, "%s_bucket%s %d\n", f.name, labelSet(f.labels, s.values, formatValue(le)), cum)
			}
			fmt.Fprintf(w, "%s_bucket%s %d\n", f.name, labelSet(f.labels, s.values, "+Inf"), s.count)
			fmt.Fprintf(w, "%s_sum%s %s\n", f.name, labelSet(f.labels, s.values, ""), formatValue(s.sum))
			fmt.Fprintf(w, "%s_count%s %d\n", f.name, labelSet(f.labels, s.values, ""), s.count)
		}
		f.mu.Unlock()
	}
	return w.Flush()
}

// labelSet renders {a="x",b="y"} (with le for a histogram bucket); ""
// without labels.
func labelSet(names, values []string, le string) string {
	if len(names) == 0 && le == "" {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n + `="` + escapeLabel(values[i]) + `"`)
	}
	if le != "" {
		if len(names) > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`le="` + le + `"`)
	}
	b.WriteByte('}')
	return b.String()
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// ServeHTTP serves GET /metrics: every family, collected now.
func (m *metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = m.write(r.Context(), w)
}

// serviceMetrics are the families the service feeds.
type serviceMetrics struct {
	*metrics
	// pgtx, per attempt and per call.
	txAttempts, txRetries, txCommitLost, txTotal, txDuration *family
	// inventory, per attempt.
	allocations, releases *family
	// outbox relay, per committed statement.
	claimed, published, failed, dead, released, recovered, batchDuration *family
}

func newServiceMetrics() *serviceMetrics {
	m := &metrics{}
	return &serviceMetrics{
		metrics: m,
		txAttempts: m.counter("seckill_tx_attempts_total",
			"Transaction attempts, by transaction name (pgtx AttemptEnd: per attempt).", "name"),
		txRetries: m.counter("seckill_tx_retries_total",
			"Attempts rolled back and run again, by name and cause (per attempt).", "name", "cause"),
		txCommitLost: m.counter("seckill_tx_commit_lost_total",
			"Attempts whose COMMIT answer never came, by name and what the resolution found (per attempt).", "name", "outcome"),
		txTotal: m.counter("seckill_tx_total",
			"Transactions by name and final outcome (pgtx TxEnd: once per call, after COMMIT).", "name", "outcome"),
		txDuration: m.histogram("seckill_tx_duration_seconds",
			"Duration of a transaction call, retries and backoffs included (per call).", "name"),
		allocations: m.counter("seckill_stock_allocations_total",
			"Bucket allocations by result, per attempt inside the open transaction (inventory AllocateEnd): a retried transaction counts again.", "result"),
		releases: m.counter("seckill_stock_releases_total",
			"Stock releases by result, per attempt inside the open transaction (inventory ReleaseEnd).", "result"),
		claimed: m.counter("seckill_outbox_claimed_total",
			"Outbox events claimed by the relays (per committed claim)."),
		published: m.counter("seckill_outbox_published_total",
			"Outbox events published and marked SENT (per committed mark; delivery is at least once)."),
		failed: m.counter("seckill_outbox_failed_total",
			"Failed publishes marked RETRY or DEAD (per committed mark)."),
		dead: m.counter("seckill_outbox_dead_total",
			"Outbox events that went DEAD, after their last attempt or at lease recovery (per commit)."),
		released: m.counter("seckill_outbox_released_total",
			"Claimed events given back unattempted by a stopping relay (per commit)."),
		recovered: m.counter("seckill_outbox_recovered_total",
			"Outbox events taken back from an expired lease (per committed recovery)."),
		batchDuration: m.histogram("seckill_outbox_batch_duration_seconds",
			"Claim to end of marks, per relay batch."),
	}
}

// retryCause names a retried attempt's error.
func retryCause(err error) string {
	switch c := pgtx.Classify(err); {
	case c.Deadlock:
		return "deadlock"
	case c.SerializationFailure:
		return "serialization_failure"
	}
	return "other"
}

// txOutcome names what became of an attempt's or a call's transaction:
// committed, not_committed or unknown.
func txOutcome(err error) string {
	switch c := pgtx.Classify(err); {
	case c.Committed:
		return "committed"
	case c.OutcomeUnknown:
		return "unknown"
	}
	return "not_committed"
}

// stockResult names an allocation's or a release's classified result.
func stockResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, inventory.ErrSoldOut):
		return "sold_out"
	case errors.Is(err, inventory.ErrAlreadyApplied):
		return "already_applied"
	case errors.Is(err, inventory.ErrNotOnSale):
		return "not_on_sale"
	case errors.Is(err, inventory.ErrNotAllocated):
		return "not_allocated"
	}
	return "other"
}

// txObserver feeds the pgtx families (and the report's retry and unknown
// commit counts, for the order transaction).
type txObserver struct {
	m     *serviceMetrics
	stats *counters
}

// observer is the pgtx.Observer of o's hooks.
func (o txObserver) observer() pgtx.Observer {
	return pgtx.Observer{AttemptEnd: o.AttemptEnd, TxEnd: o.TxEnd}
}

// AttemptEnd counts per attempt.
func (o txObserver) AttemptEnd(_ context.Context, e pgtx.Event) {
	o.m.txAttempts.inc(1, e.Name)
	if e.Retry {
		o.m.txRetries.inc(1, e.Name, retryCause(e.Err))
		if e.Name == orderTxName {
			o.stats.retries.Add(1)
		}
	}
	if e.CommitLost {
		o.m.txCommitLost.inc(1, e.Name, txOutcome(e.Err))
		if e.Name == orderTxName {
			o.stats.unknownCmts.Add(1)
		}
	}
}

// TxEnd counts per call, once the outcome is final.
func (o txObserver) TxEnd(_ context.Context, e pgtx.Event) {
	o.m.txTotal.inc(1, e.Name, txOutcome(e.Err))
	o.m.txDuration.observe(e.Elapsed.Seconds(), e.Name)
}

// stockObserver feeds the inventory families (per attempt).
type stockObserver struct{ m *serviceMetrics }

// observer is the inventory.Observer of o's hooks.
func (o stockObserver) observer() inventory.Observer {
	return inventory.Observer{AllocateEnd: o.AllocateEnd, ReleaseEnd: o.ReleaseEnd}
}

// AllocateEnd counts an allocation's result.
func (o stockObserver) AllocateEnd(_ context.Context, e inventory.StockEvent) {
	o.m.allocations.inc(1, stockResult(e.Err))
}

// ReleaseEnd counts a release's result.
func (o stockObserver) ReleaseEnd(_ context.Context, e inventory.StockEvent) {
	o.m.releases.inc(1, stockResult(e.Err))
}

// relayObserver feeds the outbox families (per committed statement).
type relayObserver struct {
	m *serviceMetrics
}

// observer is the outbox.Observer of o's hooks.
func (o relayObserver) observer() outbox.Observer {
	return outbox.Observer{BatchEnd: o.BatchEnd, RecoverEnd: o.RecoverEnd}
}

// BatchEnd counts a batch's marks.
func (o relayObserver) BatchEnd(_ context.Context, e outbox.RelayEvent) {
	o.m.claimed.inc(float64(e.Claimed))
	o.m.published.inc(float64(e.Published))
	o.m.failed.inc(float64(e.Failed))
	o.m.dead.inc(float64(e.Dead))
	o.m.released.inc(float64(e.Released))
	o.m.batchDuration.observe(e.Elapsed.Seconds())
}

// RecoverEnd counts a lease recovery.
func (o relayObserver) RecoverEnd(_ context.Context, e outbox.RelayEvent) {
	o.m.recovered.inc(float64(e.Recovered))
	o.m.dead.inc(float64(e.Dead))
}

// serviceFigures copies the service's own counters (its outcomes after
// commit, as in GET /stats) and a few gauges into m before each scrape.
func (s *service) serviceFigures(m *serviceMetrics) {
	front := m.counter("seckill_front_door_total", "Clicks by the front door's answer.", "result")
	orders := m.counter("seckill_orders_total",
		"Order messages by what their committed transaction came to (counted after COMMIT; duplicates apart).", "result")
	dups := m.counter("seckill_order_duplicates_total", "Order message deliveries answered from the inbox (processed before).")
	payments := m.counter("seckill_payments_total", "Payment callbacks by result (after COMMIT).", "result")
	cancelled := m.counter("seckill_orders_cancelled_total", "Orders cancelled by the timeout canceller (after COMMIT).")
	events := m.counter("seckill_events_published_total",
		"Distinct outbox events the relays' publisher delivered (a JetStream PubAck, or applied in process), by tag.", "tag")
	pending := m.gauge("seckill_queue_pending", "Order messages published and not yet acknowledged.")
	m.collect = append(m.collect, func(ctx context.Context) {
		c := &s.stats
		for result, v := range map[string]int64{
			"accepted": c.frontAccepted.Load(), "sold_out": c.frontSoldOut.Load(), "already_reserved": c.frontAlready.Load(),
			"busy": c.busy.Load(), "unavailable": c.frontDown.Load(),
		} {
			front.set(float64(v), result)
		}
		for result, v := range map[string]int64{
			"created": c.created.Load(), "already_created": c.already.Load(), "user_already_ordered": c.userAlready.Load(),
			"sold_out": c.soldOut.Load(), "poison": c.poison.Load(),
		} {
			orders.set(float64(v), result)
		}
		dups.set(float64(c.duplicates.Load()))
		for result, v := range map[string]int64{
			"paid": c.paid.Load(), "duplicate": c.dupCallbacks.Load(), "refund": c.paidAfterCancel.Load(),
		} {
			payments.set(float64(v), result)
		}
		cancelled.set(float64(c.cancelled.Load()))
		c.published.Range(func(k, v any) bool {
			events.set(float64(v.(interface{ Load() int64 }).Load()), k.(string))
			return true
		})
		pending.set(float64(s.q.Pending(ctx)))
	})
}
