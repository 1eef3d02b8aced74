package main

import (
	"context"

	"github.com/seckillkit/seckill/examples/seckill/flow"
)

// vacuumFigures exports what an operator watches when autovacuum is held
// back (flow.VacuumSignals): the age of the oldest xmin by holder, the WAL
// kept for inactive replication slots, and the dead tuples and HOT updates
// of the service's tables. They are read at every scrape.
func (s *service) vacuumFigures(m *serviceMetrics) {
	xmin := m.gauge("seckill_db_oldest_xmin_age",
		"Age in transactions of the oldest xmin VACUUM must keep, by holder (backend: an open transaction's snapshot; slot, slot_catalog: a replication slot's xmin, catalog_xmin; prepared: a prepared transaction).", "holder")
	wal := m.gauge("seckill_db_inactive_slot_wal_bytes", "WAL kept for replication slots no client uses.")
	dead := m.gauge("seckill_db_dead_tuples", "Dead row versions waiting for vacuum, by table of the service's schema.", "table")
	updates := m.gauge("seckill_db_updates", "Row updates since the statistics were reset, by table and kind (hot: on the same page, no index write).", "table", "kind")
	m.collect = append(m.collect, func(ctx context.Context) {
		if s.Service == nil {
			return
		}
		v, err := flow.ReadVacuumSignals(ctx, s.Pool, s.Schema)
		if err != nil {
			s.log.Warn("vacuum signals", "err", err)
			return
		}
		xmin.set(float64(v.BackendXminAge), "backend")
		xmin.set(float64(v.SlotXminAge), "slot")
		xmin.set(float64(v.SlotCatalogXminAge), "slot_catalog")
		xmin.set(float64(v.PreparedXminAge), "prepared")
		wal.set(float64(v.SlotRetainedWALBytes))
		for name, t := range v.Tables {
			dead.set(float64(t.DeadTuples), name)
			updates.set(float64(t.Updates-t.HOTUpdates), name, "non_hot")
			updates.set(float64(t.HOTUpdates), name, "hot")
		}
	})
}
