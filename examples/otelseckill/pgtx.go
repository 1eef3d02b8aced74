package otelseckill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckillkit/seckill/pgtx"
)

// txObserver is the hooks of a pgtx.Observer (see observer): a span per
// call, a child span per attempt, the call's duration per outcome and the
// attempts.
type txObserver struct {
	tracer     trace.Tracer
	duration   metric.Float64Histogram
	attempts   metric.Int64Counter
	commitLost metric.Int64Counter
}

// observer is the pgtx.Observer of o's hooks.
func (o *txObserver) observer() pgtx.Observer {
	return pgtx.Observer{TxStart: o.TxStart, AttemptStart: o.AttemptStart, AttemptEnd: o.AttemptEnd, TxEnd: o.TxEnd}
}

func newTxObserver(meter metric.Meter, tracer trace.Tracer) (*txObserver, error) {
	o := &txObserver{tracer: tracer}
	var err error
	if o.duration, err = meter.Float64Histogram(MetricTxDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of pgtx transaction calls, backoffs included, by outcome.")); err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	if o.attempts, err = meter.Int64Counter(MetricTxAttempts, metric.WithUnit("{attempt}"),
		metric.WithDescription("pgtx transaction attempts, by outcome, retry and SQLSTATE.")); err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	if o.commitLost, err = meter.Int64Counter(MetricTxCommitLost, metric.WithUnit("{attempt}"),
		metric.WithDescription("pgtx attempts whose COMMIT answer was lost, by the outcome the resolution found.")); err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	return o, nil
}

func spanName(name string) string {
	if name == "" {
		return SpanTxPrefix
	}
	return SpanTxPrefix + " " + name
}

// TxStart starts the call's span, a child of ctx's span.
func (o *txObserver) TxStart(ctx context.Context, e pgtx.Event) context.Context {
	ctx, _ = o.tracer.Start(ctx, spanName(e.Name), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			semconv.DBSystemNamePostgreSQL,
			AttrTxName.String(e.Name),
			AttrTxBatch.Bool(e.Batch),
			AttrTxIsolation.String(string(e.IsoLevel)),
			AttrTxMaxAttempts.Int(e.MaxAttempts),
		))
	return ctx
}

// AttemptStart starts the attempt's span, a child of the call's.
func (o *txObserver) AttemptStart(ctx context.Context, e pgtx.Event) context.Context {
	ctx, _ = o.tracer.Start(ctx, SpanAttempt, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.DBSystemNamePostgreSQL, AttrTxName.String(e.Name), AttrTxAttempt.Int(e.Attempt)))
	return ctx
}

// AttemptEnd ends the attempt's span with its outcome and counts it.
func (o *txObserver) AttemptEnd(ctx context.Context, e pgtx.Event) {
	attrs := []attribute.KeyValue{AttrTxName.String(e.Name), AttrTxOutcome.String(outcome(e.Err)), AttrTxRetry.Bool(e.Retry)}
	state := sqlState(e.Err)
	if state != "" {
		attrs = append(attrs, semconv.DBResponseStatusCode(state))
	}
	o.attempts.Add(ctx, 1, metric.WithAttributes(attrs...))
	if e.CommitLost {
		o.commitLost.Add(ctx, 1, metric.WithAttributes(AttrTxName.String(e.Name), AttrTxOutcome.String(outcome(e.Err))))
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrs...)
	span.SetAttributes(AttrTxCommitLost.Bool(e.CommitLost))
	if e.Retry {
		span.SetAttributes(AttrTxBackoff.Float64(float64(e.Backoff) / float64(time.Millisecond)))
	}
	if e.Err != nil {
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(e.Err, state)))
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End()
}

// TxEnd ends the call's span with its outcome and records its duration.
func (o *txObserver) TxEnd(ctx context.Context, e pgtx.Event) {
	outcomeAttr := AttrTxOutcome.String(outcome(e.Err))
	o.duration.Record(ctx, e.Elapsed.Seconds(), metric.WithAttributes(AttrTxName.String(e.Name), outcomeAttr))
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(outcomeAttr, AttrTxAttempts.Int(e.Attempt))
	if e.Err != nil {
		state := sqlState(e.Err)
		if state != "" {
			span.SetAttributes(semconv.DBResponseStatusCode(state))
		}
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(e.Err, state)))
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End()
}

// outcome is the seckill.tx.outcome of an attempt's or a call's error:
// committed, not_committed or unknown.
func outcome(err error) string {
	switch c := pgtx.Classify(err); {
	case c.Committed:
		return "committed"
	case c.OutcomeUnknown:
		return "unknown"
	}
	return "not_committed"
}

// errorType is the error.type of err: its SQLSTATE when it has one,
// commit_outcome_unknown, deadline_exceeded or canceled, else _OTHER.
func errorType(err error, state string) string {
	switch {
	case state != "":
		return state
	case errors.Is(err, pgtx.ErrCommitOutcomeUnknown):
		return "commit_outcome_unknown"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return semconv.ErrorTypeOther.Value.AsString()
}
