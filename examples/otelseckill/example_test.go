package otelseckill_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/seckillkit/seckill/examples/otelseckill"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

// A transaction reported as spans and metrics. The SDK here keeps them in
// memory; a service gives New its exporting providers instead (or sets
// the global ones and passes an empty Config).
func Example() {
	ctx := context.Background()
	db := seckilltest.Example() // a fresh schema on a throwaway server

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := otelseckill.New(otelseckill.Config{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		panic(err)
	}

	table := pgx.Identifier{db.Schema, "orders"}.Sanitize()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE `+table+` (id int PRIMARY KEY)`); err != nil {
		panic(err)
	}
	err = pgtx.RunInTx(ctx, db.Pool, pgtx.Options{Name: "checkout", Observer: obs.Tx}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+table+` (id) VALUES (1)`)
		return err
	})
	if err != nil {
		panic(err)
	}

	for _, s := range spans.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == otelseckill.AttrTxOutcome {
				fmt.Printf("span %q: %s\n", s.Name(), kv.Value.AsString())
			}
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == otelseckill.MetricTxDuration {
			for _, p := range h.DataPoints {
				outcome, _ := p.Attributes.Value(otelseckill.AttrTxOutcome)
				fmt.Printf("%s{outcome=%s}: %d transaction(s)\n", m.Name, outcome.AsString(), p.Count)
			}
		}
	}
	// Output:
	// span "pgtx.attempt": committed
	// span "pgtx checkout": committed
	// seckill.tx.duration{outcome=committed}: 1 transaction(s)
}

// The outbox's backlog, read by the collector at each collection.
func ExampleRegisterPostgresMetrics() {
	ctx := context.Background()
	db := seckilltest.Example(outbox.Migrations)
	store, err := outbox.New(outbox.Config{Schema: db.Schema})
	if err != nil {
		panic(err)
	}
	for _, key := range []string{"order-1", "order-2"} {
		err := pgtx.RunInTx(ctx, db.Pool, pgtx.Options{}, func(tx pgx.Tx) error {
			_, err := store.Enqueue(ctx, tx, outbox.Event{Topic: "orders", AggregateType: "ORDER", AggregateID: key,
				Payload: []byte(`{}`), DedupKey: key})
			return err
		})
		if err != nil {
			panic(err)
		}
	}

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	reg, err := otelseckill.RegisterPostgresMetrics(mp.Meter("example"), db.Pool, db.Schema)
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == otelseckill.MetricOutboxEvents {
			for _, p := range g.DataPoints {
				if status, _ := p.Attributes.Value(otelseckill.AttrOutboxStatus); status.AsString() == "pending" {
					fmt.Printf("%s{status=pending}: %d\n", m.Name, p.Value)
				}
			}
		}
	}
	// Output:
	// seckill.outbox.events{status=pending}: 2
}
