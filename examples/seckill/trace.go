package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"
)

// The example carries one trace id from the buyer's HTTP request to the
// log lines of every consumer the order causes, the way OpenTelemetry's
// propagators would, without depending on OpenTelemetry: the W3C Trace
// Context header (traceparent: version-traceid-parentid-flags) is read
// from the request, or a trace is started; each hop (the HTTP handler, the
// order consumer, an event consumer) continues it with a span id of its
// own; the trace travels in the order message's header (NATS header
// "traceparent", or the in-memory queue's message), then in the outbox
// event's headers (flow.Config.EventHeaders), which the relay publishes as
// NATS headers; and a slog handler adds trace_id and span_id to every log
// record whose context carries a trace. A service that uses
// OpenTelemetry replaces these few functions with its propagator and
// otelslog; the places that carry the header stay the same.

// traceHeader is the W3C Trace Context header, in HTTP requests, NATS
// message headers and outbox event headers.
const traceHeader = "traceparent"

// traceContext is one hop of a trace.
type traceContext struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
}

// parseTraceparent reads a traceparent value. It accepts version 00 and,
// as the specification asks, any later version's first four fields; it
// refuses version ff, upper-case or malformed hex and all-zero ids.
func parseTraceparent(s string) (traceContext, bool) {
	var tc traceContext
	parts := strings.Split(s, "-")
	if len(parts) < 4 || len(parts[0]) != 2 || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return tc, false
	}
	if parts[0] == "ff" || (parts[0] == "00" && len(parts) != 4) {
		return tc, false
	}
	for _, p := range parts[:4] {
		if strings.ToLower(p) != p {
			return tc, false
		}
	}
	var version, flags [1]byte
	if _, err := hex.Decode(version[:], []byte(parts[0])); err != nil {
		return tc, false
	}
	if _, err := hex.Decode(tc.TraceID[:], []byte(parts[1])); err != nil {
		return tc, false
	}
	if _, err := hex.Decode(tc.SpanID[:], []byte(parts[2])); err != nil {
		return tc, false
	}
	if _, err := hex.Decode(flags[:], []byte(parts[3])); err != nil {
		return tc, false
	}
	if tc.TraceID == ([16]byte{}) || tc.SpanID == ([8]byte{}) {
		return tc, false
	}
	tc.Flags = flags[0]
	return tc, true
}

// String renders the traceparent value of this hop (version 00).
func (tc traceContext) String() string {
	return "00-" + hex.EncodeToString(tc.TraceID[:]) + "-" + hex.EncodeToString(tc.SpanID[:]) + "-" + hex.EncodeToString([]byte{tc.Flags})
}

// TraceIDString is the trace id as it appears in the logs.
func (tc traceContext) TraceIDString() string { return hex.EncodeToString(tc.TraceID[:]) }

type traceKey struct{}

// continueTrace returns ctx carrying the next hop of the trace named by
// traceparent: the same trace id with a new span id, or a new trace when
// traceparent is empty or invalid.
func continueTrace(ctx context.Context, traceparent string) context.Context {
	tc, ok := parseTraceparent(traceparent)
	if !ok {
		_, _ = rand.Read(tc.TraceID[:])
		tc.Flags = 0x01 // sampled: this service decided to record it
	}
	_, _ = rand.Read(tc.SpanID[:])
	return context.WithValue(ctx, traceKey{}, tc)
}

// traceFrom returns the trace ctx carries.
func traceFrom(ctx context.Context) (traceContext, bool) {
	tc, ok := ctx.Value(traceKey{}).(traceContext)
	return tc, ok
}

// traceparentOf is the traceparent to send onwards from ctx ("" when ctx
// carries no trace).
func traceparentOf(ctx context.Context) string {
	if tc, ok := traceFrom(ctx); ok {
		return tc.String()
	}
	return ""
}

// eventHeaders are the outbox event headers for what ctx causes: the
// trace, when there is one (flow.Config.EventHeaders).
func eventHeaders(ctx context.Context) map[string]string {
	if tp := traceparentOf(ctx); tp != "" {
		return map[string]string{traceHeader: tp}
	}
	return nil
}

// traced continues the request's trace (or starts one) for h.
func traced(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := continueTrace(r.Context(), r.Header.Get(traceHeader))
		w.Header().Set(traceHeader, traceparentOf(ctx))
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// traceHandler adds trace_id and span_id to every record whose context
// carries a trace.
type traceHandler struct{ slog.Handler }

// withTraceIDs wraps log's handler with traceHandler.
func withTraceIDs(log *slog.Logger) *slog.Logger {
	if _, ok := log.Handler().(traceHandler); ok {
		return log
	}
	return slog.New(traceHandler{log.Handler()})
}

// Handle implements slog.Handler.
func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if tc, ok := traceFrom(ctx); ok {
		r.AddAttrs(slog.String("trace_id", tc.TraceIDString()), slog.String("span_id", hex.EncodeToString(tc.SpanID[:])))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

// WithGroup implements slog.Handler.
func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
