package otelseckill

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// ScopeName is the instrumentation scope of this package's tracer and
// meters: the name a back end shows as the library that produced a span
// or a metric.
const ScopeName = "github.com/seckillkit/seckill/examples/otelseckill"

// Span names.
const (
	// SpanTxPrefix starts the name of the span of a pgtx.RunInTx or
	// pgtx.RunBatch call: "pgtx <Options.Name>" ("pgtx" when the name is
	// empty). Kind client.
	SpanTxPrefix = "pgtx"
	// SpanAttempt names the child span of one attempt of a call. Kind
	// client.
	SpanAttempt = "pgtx.attempt"
	// SpanOutboxPublish names the span of one claimed outbox batch, from
	// the claim to its marks. Kind producer.
	SpanOutboxPublish = "outbox publish"
)

// Metric names. Those of OpenTelemetry's semantic conventions keep their
// meaning there; the seckill.* ones are this package's.
const (
	// MetricTxDuration is a histogram (s) of pgtx calls, from the call to
	// its return, backoffs included, by seckill.tx.name and
	// seckill.tx.outcome (committed, not_committed, unknown). Its count is
	// the number of transactions per outcome. Per outcome.
	MetricTxDuration = "seckill.tx.duration"
	// MetricTxAttempts is a counter of pgtx attempts by seckill.tx.name,
	// seckill.tx.outcome, seckill.tx.retry (another attempt followed) and
	// db.response.status_code (the SQLSTATE, when the attempt failed with
	// one). Retries are the attempts with seckill.tx.retry true. Per
	// attempt.
	MetricTxAttempts = "seckill.tx.attempts"
	// MetricTxCommitLost is a counter of attempts whose COMMIT was sent
	// and whose answer never came, by seckill.tx.name and the outcome the
	// resolution found (unknown when it could not tell).
	MetricTxCommitLost = "seckill.tx.commit_lost"
	// MetricAllocations is a counter of classified inventory allocations
	// by seckill.inventory.result (allocated, sold_out, already_applied,
	// not_on_sale, unknown_bucket, error) and seckill.inventory.bucket. Per
	// attempt: an allocation may be rolled back with its transaction.
	MetricAllocations = "seckill.inventory.allocations"
	// MetricReleases is a counter of classified inventory releases by
	// seckill.inventory.result (released, not_allocated, already_applied,
	// inconsistent, error). Per attempt.
	MetricReleases = "seckill.inventory.releases"
	// MetricInboxClaims is a counter of inbox claims recorded with
	// [Observers.RecordInboxClaim], by seckill.inbox.group and
	// seckill.inbox.result (fresh, duplicate). Per attempt.
	MetricInboxClaims = "seckill.inbox.claims"
	// MetricSentMessages is OpenTelemetry's messaging.client.sent.messages:
	// outbox events whose publish the relay marked, by
	// messaging.operation.name (publish) and error.type (absent for the
	// events marked SENT, "publish_failed" for those marked RETRY or DEAD).
	MetricSentMessages = "messaging.client.sent.messages"
	// MetricPublishDuration is OpenTelemetry's
	// messaging.client.operation.duration (s): each relay batch from its
	// claim to the end of its marks.
	MetricPublishDuration = "messaging.client.operation.duration"
	// MetricOutboxDead is a counter of outbox events that went DEAD, after
	// a failed last attempt or an expired last lease.
	MetricOutboxDead = "seckill.outbox.dead"
	// MetricOutboxRecovered is a counter of outbox events taken back from
	// an expired lease.
	MetricOutboxRecovered = "seckill.outbox.recovered"
	// MetricOutboxReleased is a counter of outbox events a stopping relay
	// handed back unattempted.
	MetricOutboxReleased = "seckill.outbox.released"
)

// Attribute keys of this package (the others are OpenTelemetry's
// semantic-convention keys: db.system.name, db.response.status_code,
// error.type, messaging.*).
const (
	AttrTxName        = attribute.Key("seckill.tx.name")         // Options.Name
	AttrTxBatch       = attribute.Key("seckill.tx.batch")        // a RunBatch call
	AttrTxIsolation   = attribute.Key("seckill.tx.isolation")    // the isolation level ("" is the server's default)
	AttrTxMaxAttempts = attribute.Key("seckill.tx.max_attempts") // the bound on attempts
	AttrTxAttempt     = attribute.Key("seckill.tx.attempt")      // 1-based attempt number
	AttrTxAttempts    = attribute.Key("seckill.tx.attempts")     // attempts a call made
	AttrTxOutcome     = attribute.Key("seckill.tx.outcome")      // committed, not_committed, unknown
	AttrTxRetry       = attribute.Key("seckill.tx.retry")        // another attempt follows
	AttrTxBackoff     = attribute.Key("seckill.tx.backoff_ms")   // the wait before the next attempt
	AttrTxCommitLost  = attribute.Key("seckill.tx.commit_lost")  // COMMIT sent, answer lost

	AttrInventoryResult = attribute.Key("seckill.inventory.result")     // see MetricAllocations
	AttrInventoryBucket = attribute.Key("seckill.inventory.bucket")     // the bucket number
	AttrActivityID      = attribute.Key("seckill.activity_id")          // span events only
	AttrSKUID           = attribute.Key("seckill.sku_id")               // span events only
	AttrReservationID   = attribute.Key("seckill.reservation_id")       // span events only
	AttrQuantity        = attribute.Key("seckill.inventory.quantity")   // span events only
	AttrInboxGroup      = attribute.Key("seckill.inbox.group")          // the consumer group
	AttrInboxResult     = attribute.Key("seckill.inbox.result")         // fresh, duplicate
	AttrOutboxOwner     = attribute.Key("seckill.outbox.owner")         // the relay's owner
	AttrOutboxPublished = attribute.Key("seckill.outbox.published")     // events marked SENT
	AttrOutboxFailed    = attribute.Key("seckill.outbox.failed")        // events marked RETRY or DEAD
	AttrOutboxDead      = attribute.Key("seckill.outbox.dead")          // of failed, those DEAD
	AttrOutboxReleased  = attribute.Key("seckill.outbox.released")      // events handed back
	AttrOutboxLinked    = attribute.Key("seckill.outbox.linked_traces") // distinct trace contexts linked
)

// Config configures [New]. The zero value uses the global providers and
// the W3C trace-context propagator.
type Config struct {
	// MeterProvider makes the meter. Defaults to otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes the tracer. Defaults to
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator reads the trace context out of outbox event headers (to
	// link a relay batch's span to the traces that enqueued its events)
	// and writes it in with [Observers.Inject]. Defaults to
	// propagation.TraceContext{} (the traceparent and tracestate
	// headers).
	Propagator propagation.TextMapPropagator
	// MessagingSystem, when set, is the messaging.system attribute of the
	// outbox's spans and metrics (e.g. "nats", "kafka"): the broker the
	// relay's Publisher sends to. Defaults to none.
	MessagingSystem string
}

// Observers are the observers of the seckill packages, reporting to
// OpenTelemetry. Set each in its package's configuration. They are safe
// for concurrent use and may be shared by every store, call and relay of a
// process.
type Observers struct {
	// Tx is for pgtx.Options.Observer.
	Tx pgtx.Observer
	// Inventory is for inventory.Config.Observer.
	Inventory inventory.Observer
	// Outbox is for outbox.RelayConfig.Observer.
	Outbox outbox.Observer

	prop        propagation.TextMapPropagator
	inboxClaims metric.Int64Counter
}

// New returns the observers, with their instruments created on cfg's
// meter. It fails only when an instrument cannot be created.
func New(cfg Config) (*Observers, error) {
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	meter := cfg.MeterProvider.Meter(ScopeName)
	tracer := cfg.TracerProvider.Tracer(ScopeName)
	tx, err := newTxObserver(meter, tracer)
	if err != nil {
		return nil, err
	}
	inv, err := newInventoryObserver(meter)
	if err != nil {
		return nil, err
	}
	ob, err := newOutboxObserver(meter, tracer, cfg.Propagator, cfg.MessagingSystem)
	if err != nil {
		return nil, err
	}
	claims, err := meter.Int64Counter(MetricInboxClaims, metric.WithUnit("{claim}"),
		metric.WithDescription("Inbox claims by result (fresh or duplicate), per attempt."))
	if err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	return &Observers{Tx: tx.observer(), Inventory: inv.observer(), Outbox: ob.observer(), prop: cfg.Propagator, inboxClaims: claims}, nil
}

// Inject writes the trace context of ctx into headers with the
// configured propagator (a traceparent header by default) and returns
// headers (a new map when headers is nil). Give the result to
// outbox.Event.Headers: the relay's span of the batch that publishes the
// event is then linked to ctx's trace. With no valid span in ctx it
// writes nothing.
func (o *Observers) Inject(ctx context.Context, headers map[string]string) map[string]string {
	if headers == nil {
		headers = map[string]string{}
	}
	o.prop.Inject(ctx, propagation.MapCarrier(headers))
	return headers
}

// RecordInboxClaim counts one inbox claim of the consumer group group:
// fresh when claim.Fresh (the message is new), duplicate otherwise. The
// inbox package has no observer; call it after inbox.Store.ClaimMessage
// returned without error. Per attempt: a fresh claim whose transaction
// rolls back is counted, and its message is claimed fresh again.
func (o *Observers) RecordInboxClaim(ctx context.Context, group string, fresh bool) {
	result := "duplicate"
	if fresh {
		result = "fresh"
	}
	o.inboxClaims.Add(ctx, 1, metric.WithAttributes(AttrInboxGroup.String(group), AttrInboxResult.String(result)))
}

// sqlState returns the SQLSTATE of the PostgreSQL error in err's chain,
// or "".
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
