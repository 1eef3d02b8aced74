package broker

import (
	"slices"

	"github.com/nats-io/nats.go"
)

// HeaderCarrier adapts a message's NATS headers ([Message.Header]) to
// OpenTelemetry's propagation.TextMapCarrier, so a propagator reads and
// writes the trace context (traceparent, tracestate) in them:
//
//	prop.Inject(ctx, broker.HeaderCarrier(m.Header))
//	ctx = prop.Extract(ctx, broker.HeaderCarrier(m.Header))
//
// NATS header keys are case-sensitive and kept as written (net/http's
// carrier would canonicalize them to Traceparent): the propagator's
// lower-case names travel as they are. Inject into a non-nil header.
type HeaderCarrier nats.Header

// Get returns the first value of key, "" when there is none.
func (c HeaderCarrier) Get(key string) string { return nats.Header(c).Get(key) }

// Set replaces the values of key with value.
func (c HeaderCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys lists the header's keys, sorted.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
