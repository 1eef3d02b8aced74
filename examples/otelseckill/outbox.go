package otelseckill

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckillkit/seckill/outbox"
)

// outboxObserver is the hooks of an outbox.Observer (see observer): a
// producer span per batch,
// linked to the traces that enqueued its events, and the messaging
// metrics.
type outboxObserver struct {
	tracer    trace.Tracer
	prop      propagation.TextMapPropagator
	base      []attribute.KeyValue // messaging.operation.*, messaging.system
	sent      metric.Int64Counter
	duration  metric.Float64Histogram
	dead      metric.Int64Counter
	recovered metric.Int64Counter
	released  metric.Int64Counter
}

// observer is the outbox.Observer of o's hooks.
func (o *outboxObserver) observer() outbox.Observer {
	return outbox.Observer{BatchStart: o.BatchStart, BatchEnd: o.BatchEnd, RecoverEnd: o.RecoverEnd}
}

func newOutboxObserver(meter metric.Meter, tracer trace.Tracer, prop propagation.TextMapPropagator, system string) (*outboxObserver, error) {
	o := &outboxObserver{tracer: tracer, prop: prop,
		base: []attribute.KeyValue{semconv.MessagingOperationName("publish"), semconv.MessagingOperationTypeSend}}
	if system != "" {
		o.base = append(o.base, semconv.MessagingSystemKey.String(system))
	}
	var err error
	if o.sent, err = meter.Int64Counter(MetricSentMessages, metric.WithUnit("{message}"),
		metric.WithDescription("Outbox events whose publish the relay marked: SENT, or failed (error.type).")); err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	if o.duration, err = meter.Float64Histogram(MetricPublishDuration, metric.WithUnit("s"),
		metric.WithDescription("Outbox relay batches, from the claim to the end of the marks.")); err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	if o.dead, err = meter.Int64Counter(MetricOutboxDead, metric.WithUnit("{event}"),
		metric.WithDescription("Outbox events that went DEAD.")); err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	if o.recovered, err = meter.Int64Counter(MetricOutboxRecovered, metric.WithUnit("{event}"),
		metric.WithDescription("Outbox events taken back from an expired lease.")); err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	if o.released, err = meter.Int64Counter(MetricOutboxReleased, metric.WithUnit("{event}"),
		metric.WithDescription("Outbox events a stopping relay handed back unattempted.")); err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	return o, nil
}

// BatchStart starts the batch's span, a child of ctx's span (the relay's
// Run context), linked to the span context carried in each event's
// headers.
func (o *outboxObserver) BatchStart(ctx context.Context, e outbox.RelayEvent) context.Context {
	var links []trace.Link
	seen := map[trace.SpanID]bool{}
	for _, m := range e.Messages {
		if len(m.Headers) == 0 {
			continue
		}
		sc := trace.SpanContextFromContext(o.prop.Extract(context.Background(), propagation.MapCarrier(m.Headers)))
		if !sc.IsValid() || seen[sc.SpanID()] {
			continue
		}
		seen[sc.SpanID()] = true
		links = append(links, trace.Link{SpanContext: sc})
	}
	attrs := append([]attribute.KeyValue{
		semconv.MessagingBatchMessageCount(len(e.Messages)),
		AttrOutboxOwner.String(e.Owner),
		AttrOutboxLinked.Int(len(links)),
	}, o.base...)
	ctx, _ = o.tracer.Start(ctx, SpanOutboxPublish, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
	return ctx
}

// BatchEnd ends the batch's span with its counts and records the
// metrics.
func (o *outboxObserver) BatchEnd(ctx context.Context, e outbox.RelayEvent) {
	if e.Published > 0 {
		o.sent.Add(ctx, int64(e.Published), metric.WithAttributes(o.base...))
	}
	if e.Failed > 0 {
		o.sent.Add(ctx, int64(e.Failed), metric.WithAttributes(append([]attribute.KeyValue{semconv.ErrorTypeKey.String("publish_failed")}, o.base...)...))
	}
	if e.Dead > 0 {
		o.dead.Add(ctx, int64(e.Dead))
	}
	if e.Released > 0 {
		o.released.Add(ctx, int64(e.Released))
	}
	o.duration.Record(ctx, e.Elapsed.Seconds(), metric.WithAttributes(o.base...))
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(AttrOutboxPublished.Int(e.Published), AttrOutboxFailed.Int(e.Failed),
		AttrOutboxDead.Int(e.Dead), AttrOutboxReleased.Int(e.Released))
	switch {
	case e.Err != nil:
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Err.Error())
	case e.Failed > 0:
		span.SetStatus(codes.Error, fmt.Sprintf("%d of %d events failed to publish", e.Failed, e.Claimed))
	}
	span.End()
}

// RecoverEnd counts the recovered events and those that went DEAD.
func (o *outboxObserver) RecoverEnd(ctx context.Context, e outbox.RelayEvent) {
	o.recovered.Add(ctx, int64(e.Recovered))
	if e.Dead > 0 {
		o.dead.Add(ctx, int64(e.Dead))
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("outbox.recover", trace.WithAttributes(AttrOutboxOwner.String(e.Owner),
			attribute.Int("seckill.outbox.recovered", e.Recovered), AttrOutboxDead.Int(e.Dead)))
	}
}
