package otelseckill_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckillkit/seckill/examples/otelseckill"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

// TestOutboxRelaySpans: a relay publishes events enqueued under traces of
// their own (traceparent from Observers.Inject), events without headers,
// and events whose publish fails on their only attempt. The batch spans
// are linked to exactly the enqueuing traces, and their counts and the
// messaging metrics match the statuses in the table.
func TestOutboxRelaySpans(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := seckilltest.New(t, outbox.Migrations)
	b := setup(t)
	store, err := outbox.New(outbox.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	tracer := b.tp.Tracer("test")
	enqueuers := map[trace.TraceID]bool{}
	enqueue := func(i int, tag string, traced bool) {
		ectx := ctx
		var span trace.Span
		if traced {
			ectx, span = tracer.Start(ctx, "enqueue")
			defer span.End()
			enqueuers[span.SpanContext().TraceID()] = true
		}
		ev := outbox.Event{Topic: "orders", Tag: tag, AggregateType: "ORDER", AggregateID: fmt.Sprint(i),
			Payload: []byte(`{}`), DedupKey: fmt.Sprintf("%s:%d", tag, i)}
		if traced {
			ev.Headers = b.obs.Inject(ectx, nil)
		}
		if tag == "bad" {
			ev.MaxRetries = 1
		}
		if err := pgtx.RunInTx(ectx, db.Pool, pgtx.Options{}, func(tx pgx.Tx) error {
			_, err := store.Enqueue(ectx, tx, ev)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	const good, plain, bad = 10, 2, 3
	for i := range good {
		enqueue(i, "good", true)
	}
	for i := range plain {
		enqueue(i, "plain", false)
	}
	for i := range bad {
		enqueue(i, "bad", true)
	}

	pub := func(_ context.Context, msgs []outbox.Message) []error {
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			if m.Tag == "bad" {
				errs[i] = errors.New("broker refused")
			}
		}
		return errs
	}
	relay, err := outbox.NewRelay(db.Pool, outbox.RelayConfig{Store: store, Publish: pub, Observer: b.obs.Outbox,
		BatchSize: 4, PollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx) }()
	table := pgx.Identifier{db.Schema, "event_outbox"}.Sanitize()
	var sent, dead int
	for {
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = $1), count(*) FILTER (WHERE status = $2) FROM `+table,
			int16(outbox.StatusSent), int16(outbox.StatusDead)).Scan(&sent, &dead); err != nil {
			t.Fatal(err)
		}
		if sent+dead == good+plain+bad {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the relay did not finish: %d SENT, %d DEAD", sent, dead)
		case <-time.After(10 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if sent != good+plain || dead != bad {
		t.Fatalf("table: %d SENT, %d DEAD; want %d, %d", sent, dead, good+plain, bad)
	}

	batches := b.ended(otelseckill.SpanOutboxPublish)
	if len(batches) == 0 {
		t.Fatal("no batch spans")
	}
	var claimed, published, failed, deadAttr, linkedAttr int64
	linked := map[trace.TraceID]bool{}
	for _, s := range batches {
		if s.SpanKind() != trace.SpanKindProducer {
			t.Errorf("batch span kind %v", s.SpanKind())
		}
		if v, _ := attr(s, "messaging.system"); v.AsString() != "test" {
			t.Errorf("messaging.system %q", v.AsString())
		}
		n, _ := attr(s, "messaging.batch.message_count")
		claimed += n.AsInt64()
		p, _ := attr(s, otelseckill.AttrOutboxPublished)
		f, _ := attr(s, otelseckill.AttrOutboxFailed)
		d, _ := attr(s, otelseckill.AttrOutboxDead)
		l, _ := attr(s, otelseckill.AttrOutboxLinked)
		published, failed, deadAttr, linkedAttr = published+p.AsInt64(), failed+f.AsInt64(), deadAttr+d.AsInt64(), linkedAttr+l.AsInt64()
		for _, link := range s.Links() {
			if linked[link.SpanContext.TraceID()] {
				t.Errorf("trace %v linked twice", link.SpanContext.TraceID())
			}
			linked[link.SpanContext.TraceID()] = true
		}
	}
	if claimed != good+plain+bad || published != int64(sent) || failed != int64(dead) || deadAttr != int64(dead) {
		t.Errorf("batch spans: %d claimed, %d published, %d failed, %d dead; the table has %d SENT and %d DEAD of %d",
			claimed, published, failed, deadAttr, sent, dead, good+plain+bad)
	}
	if linkedAttr != int64(len(enqueuers)) || len(linked) != len(enqueuers) {
		t.Errorf("%d traces linked (attribute says %d), want the %d enqueuing traces", len(linked), linkedAttr, len(enqueuers))
	}
	for id := range enqueuers {
		if !linked[id] {
			t.Errorf("enqueuing trace %v not linked", id)
		}
	}

	rm := collect(t, b.reader)
	msgs := find(t, rm, otelseckill.MetricSentMessages)
	failedKV := attribute.String("error.type", "publish_failed")
	if all, f := sum(t, msgs), sum(t, msgs, failedKV); all-f != float64(sent) || f != float64(dead) {
		t.Errorf("%s: %v without error, %v failed; the table has %d SENT, %d DEAD", otelseckill.MetricSentMessages, all-f, f, sent, dead)
	}
	if got := sum(t, find(t, rm, otelseckill.MetricOutboxDead)); got != float64(dead) {
		t.Errorf("%s %v, want %d", otelseckill.MetricOutboxDead, got, dead)
	}
	if got := sum(t, find(t, rm, otelseckill.MetricPublishDuration)); got != float64(len(batches)) {
		t.Errorf("%s count %v, want %d batches", otelseckill.MetricPublishDuration, got, len(batches))
	}
}

// TestOutboxRecoverMetrics: events claimed by a relay that never marks
// them (a crashed one) are recovered once their lease expires; the
// recovered and dead counters match the table: the event on its last
// attempt goes DEAD, the others are published.
func TestOutboxRecoverMetrics(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := seckilltest.New(t, outbox.Migrations)
	b := setup(t)
	store, err := outbox.New(outbox.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	for i, maxRetries := range []int{0, 0, 1} {
		if err := pgtx.RunInTx(ctx, db.Pool, pgtx.Options{}, func(tx pgx.Tx) error {
			_, err := store.Enqueue(ctx, tx, outbox.Event{Topic: "orders", AggregateType: "ORDER", AggregateID: fmt.Sprint(i),
				Payload: []byte(`{}`), DedupKey: fmt.Sprint("k", i), MaxRetries: maxRetries})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	claim, err := store.ClaimOutboxBatch(ctx, db.Pool, "crashed-relay", 10)
	if err != nil || len(claim.Messages) != 3 {
		t.Fatalf("claim: %d messages, %v", len(claim.Messages), err)
	}
	pub := func(context.Context, []outbox.Message) []error { return nil }
	relay, err := outbox.NewRelay(db.Pool, outbox.RelayConfig{Store: store, Publish: pub, Observer: b.obs.Outbox,
		Lease: 200 * time.Millisecond, PollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond, DisableListen: true})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx) }()
	table := pgx.Identifier{db.Schema, "event_outbox"}.Sanitize()
	var sent, dead int
	for sent+dead < 3 {
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = $1), count(*) FILTER (WHERE status = $2) FROM `+table,
			int16(outbox.StatusSent), int16(outbox.StatusDead)).Scan(&sent, &dead); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the relay did not recover the events: %d SENT, %d DEAD", sent, dead)
		case <-time.After(10 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if sent != 2 || dead != 1 {
		t.Fatalf("table: %d SENT, %d DEAD; want 2, 1", sent, dead)
	}
	rm := collect(t, b.reader)
	if got := sum(t, find(t, rm, otelseckill.MetricOutboxRecovered)); got != 3 {
		t.Errorf("%s %v, want 3 (the crashed relay's claim)", otelseckill.MetricOutboxRecovered, got)
	}
	if got := sum(t, find(t, rm, otelseckill.MetricOutboxDead)); got != float64(dead) {
		t.Errorf("%s %v; the table has %d DEAD", otelseckill.MetricOutboxDead, got, dead)
	}
	if got := sum(t, find(t, rm, otelseckill.MetricSentMessages)); got != float64(sent) {
		t.Errorf("%s %v; the table has %d SENT", otelseckill.MetricSentMessages, got, sent)
	}
}
