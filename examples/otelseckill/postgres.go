package otelseckill

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/seckillkit/seckill/outbox"
)

// Metric names of [RegisterPostgresMetrics]. The db.client.connection.*
// ones are OpenTelemetry's semantic conventions, with the
// db.client.connection.pool.name attribute ("host:port/database" of the
// pool's configuration).
const (
	// MetricPoolConnections is db.client.connection.count: the pool's
	// connections by db.client.connection.state (idle, used).
	MetricPoolConnections = "db.client.connection.count"
	// MetricPoolMax is db.client.connection.max: the pool's MaxConns.
	MetricPoolMax = "db.client.connection.max"
	// MetricPoolTimeouts is db.client.connection.timeouts: acquires
	// abandoned because their context ended (timed out or cancelled)
	// before a connection was free (pgxpool's CanceledAcquireCount).
	MetricPoolTimeouts = "db.client.connection.timeouts"
	// MetricPoolAcquires is a counter of successful acquires
	// (AcquireCount).
	MetricPoolAcquires = "seckill.pool.acquires"
	// MetricPoolAcquireDuration is a counter (s) of the total time spent
	// acquiring (AcquireDuration): its rate divided by the rate of
	// seckill.pool.acquires is the mean acquire time.
	MetricPoolAcquireDuration = "seckill.pool.acquire.duration"
	// MetricPoolEmptyAcquires is a counter of acquires that had to wait
	// for a connection because none was idle (EmptyAcquireCount): the
	// pool's saturation.
	MetricPoolEmptyAcquires = "seckill.pool.empty_acquires"
	// MetricPoolEmptyAcquireWait is a counter (s) of the total time those
	// acquires waited (EmptyAcquireWaitTime).
	MetricPoolEmptyAcquireWait = "seckill.pool.empty_acquire.wait_time"

	// MetricOutboxEvents is a gauge of outbox events by
	// seckill.outbox.status (pending, sending, retry, dead exact; sent
	// exact on a small table, else the planner's estimate), from
	// outbox.Store.Stats. Reported when the schema has the outbox table.
	MetricOutboxEvents = "seckill.outbox.events"
	// MetricOutboxOldestAge is a gauge (s) of the age of the oldest
	// PENDING or RETRY event (0 when none): how far publishing lags.
	MetricOutboxOldestAge = "seckill.outbox.oldest_waiting.age"

	// MetricTableDeadTuples is a gauge of each table's dead tuples
	// (n_dead_tup), by db.collection.name, for the tables of the schema.
	MetricTableDeadTuples = "seckill.postgres.table.dead_tuples"
	// MetricTableLiveTuples is a gauge of each table's live tuples
	// (n_live_tup).
	MetricTableLiveTuples = "seckill.postgres.table.live_tuples"
	// MetricTableAutovacuums is a counter of each table's autovacuum runs
	// (autovacuum_count).
	MetricTableAutovacuums = "seckill.postgres.table.autovacuums"
	// MetricTableLastAutovacuum is a gauge of each table's last
	// autovacuum, in seconds since the Unix epoch (absent for a table
	// never autovacuumed): the vacuum lag is now minus this.
	MetricTableLastAutovacuum = "seckill.postgres.table.last_autovacuum"
	// MetricWALBytes is a counter (By) of the WAL the server generated
	// since its statistics were reset (pg_stat_wal.wal_bytes, PostgreSQL
	// 14 and later; absent before).
	MetricWALBytes = "seckill.postgres.wal.bytes"
	// MetricArchived is a counter of WAL files archived
	// (pg_stat_archiver.archived_count).
	MetricArchived = "seckill.postgres.archiver.archived"
	// MetricArchiveFailures is a counter of failed archive attempts
	// (pg_stat_archiver.failed_count).
	MetricArchiveFailures = "seckill.postgres.archiver.failed"
	// MetricReplicationLag is a gauge (s) of each standby's lag by
	// seckill.postgres.standby (application_name) and
	// seckill.postgres.lag (write, flush, replay), from
	// pg_stat_replication; 0 once it has caught up and nothing is written.
	MetricReplicationLag = "seckill.postgres.replication.lag"
	// MetricReplicationLagBytes is a gauge (By) of the WAL each standby
	// has yet to replay (the primary's current position minus
	// replay_lsn). Reported by a primary only.
	MetricReplicationLagBytes = "seckill.postgres.replication.lag_bytes"
	// MetricStandbys is a gauge, 1 per connected standby, by
	// seckill.postgres.standby, seckill.postgres.replication.state
	// (streaming, catchup, …) and seckill.postgres.replication.sync_state
	// (sync, async, potential, quorum).
	MetricStandbys = "seckill.postgres.replication.standbys"
	// MetricLockWaits is a gauge of the sessions of the current database
	// waiting for a heavyweight lock, by seckill.postgres.lock
	// (pg_stat_activity.wait_event: transactionid and tuple for row locks
	// such as an inventory bucket's, relation, advisory, …); the common
	// kinds are reported as 0 when nobody waits.
	MetricLockWaits = "seckill.postgres.lock_waits"
)

// Attribute keys of [RegisterPostgresMetrics]'s metrics.
const (
	AttrOutboxStatus    = attribute.Key("seckill.outbox.status")                   // pending, sending, retry, dead, sent
	AttrStandby         = attribute.Key("seckill.postgres.standby")                // pg_stat_replication.application_name
	AttrLagKind         = attribute.Key("seckill.postgres.lag")                    // write, flush, replay
	AttrReplState       = attribute.Key("seckill.postgres.replication.state")      // pg_stat_replication.state
	AttrReplSyncState   = attribute.Key("seckill.postgres.replication.sync_state") // pg_stat_replication.sync_state
	AttrLockKind        = attribute.Key("seckill.postgres.lock")                   // pg_stat_activity.wait_event
	attrPoolName        = attribute.Key("db.client.connection.pool.name")
	attrConnectionState = attribute.Key("db.client.connection.state")
)

// PostgresCollectTimeout bounds the statements of one collection of
// [RegisterPostgresMetrics] (together), whatever the reader's context
// allows.
const PostgresCollectTimeout = 5 * time.Second

var (
	//go:embed sql/tables.sql
	tablesSQL string
	//go:embed sql/archiver.sql
	archiverSQL string
	//go:embed sql/wal.sql
	walSQL string
	//go:embed sql/replication.sql
	replicationSQL string
	//go:embed sql/lockwaits.sql
	lockWaitsSQL string
)

// commonLockWaits are reported (as 0) even when no session waits on them.
var commonLockWaits = []string{"advisory", "relation", "transactionid", "tuple"}

// RegisterPostgresMetrics registers, on meter, observable instruments
// that read at each collection the statistics of pool (pgxpool's Stat:
// no statement), the outbox of schema (outbox.Store.Stats, when the
// schema has an event_outbox table) and PostgreSQL's statistics views:
// pg_stat_user_tables for the tables of schema, pg_stat_archiver,
// pg_stat_wal (PostgreSQL 14 and later), pg_stat_replication and
// pg_stat_activity. The metrics are those named by the constants from
// [MetricPoolConnections] to [MetricLockWaits].
//
// Every statement is read-only and cheap (statistics views, the outbox's
// partial indexes); one collection takes one pool connection for a
// handful of short statements, bounded by [PostgresCollectTimeout].
// Unregister the returned registration before closing pool.
//
// The replication columns and other sessions' wait events are visible to
// a superuser or a member of pg_read_all_stats (pg_monitor); for another
// role the server hides them and the lags read 0.
//
// A statement that fails does not stop the others: the collection
// reports what it could read and returns the errors, which the SDK hands
// to otel.Handle. schema must be non-empty and pool non-nil.
func RegisterPostgresMetrics(meter metric.Meter, pool *pgxpool.Pool, schema string) (metric.Registration, error) {
	if meter == nil || pool == nil {
		return nil, errors.New("otelseckill: RegisterPostgresMetrics needs a meter and a pool")
	}
	if schema == "" {
		return nil, errors.New("otelseckill: RegisterPostgresMetrics needs the schema name")
	}
	ob, err := outbox.New(outbox.Config{Schema: schema})
	if err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	c := &pgCollector{pool: pool, schema: schema, outbox: ob}
	cc := pool.Config().ConnConfig
	c.poolAttr = attrPoolName.String(cc.Host + ":" + strconv.Itoa(int(cc.Port)) + "/" + cc.Database)
	if err := c.instruments(meter); err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	reg, err := meter.RegisterCallback(c.collect, c.all...)
	if err != nil {
		return nil, fmt.Errorf("otelseckill: %w", err)
	}
	return reg, nil
}

type pgCollector struct {
	pool     *pgxpool.Pool
	schema   string
	outbox   *outbox.Store
	poolAttr attribute.KeyValue

	poolConns, poolMax                             metric.Int64ObservableUpDownCounter
	poolTimeouts, poolAcquires, poolEmpty          metric.Int64ObservableCounter
	poolAcquireDur, poolEmptyWait                  metric.Float64ObservableCounter
	outboxEvents                                   metric.Int64ObservableGauge
	outboxAge                                      metric.Float64ObservableGauge
	deadTuples, liveTuples                         metric.Int64ObservableGauge
	autovacuums, walBytes, archived, archiveFailed metric.Int64ObservableCounter
	lastAutovacuum, replLag                        metric.Float64ObservableGauge
	replLagBytes, standbys, lockWaits              metric.Int64ObservableGauge
	all                                            []metric.Observable
}

func (c *pgCollector) instruments(m metric.Meter) error {
	var errs []error
	add := func(o metric.Observable, err error) {
		errs = append(errs, err)
		c.all = append(c.all, o)
	}
	var err error
	c.poolConns, err = m.Int64ObservableUpDownCounter(MetricPoolConnections, metric.WithUnit("{connection}"),
		metric.WithDescription("Connections of the pool by state (idle, used)."))
	add(c.poolConns, err)
	c.poolMax, err = m.Int64ObservableUpDownCounter(MetricPoolMax, metric.WithUnit("{connection}"),
		metric.WithDescription("The pool's maximum number of connections."))
	add(c.poolMax, err)
	c.poolTimeouts, err = m.Int64ObservableCounter(MetricPoolTimeouts, metric.WithUnit("{timeout}"),
		metric.WithDescription("Acquires abandoned because their context ended before a connection was free."))
	add(c.poolTimeouts, err)
	c.poolAcquires, err = m.Int64ObservableCounter(MetricPoolAcquires, metric.WithUnit("{acquire}"),
		metric.WithDescription("Successful acquires from the pool."))
	add(c.poolAcquires, err)
	c.poolEmpty, err = m.Int64ObservableCounter(MetricPoolEmptyAcquires, metric.WithUnit("{acquire}"),
		metric.WithDescription("Acquires that waited because no connection was idle."))
	add(c.poolEmpty, err)
	c.poolAcquireDur, err = m.Float64ObservableCounter(MetricPoolAcquireDuration, metric.WithUnit("s"),
		metric.WithDescription("Total time spent acquiring connections."))
	add(c.poolAcquireDur, err)
	c.poolEmptyWait, err = m.Float64ObservableCounter(MetricPoolEmptyAcquireWait, metric.WithUnit("s"),
		metric.WithDescription("Total time acquires waited for a connection because none was idle."))
	add(c.poolEmptyWait, err)
	c.outboxEvents, err = m.Int64ObservableGauge(MetricOutboxEvents, metric.WithUnit("{event}"),
		metric.WithDescription("Outbox events by status."))
	add(c.outboxEvents, err)
	c.outboxAge, err = m.Float64ObservableGauge(MetricOutboxOldestAge, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest PENDING or RETRY outbox event (0 when none)."))
	add(c.outboxAge, err)
	c.deadTuples, err = m.Int64ObservableGauge(MetricTableDeadTuples, metric.WithUnit("{tuple}"),
		metric.WithDescription("Dead tuples of each table of the schema."))
	add(c.deadTuples, err)
	c.liveTuples, err = m.Int64ObservableGauge(MetricTableLiveTuples, metric.WithUnit("{tuple}"),
		metric.WithDescription("Live tuples of each table of the schema."))
	add(c.liveTuples, err)
	c.autovacuums, err = m.Int64ObservableCounter(MetricTableAutovacuums, metric.WithUnit("{run}"),
		metric.WithDescription("Autovacuum runs of each table of the schema."))
	add(c.autovacuums, err)
	c.lastAutovacuum, err = m.Float64ObservableGauge(MetricTableLastAutovacuum, metric.WithUnit("s"),
		metric.WithDescription("Last autovacuum of each table, in seconds since the Unix epoch."))
	add(c.lastAutovacuum, err)
	c.walBytes, err = m.Int64ObservableCounter(MetricWALBytes, metric.WithUnit("By"),
		metric.WithDescription("WAL generated since the statistics were reset."))
	add(c.walBytes, err)
	c.archived, err = m.Int64ObservableCounter(MetricArchived, metric.WithUnit("{file}"),
		metric.WithDescription("WAL files archived."))
	add(c.archived, err)
	c.archiveFailed, err = m.Int64ObservableCounter(MetricArchiveFailures, metric.WithUnit("{attempt}"),
		metric.WithDescription("Failed WAL archive attempts."))
	add(c.archiveFailed, err)
	c.replLag, err = m.Float64ObservableGauge(MetricReplicationLag, metric.WithUnit("s"),
		metric.WithDescription("Each standby's write, flush and replay lag."))
	add(c.replLag, err)
	c.replLagBytes, err = m.Int64ObservableGauge(MetricReplicationLagBytes, metric.WithUnit("By"),
		metric.WithDescription("WAL each standby has yet to replay."))
	add(c.replLagBytes, err)
	c.standbys, err = m.Int64ObservableGauge(MetricStandbys, metric.WithUnit("{standby}"),
		metric.WithDescription("Connected standbys, by state and sync state."))
	add(c.standbys, err)
	c.lockWaits, err = m.Int64ObservableGauge(MetricLockWaits, metric.WithUnit("{session}"),
		metric.WithDescription("Sessions of the database waiting for a heavyweight lock, by lock kind."))
	add(c.lockWaits, err)
	return errors.Join(errs...)
}

func (c *pgCollector) collect(ctx context.Context, o metric.Observer) error {
	c.observePool(o)
	ctx, cancel := context.WithTimeout(ctx, PostgresCollectTimeout)
	defer cancel()
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("otelseckill: postgres metrics: %w", err)
	}
	defer conn.Release()
	hasOutbox, err := c.observeTables(ctx, conn, o)
	errs := []error{err}
	if hasOutbox {
		errs = append(errs, c.observeOutbox(ctx, conn, o))
	}
	errs = append(errs, c.observeServer(ctx, conn, o), c.observeReplication(ctx, conn, o), c.observeLockWaits(ctx, conn, o))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("otelseckill: postgres metrics: %w", err)
	}
	return nil
}

func (c *pgCollector) observePool(o metric.Observer) {
	st := c.pool.Stat()
	p := metric.WithAttributes(c.poolAttr)
	o.ObserveInt64(c.poolConns, int64(st.IdleConns()), metric.WithAttributes(c.poolAttr, attrConnectionState.String("idle")))
	o.ObserveInt64(c.poolConns, int64(st.AcquiredConns()), metric.WithAttributes(c.poolAttr, attrConnectionState.String("used")))
	o.ObserveInt64(c.poolMax, int64(st.MaxConns()), p)
	o.ObserveInt64(c.poolTimeouts, st.CanceledAcquireCount(), p)
	o.ObserveInt64(c.poolAcquires, st.AcquireCount(), p)
	o.ObserveInt64(c.poolEmpty, st.EmptyAcquireCount(), p)
	o.ObserveFloat64(c.poolAcquireDur, st.AcquireDuration().Seconds(), p)
	o.ObserveFloat64(c.poolEmptyWait, st.EmptyAcquireWaitTime().Seconds(), p)
}

// observeTables reports the schema's tables and whether the outbox table
// is among them.
func (c *pgCollector) observeTables(ctx context.Context, conn *pgxpool.Conn, o metric.Observer) (hasOutbox bool, err error) {
	rows, err := conn.Query(ctx, tablesSQL, c.schema)
	if err != nil {
		return false, fmt.Errorf("tables: %w", err)
	}
	var (
		name             string
		live, dead, runs int64
		last             *float64
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &live, &dead, &runs, &last}, func() error {
		attrs := metric.WithAttributes(semconv.DBCollectionName(name))
		o.ObserveInt64(c.liveTuples, live, attrs)
		o.ObserveInt64(c.deadTuples, dead, attrs)
		o.ObserveInt64(c.autovacuums, runs, attrs)
		if last != nil {
			o.ObserveFloat64(c.lastAutovacuum, *last, attrs)
		}
		hasOutbox = hasOutbox || name == "event_outbox"
		return nil
	})
	if err != nil {
		return hasOutbox, fmt.Errorf("tables: %w", err)
	}
	return hasOutbox, nil
}

func (c *pgCollector) observeOutbox(ctx context.Context, conn *pgxpool.Conn, o metric.Observer) error {
	st, err := c.outbox.Stats(ctx, conn)
	if err != nil {
		return err
	}
	for _, s := range []struct {
		status string
		n      int64
	}{{"pending", st.Pending}, {"sending", st.Sending}, {"retry", st.Retry}, {"dead", st.Dead}, {"sent", st.Sent}} {
		o.ObserveInt64(c.outboxEvents, s.n, metric.WithAttributes(AttrOutboxStatus.String(s.status)))
	}
	o.ObserveFloat64(c.outboxAge, st.OldestWaiting.Seconds())
	return nil
}

func (c *pgCollector) observeServer(ctx context.Context, conn *pgxpool.Conn, o metric.Observer) error {
	var (
		version          int
		archived, failed int64
		lastFailed       *float64
	)
	if err := conn.QueryRow(ctx, archiverSQL).Scan(&version, &archived, &failed, &lastFailed); err != nil {
		return fmt.Errorf("archiver: %w", err)
	}
	o.ObserveInt64(c.archived, archived)
	o.ObserveInt64(c.archiveFailed, failed)
	if version < 140000 {
		return nil
	}
	var wal int64
	if err := conn.QueryRow(ctx, walSQL).Scan(&wal); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	o.ObserveInt64(c.walBytes, wal)
	return nil
}

func (c *pgCollector) observeReplication(ctx context.Context, conn *pgxpool.Conn, o metric.Observer) error {
	rows, err := conn.Query(ctx, replicationSQL)
	if err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	var (
		name, state, sync    string
		write, flush, replay float64
		lagBytes             *int64
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &state, &sync, &write, &flush, &replay, &lagBytes}, func() error {
		sb := AttrStandby.String(name)
		o.ObserveInt64(c.standbys, 1, metric.WithAttributes(sb, AttrReplState.String(state), AttrReplSyncState.String(sync)))
		o.ObserveFloat64(c.replLag, write, metric.WithAttributes(sb, AttrLagKind.String("write")))
		o.ObserveFloat64(c.replLag, flush, metric.WithAttributes(sb, AttrLagKind.String("flush")))
		o.ObserveFloat64(c.replLag, replay, metric.WithAttributes(sb, AttrLagKind.String("replay")))
		if lagBytes != nil {
			o.ObserveInt64(c.replLagBytes, *lagBytes, metric.WithAttributes(sb))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	return nil
}

func (c *pgCollector) observeLockWaits(ctx context.Context, conn *pgxpool.Conn, o metric.Observer) error {
	rows, err := conn.Query(ctx, lockWaitsSQL)
	if err != nil {
		return fmt.Errorf("lock waits: %w", err)
	}
	waits := map[string]int64{}
	for _, k := range commonLockWaits {
		waits[k] = 0
	}
	var (
		kind string
		n    int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&kind, &n}, func() error { waits[kind] = n; return nil }); err != nil {
		return fmt.Errorf("lock waits: %w", err)
	}
	for k, n := range waits {
		o.ObserveInt64(c.lockWaits, n, metric.WithAttributes(AttrLockKind.String(k)))
	}
	return nil
}
