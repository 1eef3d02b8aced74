// Package otelseckill reports what the seckill packages do to
// OpenTelemetry: spans and metrics from the observers of pgtx, inventory
// and outbox, and a read-only collector of the PostgreSQL server's and the
// connection pool's state.
//
// It is a module of its own, so the seckill library keeps depending only
// on pgx, uuid and pgerrcode; a service that uses OpenTelemetry adds this
// module next to the library.
//
// # Observers
//
// [New] returns the observers, wired to a MeterProvider and a
// TracerProvider (the global ones by default):
//
//	obs, err := otelseckill.New(otelseckill.Config{})
//	...
//	err = pgtx.RunInTx(ctx, pool, pgtx.Options{Name: "checkout", Observer: obs.Tx}, fn)
//	inv, err := inventory.New(inventory.Config{Observer: obs.Inventory})
//	relay, err := outbox.NewRelay(pool, outbox.RelayConfig{Observer: obs.Outbox, ...})
//
// Each pgtx.RunInTx or pgtx.RunBatch call becomes a span named "pgtx
// <Options.Name>" with one child span "pgtx.attempt" per attempt: the
// attempt's outcome, its SQLSTATE, whether it is retried and after which
// backoff, and whether its COMMIT's answer was lost. Each claimed outbox
// batch becomes a span "outbox publish" of kind producer, linked to the
// trace of every event that carries a W3C traceparent header: enqueue
// events with headers from [Observers.Inject] and the relay's spans point
// back to the requests that produced them. Inventory allocations and
// releases are counted by result and added as events to the caller's span.
//
// The metric names follow OpenTelemetry's semantic conventions where one
// exists (db.client.connection.*, messaging.client.*) and are documented
// seckill.* names otherwise; the list is in the repository's
// docs/observability.md and in the godoc of each constant of this package.
//
// # PostgreSQL and the pool
//
// [RegisterPostgresMetrics] registers observable instruments that read,
// at each collection, the pool's statistics, the outbox's counts
// (outbox.Store.Stats), and PostgreSQL's statistics views: dead tuples
// and the last autovacuum of each table of the schema
// (pg_stat_user_tables), WAL bytes (pg_stat_wal, PostgreSQL 14 and
// later), archiver failures (pg_stat_archiver), the standbys' lags and
// sync state (pg_stat_replication) and the sessions waiting for a lock
// (pg_stat_activity). Every statement is read-only and reads small
// views or partial indexes.
//
// # Per attempt, per outcome
//
// pgtx's TxEnd and the outbox's hooks report committed work, once. pgtx's
// AttemptEnd and the inventory's hooks fire per attempt: an allocation
// counted by seckill.inventory.allocations may be rolled back with its
// transaction. Count sold stock from committed transactions
// (seckill.tx.duration's count with outcome committed) or from the ledger.
package otelseckill
