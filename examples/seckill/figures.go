package main

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/web"
)

// collectTimeout bounds the reads of one collection of the service's
// figures (the queue's backlog, the vacuum signals).
const collectTimeout = 5 * time.Second

// registerFigures registers the service's own figures on t, read at every
// scrape: its outcomes, counted after their transaction committed (the
// counters of GET /stats), and the queue's backlog. Per commit, unlike the
// kit's per-attempt hooks.
func (s *service) registerFigures(t *telemetry) error {
	m := t.meter
	front, err1 := m.Int64ObservableCounter("seckill.front_door", metric.WithDescription("Clicks by the front door's answer."))
	orders, err2 := m.Int64ObservableCounter("seckill.orders",
		metric.WithDescription("Order messages by what their committed transaction came to (counted after COMMIT; duplicates apart)."))
	dups, err3 := m.Int64ObservableCounter("seckill.order_duplicates",
		metric.WithDescription("Order message deliveries answered from the inbox (processed before)."))
	payments, err4 := m.Int64ObservableCounter("seckill.payments", metric.WithDescription("Payment callbacks by result (after COMMIT)."))
	cancelled, err5 := m.Int64ObservableCounter("seckill.orders_cancelled",
		metric.WithDescription("Orders cancelled by the timeout canceller (after COMMIT)."))
	events, err6 := m.Int64ObservableCounter("seckill.events_published",
		metric.WithDescription("Distinct outbox events the relays' publisher delivered (a JetStream PubAck, or applied in process), by tag."))
	pending, err7 := m.Int64ObservableGauge("seckill.queue_pending", metric.WithDescription("Order messages published and not yet acknowledged."))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		return err
	}
	by := func(o metric.Observer, inst metric.Int64Observable, key string, values map[string]int64) {
		for v, n := range values {
			o.ObserveInt64(inst, n, metric.WithAttributes(attribute.String(key, v)))
		}
	}
	return t.observe(func(ctx context.Context, o metric.Observer) error {
		c := &s.stats
		by(o, front, "result", map[string]int64{
			"accepted": c.frontAccepted.Load(), "sold_out": c.frontSoldOut.Load(), "already_reserved": c.frontAlready.Load(),
			"busy": c.busy.Load(), "unavailable": c.frontDown.Load(),
		})
		by(o, orders, "result", map[string]int64{
			"created": c.created.Load(), "already_created": c.already.Load(), "user_already_ordered": c.userAlready.Load(),
			"sold_out": c.soldOut.Load(), "poison": c.poison.Load(),
		})
		o.ObserveInt64(dups, c.duplicates.Load())
		by(o, payments, "result", map[string]int64{"paid": c.paid.Load(), "duplicate": c.dupCallbacks.Load(), "refund": c.paidAfterCancel.Load()})
		o.ObserveInt64(cancelled, c.cancelled.Load())
		c.published.Range(func(k, v any) bool {
			o.ObserveInt64(events, v.(interface{ Load() int64 }).Load(), metric.WithAttributes(attribute.String("tag", k.(string))))
			return true
		})
		ctx, cancel := context.WithTimeout(ctx, collectTimeout)
		defer cancel()
		o.ObserveInt64(pending, s.q.Pending(ctx))
		return nil
	}, front, orders, dups, payments, cancelled, events, pending)
}

// registerVacuumFigures registers what an operator watches when autovacuum
// is held back (flow.VacuumSignals), read at every scrape: the age of the
// oldest xmin by holder, the WAL kept for inactive replication slots, and
// the dead tuples and HOT updates of the service's tables.
func (s *service) registerVacuumFigures(t *telemetry) error {
	m := t.meter
	xmin, err1 := m.Int64ObservableGauge("seckill.db.oldest_xmin_age", metric.WithDescription(
		"Age in transactions of the oldest xmin VACUUM must keep, by holder (backend: an open transaction's snapshot; slot, slot_catalog: a replication slot's xmin, catalog_xmin; prepared: a prepared transaction)."))
	wal, err2 := m.Int64ObservableGauge("seckill.db.inactive_slot_wal", metric.WithUnit("By"),
		metric.WithDescription("WAL kept for replication slots no client uses."))
	dead, err3 := m.Int64ObservableGauge("seckill.db.dead_tuples",
		metric.WithDescription("Dead row versions waiting for vacuum, by table of the service's schema."))
	updates, err4 := m.Int64ObservableGauge("seckill.db.updates",
		metric.WithDescription("Row updates since the statistics were reset, by table and kind (hot: on the same page, no index write)."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return err
	}
	return t.observe(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, collectTimeout)
		defer cancel()
		v, err := flow.ReadVacuumSignals(ctx, s.Pool, s.Schema)
		if err != nil {
			return err
		}
		for holder, age := range map[string]int64{"backend": v.BackendXminAge, "slot": v.SlotXminAge,
			"slot_catalog": v.SlotCatalogXminAge, "prepared": v.PreparedXminAge} {
			o.ObserveInt64(xmin, age, metric.WithAttributes(attribute.String("holder", holder)))
		}
		o.ObserveInt64(wal, v.SlotRetainedWALBytes)
		for name, tb := range v.Tables {
			table := attribute.String("table", name)
			o.ObserveInt64(dead, tb.DeadTuples, metric.WithAttributes(table))
			o.ObserveInt64(updates, tb.Updates-tb.HOTUpdates, metric.WithAttributes(table, attribute.String("kind", "non_hot")))
			o.ObserveInt64(updates, tb.HOTUpdates, metric.WithAttributes(table, attribute.String("kind", "hot")))
		}
		return nil
	}, xmin, wal, dead, updates)
}

// registerAuditFigure reports at every scrape the conservation deviation
// the latest audit of mon found: how many of its checks failed (0: every
// invariant holds; the ledger replay, per-bucket totals and allocated =
// live orders among them), by mode (live, at_rest). The audit reads whole
// tables, so it runs on the operator page's schedule (every few seconds),
// never at a scrape; no series before the first audit or when it could not
// run.
func (s *service) registerAuditFigure(mon *web.Monitor) error {
	failed, err := s.tel.meter.Int64ObservableGauge("seckill.audit.failed_checks", metric.WithDescription(
		"Checks of the latest audit that failed (0: every invariant holds, conservation included), by mode (live, at_rest)."))
	if err != nil {
		return err
	}
	return s.tel.observe(func(_ context.Context, o metric.Observer) error {
		if a := mon.Audit(); a.Status != "PENDING" && a.Failed >= 0 {
			o.ObserveInt64(failed, int64(a.Failed), metric.WithAttributes(attribute.String("mode", a.Mode)))
		}
		return nil
	}, failed)
}
