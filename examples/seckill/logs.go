package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/pgtx"
)

// traceHandler adds trace_id and span_id to every record whose context
// carries a span (the OpenTelemetry span context of the hop).
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
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
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

// One record per order transaction (docs/observability.md, Logs): after
// the order consumer's call returns, "order message processed" (or "order
// transaction failed") carries the ids of the message and of the purchase,
// the consumer group, and what the database did: attempts, the last
// SQLSTATE, rows written, time in transactions and waiting for a pool
// connection, and the commit's outcome. The figures are gathered on the
// context by the pgtx observer (attempts, SQLSTATE, duration, outcome) and
// by the pool's tracer (acquire time, rows written), both reading a
// *txRecord the consumer put there. Only ids and figures are logged: never a
// message body, a payment payload or a secret.

// txRecord gathers what the transactions of one order message did; safe
// for concurrent use.
type txRecord struct {
	mu           sync.Mutex
	transactions int           // pgtx calls (the one-batch order, a refusal batch, the step-by-step fallback)
	attempts     int           // their attempts
	sqlstate     string        // the last SQLSTATE an attempt failed with
	rows         int64         // rows inserted, updated or deleted by the statements
	inTx         time.Duration // the calls' durations, backoffs included
	acquire      time.Duration // waiting for pool connections
	commit       string        // the last call's outcome: committed, not_committed, unknown
}

type txRecordKey struct{}

// withTxRecord returns ctx carrying a new record, and the record.
func withTxRecord(ctx context.Context) (context.Context, *txRecord) {
	rec := &txRecord{}
	return context.WithValue(ctx, txRecordKey{}, rec), rec
}

// update applies f to ctx's record, if it carries one.
func updateTxRecord(ctx context.Context, f func(*txRecord)) {
	if rec, ok := ctx.Value(txRecordKey{}).(*txRecord); ok {
		rec.mu.Lock()
		f(rec)
		rec.mu.Unlock()
	}
}

// recordAttempt and recordTx are the pgtx hooks' part of the record.
func recordAttempt(ctx context.Context, e pgtx.Event) {
	updateTxRecord(ctx, func(r *txRecord) {
		r.attempts++
		var pe *pgconn.PgError
		if errors.As(e.Err, &pe) {
			r.sqlstate = pe.Code
		}
	})
}

func recordTx(ctx context.Context, e pgtx.Event) {
	updateTxRecord(ctx, func(r *txRecord) {
		r.transactions++
		r.inTx += e.Elapsed
		r.commit = commitResult(e.Err)
	})
}

// commitResult names a call's outcome as pgtx.Classify tells it.
func commitResult(err error) string {
	switch c := pgtx.Classify(err); {
	case c.Committed:
		return "committed"
	case c.OutcomeUnknown:
		return "unknown"
	}
	return "not_committed"
}

// poolTracer is the pool's pgx tracer: it adds the time spent acquiring a
// connection and the rows each statement wrote to the record of the
// statement's context. Set on the pool's ConnConfig.Tracer (openPool).
type poolTracer struct{}

type acquireStartKey struct{}

// TraceAcquireStart implements pgxpool.AcquireTracer.
func (poolTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return context.WithValue(ctx, acquireStartKey{}, time.Now())
}

// TraceAcquireEnd implements pgxpool.AcquireTracer.
func (poolTracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	if start, ok := ctx.Value(acquireStartKey{}).(time.Time); ok {
		updateTxRecord(ctx, func(r *txRecord) { r.acquire += time.Since(start) })
	}
}

// TraceQueryStart implements pgx.QueryTracer.
func (poolTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (poolTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	addRows(ctx, d.CommandTag)
}

// TraceBatchStart implements pgx.BatchTracer.
func (poolTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (poolTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	addRows(ctx, d.CommandTag)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (poolTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// addRows adds the rows a statement inserted, updated or deleted.
func addRows(ctx context.Context, tag pgconn.CommandTag) {
	if tag.Insert() || tag.Update() || tag.Delete() {
		updateTxRecord(ctx, func(r *txRecord) { r.rows += tag.RowsAffected() })
	}
}

// logOrderTx writes the order transaction's record: the message's ids
// (read from its body; the body itself is never logged), the outcome and
// rec's figures.
func (s *service) logOrderTx(ctx context.Context, m broker.Message, rec *txRecord, out flow.Outcome, err error) {
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
	}
	if !s.log.Enabled(ctx, level) {
		return // the default run logs nothing: no body decoded for it
	}
	var om flow.OrderMessage
	_ = json.Unmarshal(m.Body, &om) // a poison body: the ids stay zero
	rec.mu.Lock()
	attrs := []slog.Attr{
		slog.String("request_id", om.RequestID.String()), slog.String("reservation_id", om.ReservationID.String()),
		slog.String("message_id", m.ID.String()), slog.Int64("order_id", cmp.Or(out.OrderID, om.OrderID)),
		slog.Int64("activity_id", om.ActivityID), slog.Int64("sku_id", om.SKUID), slog.Int64("user_id", om.UserID),
		slog.Int("inventory_bucket", int(om.Bucket)), slog.String("consumer_group", flow.ConsumerGroup),
		slog.Int("transactions", rec.transactions), slog.Int("transaction_attempt", rec.attempts),
		slog.String("sqlstate", rec.sqlstate), slog.Int64("affected_rows", rec.rows),
		slog.Float64("db_duration_ms", ms(rec.inTx)), slog.Float64("pool_acquire_ms", ms(rec.acquire)),
		slog.String("commit_result", rec.commit),
	}
	rec.mu.Unlock()
	switch {
	case errors.Is(err, flow.ErrPoison):
		s.log.LogAttrs(ctx, level, "order message is poison; recorded for review", append(attrs, slog.String("error", err.Error()))...)
		return
	case err != nil:
		s.log.LogAttrs(ctx, level, "order transaction failed; the message will be redelivered",
			append(attrs, slog.String("error", err.Error()))...)
		return
	}
	s.log.LogAttrs(ctx, level, "order message processed",
		append(attrs, slog.String("code", out.Code), slog.Bool("duplicate", out.Duplicate))...)
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
