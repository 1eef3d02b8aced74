package flow

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// VacuumSignals is what an operator watches to see autovacuum held back:
// something holds the oldest transaction id (xmin) that VACUUM must keep,
// so the dead row versions every UPDATE and DELETE leaves stay in the
// tables. The hot bucket rows are hit first: their HOT chains cannot be
// pruned, updates stop fitting on their page and the table and its index
// grow; the outbox claim and the order transaction then read more pages.
type VacuumSignals struct {
	// The age, in transactions, of the oldest xmin each kind of holder
	// keeps (0: none): an open transaction's snapshot (a session idle in
	// transaction, a long report), a replication slot's xmin (a standby
	// with hot_standby_feedback that went away) and catalog_xmin (a
	// logical slot: it holds the system catalogs only), a prepared
	// transaction never committed.
	BackendXminAge, SlotXminAge, SlotCatalogXminAge, PreparedXminAge int64
	// OldestXminAge is the largest of the ages that hold the user tables:
	// BackendXminAge, SlotXminAge and PreparedXminAge.
	OldestXminAge int64
	// SlotRetainedWALBytes is the WAL kept for replication slots that no
	// client uses (inactive): an abandoned slot fills the disk even when it
	// holds no xmin.
	SlotRetainedWALBytes int64
	// Tables has the statistics of the flow's tables, by name.
	Tables map[string]TableVacuum
}

// TableVacuum is one table's vacuum statistics (pg_stat_user_tables).
type TableVacuum struct {
	LiveTuples, DeadTuples int64
	Updates, HOTUpdates    int64 // since the statistics were reset
	Autovacuums, Vacuums   int64
	Bytes                  int64 // the table with its indexes and TOAST
}

const vacuumSignalsSQL = `SELECT
	coalesce((SELECT max(age(backend_xmin)) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()), 0),
	coalesce((SELECT max(age(xmin)) FROM pg_replication_slots WHERE xmin IS NOT NULL), 0),
	coalesce((SELECT max(age(catalog_xmin)) FROM pg_replication_slots WHERE catalog_xmin IS NOT NULL), 0),
	coalesce((SELECT max(age(transaction)) FROM pg_prepared_xacts), 0),
	coalesce((SELECT max(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)) FROM pg_replication_slots WHERE NOT active AND restart_lsn IS NOT NULL), 0)::int8`

const tableVacuumSQL = `SELECT relname, n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count, vacuum_count,
	pg_total_relation_size(relid)
FROM pg_stat_user_tables WHERE schemaname = $1`

// ReadVacuumSignals reads the signals of the server db is connected to and
// the statistics of schema's tables, with two read-only statements.
func ReadVacuumSignals(ctx context.Context, db pgtx.Querier, schema string) (VacuumSignals, error) {
	var v VacuumSignals
	if err := db.QueryRow(ctx, vacuumSignalsSQL).Scan(&v.BackendXminAge, &v.SlotXminAge, &v.SlotCatalogXminAge,
		&v.PreparedXminAge, &v.SlotRetainedWALBytes); err != nil {
		return v, fmt.Errorf("flow: vacuum signals: %w", err)
	}
	v.OldestXminAge = max(v.BackendXminAge, v.SlotXminAge, v.PreparedXminAge)
	rows, err := db.Query(ctx, tableVacuumSQL, schema)
	if err != nil {
		return v, fmt.Errorf("flow: table statistics: %w", err)
	}
	v.Tables = map[string]TableVacuum{}
	var name string
	var tv TableVacuum
	if _, err := pgx.ForEachRow(rows, []any{&name, &tv.LiveTuples, &tv.DeadTuples, &tv.Updates, &tv.HOTUpdates, &tv.Autovacuums, &tv.Vacuums, &tv.Bytes},
		func() error { v.Tables[name] = tv; return nil }); err != nil {
		return v, fmt.Errorf("flow: table statistics: %w", err)
	}
	return v, nil
}
