package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckillkit/seckill/examples/otelseckill"
	"github.com/seckillkit/seckill/pgtx"
)

// The service reports through OpenTelemetry, as a team that runs it
// already would:
//
//   - the kit's hooks (pgtx.Observer, inventory.Observer, outbox.Observer)
//     are otelseckill's observers, and otelseckill.RegisterPostgresMetrics
//     reads the pool's and PostgreSQL's statistics at each scrape;
//   - the service's own figures (clicks, orders, payments after COMMIT, what
//     the HTTP face refused, what holds vacuum back) are OpenTelemetry
//     instruments on the same MeterProvider;
//   - GET /metrics is OpenTelemetry's Prometheus exporter, a reader of that
//     MeterProvider registered on a prometheus.Registry of the service's own
//     and served by client_golang's promhttp. The exporter rather than
//     client_golang's own collectors: otelseckill's instruments are
//     OpenTelemetry's, the exporter needs no bridge, and the same
//     instruments reach an OTLP back end by adding a reader;
//   - traces: the W3C trace-context propagator (propagation.TraceContext)
//     reads and writes traceparent in HTTP headers
//     (propagation.HeaderCarrier), NATS headers (broker.HeaderCarrier) and
//     outbox event headers (propagation.MapCarrier, through
//     otelseckill.Observers.Inject); each hop starts a span of its own on an
//     SDK TracerProvider. It exports nowhere here: add a span exporter
//     (OTLP, stdout) to see the spans; the ids already travel and reach the
//     logs (trace_id, span_id).
//
// An OpenTelemetry name becomes a Prometheus name with underscores, the
// unit (seconds, bytes) and _total for a counter:
// seckill.tx.duration (s) is seckill_tx_duration_seconds.

// scopeName is the instrumentation scope of the service's own instruments
// and spans.
const scopeName = "github.com/seckillkit/seckill/examples/seckill"

// durationBuckets are the upper bounds (s) of every histogram in seconds.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// telemetry is one service's OpenTelemetry: its providers, the kit's
// observers and GET /metrics.
type telemetry struct {
	meters  *sdkmetric.MeterProvider
	tracers *sdktrace.TracerProvider
	meter   metric.Meter
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	obs     *otelseckill.Observers
	metrics http.Handler // GET /metrics
	regs    []metric.Registration
}

// newTelemetry builds the providers on a registry of their own (several
// services in one test process never share one).
func newTelemetry(messagingSystem string) (*telemetry, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, err
	}
	res := resource.NewSchemaless(attribute.String("service.name", "seckill"))
	seconds := sdkmetric.NewView(sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: durationBuckets}})
	t := &telemetry{
		meters:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res), sdkmetric.WithView(seconds)),
		tracers: sdktrace.NewTracerProvider(sdktrace.WithResource(res)),
		prop:    propagation.TraceContext{},
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}),
	}
	t.meter, t.tracer = t.meters.Meter(scopeName), t.tracers.Tracer(scopeName)
	t.obs, err = otelseckill.New(otelseckill.Config{MeterProvider: t.meters, TracerProvider: t.tracers, Propagator: t.prop,
		MessagingSystem: messagingSystem})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// close unregisters the callbacks and shuts the providers down.
func (t *telemetry) close() {
	for _, r := range t.regs {
		_ = r.Unregister()
	}
	_ = t.meters.Shutdown(context.Background())
	_ = t.tracers.Shutdown(context.Background())
}

// txObserver is otelseckill's pgtx observer plus the report's own counts
// (the order transaction's retries and commits whose outcome was unknown)
// and the figures of the order consumer's log record (txRecord).
func (t *telemetry) txObserver(stats *counters) pgtx.Observer {
	o := t.obs.Tx
	end, txEnd := o.AttemptEnd, o.TxEnd
	o.TxEnd = func(ctx context.Context, e pgtx.Event) {
		txEnd(ctx, e)
		recordTx(ctx, e) // the order consumer's log record
	}
	o.AttemptEnd = func(ctx context.Context, e pgtx.Event) {
		end(ctx, e)
		recordAttempt(ctx, e)
		if pe := (*pgconn.PgError)(nil); errors.As(e.Err, &pe) && pe.Code == pgerrcode.DeadlockDetected {
			stats.deadlocks.Add(1)
		}
		if e.Name != orderTxName {
			return
		}
		if e.Retry {
			stats.retries.Add(1)
		}
		if e.CommitLost {
			stats.unknownCmts.Add(1)
		}
	}
	return o
}

// counter is an OpenTelemetry counter with the keys of its attributes: a
// call passes the values in the same order.
type counter struct {
	c    metric.Int64Counter
	keys []string
}

// counter makes a counter of the service's own (its name without _total;
// the exporter adds it).
func (t *telemetry) counter(name, desc string, keys ...string) *counter {
	c, err := t.meter.Int64Counter(name, metric.WithDescription(desc))
	if err != nil {
		panic(fmt.Sprintf("counter %s: %v", name, err)) // a malformed name: a programming error
	}
	return &counter{c: c, keys: keys}
}

// Inc adds n to the series of values.
func (c *counter) Inc(n int64, values ...string) {
	if len(values) != len(c.keys) {
		panic(fmt.Sprintf("counter: %d attribute values for %d keys", len(values), len(c.keys)))
	}
	attrs := make([]attribute.KeyValue, len(values))
	for i, v := range values {
		attrs[i] = attribute.String(c.keys[i], v)
	}
	c.c.Add(context.Background(), n, metric.WithAttributes(attrs...))
}

// observe registers f to report the observable instruments obs at every
// collection (every scrape of GET /metrics).
func (t *telemetry) observe(f metric.Callback, obs ...metric.Observable) error {
	r, err := t.meter.RegisterCallback(f, obs...)
	if err != nil {
		return err
	}
	t.regs = append(t.regs, r)
	return nil
}

// extract returns ctx with the trace context carried by c (none: ctx as
// it is).
func (t *telemetry) extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	return t.prop.Extract(ctx, c)
}

// start starts the span of one hop: a child of ctx's span, the root of a
// new trace when ctx carries none.
func (t *telemetry) start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, name, trace.WithSpanKind(kind))
}

// eventHeaders are the outbox event headers for what ctx causes: its trace
// context (flow.Config.EventHeaders); nil when ctx carries none.
func (t *telemetry) eventHeaders(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	return t.obs.Inject(ctx, nil)
}

// traced serves h in a server span that continues the request's trace
// (its traceparent header) or starts one, and answers with the server's
// traceparent.
func (t *telemetry) traced(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.start(ctx, "HTTP "+r.Method, trace.SpanKindServer)
		defer span.End()
		t.prop.Inject(ctx, propagation.HeaderCarrier(w.Header()))
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// traceID is ctx's trace id as the logs and the API show it ("" for none).
func traceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}
