package otelseckill_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seckillkit/seckill/examples/otelseckill"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

// TestPostgresMetrics runs the collector against a throwaway primary of
// its own (WAL archiving that is made to fail, a synchronous standby,
// autovacuum every second) and matches every metric with what the pool
// and the statistics views say around the collection.
func TestPostgresMetrics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	srv, err := pgharness.StartThrowaway(ctx, pgharness.Options{Archive: true, Settings: []string{"autovacuum_naptime=1"}})
	if err != nil {
		t.Fatalf("start a throwaway PostgreSQL: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	standby, err := srv.StartStandby(ctx, pgharness.StandbyOptions{Name: "replica1", Synchronous: true})
	if err != nil {
		t.Fatalf("start a standby: %v", err)
	}
	t.Cleanup(func() { _ = standby.Stop() })

	cfg, err := pgxpool.ParseConfig(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	const schema = "shop"
	if _, err := migrate.Apply(ctx, pool, schema, outbox.Migrations); err != nil {
		t.Fatal(err)
	}
	// t: 100 rows, 40 deleted, never vacuumed; v: autovacuumed at once.
	// One connection, whose statistics are flushed when it goes idle
	// (pg_stat_force_next_flush, PostgreSQL 15 and later; before, within
	// ten seconds).
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `
		CREATE TABLE shop.t (id int PRIMARY KEY) WITH (autovacuum_enabled = false);
		INSERT INTO shop.t SELECT generate_series(1, 100);
		DELETE FROM shop.t WHERE id <= 40;
		CREATE TABLE shop.v (id int) WITH (autovacuum_vacuum_threshold = 0, autovacuum_vacuum_scale_factor = 0);
		INSERT INTO shop.v SELECT generate_series(1, 10);
		DELETE FROM shop.v;`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DO $$ BEGIN
		IF current_setting('server_version_num')::int >= 150000 THEN PERFORM pg_stat_force_next_flush(); END IF;
	END $$`); err != nil {
		t.Fatal(err)
	}
	conn.Release()
	store, err := outbox.New(outbox.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "b", "c"} {
		if err := pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
			_, err := store.Enqueue(ctx, tx, outbox.Event{Topic: "orders", AggregateType: "ORDER", AggregateID: key, Payload: []byte(`{}`), DedupKey: key})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%v: server, standby and schema ready", time.Since(start))
	if err := srv.SetArchiveFailing(true); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_switch_wal()`); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, pool, "40 dead tuples in shop.t, shop.v autovacuumed and an archive failure",
		`SELECT (SELECT n_dead_tup = 40 FROM pg_stat_user_tables WHERE relid = 'shop.t'::regclass)
		    AND (SELECT last_autovacuum IS NOT NULL FROM pg_stat_user_tables WHERE relid = 'shop.v'::regclass)
		    AND (SELECT failed_count > 0 FROM pg_stat_archiver)`)

	t.Logf("%v: statistics ready", time.Since(start))
	// A session waiting for a row lock.
	holder, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	waiter, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close(context.Background())
	htx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := htx.Exec(ctx, `SELECT id FROM shop.t WHERE id = 50 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(ctx, `UPDATE shop.t SET id = id WHERE id = 50`)
		waited <- err
	}()
	waitFor(ctx, t, pool, "a session waiting for the row lock",
		`SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'transactionid'`)

	// The pool: one acquire times out while both connections are taken,
	// then one connection stays taken through the collection.
	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if c, err := pool.Acquire(tctx); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire from a full pool: %v, %v", c, err)
	}
	tcancel()
	other.Release()

	t.Logf("%v: lock wait ready", time.Since(start))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	reg, err := otelseckill.RegisterPostgresMetrics(mp.Meter("test"), pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Unregister() })

	type server struct {
		wal, archived, failed int64
		stats                 outbox.Stats
	}
	read := func() server {
		var s server
		if err := pool.QueryRow(ctx, `SELECT (SELECT wal_bytes::bigint FROM pg_stat_wal), archived_count, failed_count FROM pg_stat_archiver`).Scan(&s.wal, &s.archived, &s.failed); err != nil {
			t.Fatal(err)
		}
		if s.stats, err = store.Stats(ctx, pool); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := read()
	st := pool.Stat()
	rm := collect(t, reader)
	after := read()
	t.Logf("%v: collected", time.Since(start))

	// The pool.
	idle, used := attribute.String("db.client.connection.state", "idle"), attribute.String("db.client.connection.state", "used")
	conns := find(t, rm, otelseckill.MetricPoolConnections)
	if u, i := sum(t, conns, used), sum(t, conns, idle); u != float64(st.AcquiredConns()) || i != float64(st.IdleConns()) || u != 1 || i != 1 {
		t.Errorf("connections used %v idle %v; the pool says %d, %d (want 1, 1)", u, i, st.AcquiredConns(), st.IdleConns())
	}
	checkEq(t, rm, otelseckill.MetricPoolMax, 2)
	checkEq(t, rm, otelseckill.MetricPoolTimeouts, float64(st.CanceledAcquireCount()))
	if st.CanceledAcquireCount() != 1 {
		t.Errorf("the pool counts %d cancelled acquires, want 1", st.CanceledAcquireCount())
	}
	checkEq(t, rm, otelseckill.MetricPoolAcquires, float64(st.AcquireCount()))
	checkEq(t, rm, otelseckill.MetricPoolEmptyAcquires, float64(st.EmptyAcquireCount()))
	checkEq(t, rm, otelseckill.MetricPoolAcquireDuration, st.AcquireDuration().Seconds())
	checkEq(t, rm, otelseckill.MetricPoolEmptyAcquireWait, st.EmptyAcquireWaitTime().Seconds())
	held.Release()

	// The outbox.
	events := find(t, rm, otelseckill.MetricOutboxEvents)
	status := func(s string) float64 { return sum(t, events, otelseckill.AttrOutboxStatus.String(s)) }
	if status("pending") != float64(before.stats.Pending) || before.stats.Pending != 3 || status("dead") != 0 || status("sent") != 0 {
		t.Errorf("outbox events pending %v dead %v sent %v; Stats says %+v", status("pending"), status("dead"), status("sent"), before.stats)
	}
	if age := sum(t, find(t, rm, otelseckill.MetricOutboxOldestAge)); age < before.stats.OldestWaiting.Seconds() || age > after.stats.OldestWaiting.Seconds() {
		t.Errorf("oldest waiting age %v, not between %v and %v", age, before.stats.OldestWaiting, after.stats.OldestWaiting)
	}

	// The tables.
	var dead, live int64
	var lastAuto float64
	if err := pool.QueryRow(ctx, `SELECT t.n_dead_tup, t.n_live_tup, extract(epoch FROM v.last_autovacuum)::float8
		FROM pg_stat_user_tables t, pg_stat_user_tables v WHERE t.relid = 'shop.t'::regclass AND v.relid = 'shop.v'::regclass`).Scan(&dead, &live, &lastAuto); err != nil {
		t.Fatal(err)
	}
	tbl := func(name string) attribute.KeyValue { return attribute.String("db.collection.name", name) }
	if got := sum(t, find(t, rm, otelseckill.MetricTableDeadTuples), tbl("t")); got != float64(dead) || dead != 40 {
		t.Errorf("dead tuples of t %v; the view says %d (want 40)", got, dead)
	}
	if got := sum(t, find(t, rm, otelseckill.MetricTableLiveTuples), tbl("t")); got != float64(live) {
		t.Errorf("live tuples of t %v; the view says %d", got, live)
	}
	last := find(t, rm, otelseckill.MetricTableLastAutovacuum)
	if got := sum(t, last, tbl("v")); math.Abs(got-lastAuto) > 1e-6 {
		t.Errorf("last autovacuum of v %v; the view says %v", got, lastAuto)
	}
	if n := points(t, last, tbl("t")); n != 0 {
		t.Errorf("t, never autovacuumed, has %d last-autovacuum points", n)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_user_tables WHERE schemaname = $1`, schema).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if n := points(t, find(t, rm, otelseckill.MetricTableDeadTuples)); n != tables || tables < 3 {
		t.Errorf("dead tuples reported for %d tables; the schema has %d", n, tables)
	}

	// WAL and archiving: counters between the views' values before and after.
	between := func(name string, lo, hi int64) {
		t.Helper()
		if got := sum(t, find(t, rm, name)); got < float64(lo) || got > float64(hi) {
			t.Errorf("%s %v, not between %d and %d", name, got, lo, hi)
		}
	}
	between(otelseckill.MetricWALBytes, before.wal, after.wal)
	between(otelseckill.MetricArchived, before.archived, after.archived)
	between(otelseckill.MetricArchiveFailures, before.failed, after.failed)
	if before.failed == 0 {
		t.Errorf("no archive failure to report")
	}

	// Replication.
	var state, sync string
	if err := pool.QueryRow(ctx, `SELECT state, sync_state FROM pg_stat_replication WHERE application_name = 'replica1'`).Scan(&state, &sync); err != nil {
		t.Fatal(err)
	}
	sb := otelseckill.AttrStandby.String("replica1")
	if got := sum(t, find(t, rm, otelseckill.MetricStandbys), sb, otelseckill.AttrReplState.String(state), otelseckill.AttrReplSyncState.String(sync)); got != 1 || sync != "sync" {
		t.Errorf("standby replica1 %v with state %q sync_state %q (want 1, sync)", got, state, sync)
	}
	lag := find(t, rm, otelseckill.MetricReplicationLag)
	for _, kind := range []string{"write", "flush", "replay"} {
		if n := points(t, lag, sb, otelseckill.AttrLagKind.String(kind)); n != 1 {
			t.Errorf("%d %s lag points for replica1, want 1", n, kind)
		}
	}
	if n := points(t, find(t, rm, otelseckill.MetricReplicationLagBytes), sb); n != 1 {
		t.Errorf("%d lag-bytes points for replica1, want 1", n)
	}

	// Lock waits.
	waits := find(t, rm, otelseckill.MetricLockWaits)
	if got := sum(t, waits, otelseckill.AttrLockKind.String("transactionid")); got != 1 {
		t.Errorf("sessions waiting on transactionid: %v, want 1", got)
	}
	if got := sum(t, waits, otelseckill.AttrLockKind.String("relation")); got != 0 || points(t, waits, otelseckill.AttrLockKind.String("relation")) != 1 {
		t.Errorf("sessions waiting on relation: %v, want a point of 0", got)
	}
	if err := htx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}

// TestRegisterPostgresMetricsRejects: a missing pool or schema is refused
// up front.
func TestRegisterPostgresMetricsRejects(t *testing.T) {
	t.Parallel()
	mp := sdkmetric.NewMeterProvider()
	if _, err := otelseckill.RegisterPostgresMetrics(mp.Meter("test"), nil, "shop"); err == nil {
		t.Error("nil pool accepted")
	}
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := otelseckill.RegisterPostgresMetrics(mp.Meter("test"), pool, ""); err == nil {
		t.Error("empty schema accepted")
	}
}

// checkEq fails the test unless the metric's points add up to want.
func checkEq(t *testing.T, rm metricdata.ResourceMetrics, name string, want float64) {
	t.Helper()
	if got := sum(t, find(t, rm, name)); got != want {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

// waitFor polls query (one boolean) until it is true or ctx ends.
func waitFor(ctx context.Context, t *testing.T, pool *pgxpool.Pool, what, query string) {
	t.Helper()
	for {
		var ok *bool
		if err := pool.QueryRow(ctx, query).Scan(&ok); err != nil {
			t.Fatalf("wait for %s: %v", what, err)
		}
		if ok != nil && *ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestPostgresMetricsWithoutOutbox: a schema without the outbox table is
// collected without error and reports no outbox metric.
func TestPostgresMetricsWithoutOutbox(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := seckilltest.New(t, inbox.Migrations)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	reg, err := otelseckill.RegisterPostgresMetrics(mp.Meter("test"), db.Pool, db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	rm := collect(t, reader)
	var tables int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_user_tables WHERE schemaname = $1`, db.Schema).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if n := points(t, find(t, rm, otelseckill.MetricTableDeadTuples)); n != tables || tables == 0 {
		t.Errorf("dead tuples reported for %d tables; the schema has %d", n, tables)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == otelseckill.MetricOutboxEvents || m.Name == otelseckill.MetricOutboxOldestAge {
				if n := points(t, m); n != 0 {
					t.Errorf("%s has %d points in a schema without an outbox", m.Name, n)
				}
			}
		}
	}
}
