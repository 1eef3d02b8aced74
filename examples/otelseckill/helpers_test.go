package otelseckill_test

import (
	"errors"

	"context"
	"github.com/jackc/pgx/v5/pgconn"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/seckillkit/seckill/examples/otelseckill"
	"github.com/seckillkit/seckill/seckilltest"
)

func TestMain(m *testing.M) { seckilltest.Main(m) }

// bundle holds one test's SDK: in-memory spans and a manual metric reader.
type bundle struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	obs    *otelseckill.Observers
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	b.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
	b.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(b.reader))
	t.Cleanup(func() {
		_ = b.tp.Shutdown(context.Background())
		_ = b.mp.Shutdown(context.Background())
	})
	var err error
	b.obs, err = otelseckill.New(otelseckill.Config{MeterProvider: b.mp, TracerProvider: b.tp, MessagingSystem: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testCtx is a context with a deadline well under the package timeout.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ended returns the ended spans named name.
func (b *bundle) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range b.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// collect reads the metrics once.
func collect(t *testing.T, r *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(testCtx(t), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	return rm
}

// find returns the metric named name, failing the test when it is absent.
func find(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Metrics {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m
			}
		}
	}
	t.Fatalf("metric %s not collected", name)
	return metricdata.Metrics{}
}

// has reports whether set holds every one of want.
func has(set attribute.Set, want ...attribute.KeyValue) bool {
	for _, kv := range want {
		v, ok := set.Value(kv.Key)
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sum adds up the points of an int or float sum, gauge or histogram (its
// count) whose attributes hold every one of want.
func sum(t *testing.T, m metricdata.Metrics, want ...attribute.KeyValue) float64 {
	t.Helper()
	var total float64
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes, want...) {
				total += float64(p.Value)
			}
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes, want...) {
				total += p.Value
			}
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes, want...) {
				total += float64(p.Value)
			}
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes, want...) {
				total += p.Value
			}
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes, want...) {
				total += float64(p.Count)
			}
		}
	default:
		t.Fatalf("metric %s: unexpected data %T", m.Name, m.Data)
	}
	return total
}

// points counts the data points whose attributes hold every one of want.
func points(t *testing.T, m metricdata.Metrics, want ...attribute.KeyValue) int {
	t.Helper()
	n := 0
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes, want...) {
				n++
			}
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes, want...) {
				n++
			}
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes, want...) {
				n++
			}
		}
	default:
		t.Fatalf("metric %s: unexpected data %T", m.Name, m.Data)
	}
	return n
}

// attr returns the value of the span's attribute key.
func attr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// sqlStateOf returns the SQLSTATE of err, or "".
func sqlStateOf(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
