package broker_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckillkit/seckill/examples/seckill/broker"
)

var _ propagation.TextMapCarrier = broker.HeaderCarrier{}

// TestHeaderCarrier: the W3C propagator writes traceparent into NATS
// headers under its lower-case name (NATS keys are case-sensitive) and
// reads the same span context back.
func TestHeaderCarrier(t *testing.T) {
	t.Parallel()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	prop := propagation.TraceContext{}
	hdr := nats.Header{}
	prop.Inject(trace.ContextWithSpanContext(context.Background(), sc), broker.HeaderCarrier(hdr))
	if got := hdr["traceparent"]; len(got) != 1 || got[0] != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("header after Inject = %v", hdr)
	}
	back := trace.SpanContextFromContext(prop.Extract(context.Background(), broker.HeaderCarrier(hdr)))
	if !back.Equal(sc.WithRemote(true)) {
		t.Fatalf("Extract = %v, want %v", back, sc)
	}
	if keys := broker.HeaderCarrier(hdr).Keys(); len(keys) != 1 || keys[0] != "traceparent" {
		t.Fatalf("Keys = %v", keys)
	}
}
