package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/frontdoor"
	"github.com/seckillkit/seckill/outbox"
)

// Window is a range of order creation times, From inclusive, To not.
type Window struct{ From, To time.Time }

// Counters is what [RunWindow] reads beside the windows' reports:
// counters and backlogs, never the sale's rows.
type Counters struct {
	// FrontHeld is how many reservations the front door holds.
	FrontHeld int64 `json:"front_held"`
	// InFlight bounds the reservations the front door may hold without a
	// live order while the service works: PostgreSQL's PENDING_DB and
	// RELEASE_PENDING reservations, the order messages queued, being
	// published or whose publish got no definite answer, and the
	// reservations of poison messages.
	InFlight int64 `json:"in_flight"`
	// Outbox is the event backlog (waiting and dead: outbox.Store.Backlog,
	// no SENT count).
	Outbox outbox.Stats `json:"outbox"`
}

// RunWindow is [Run] for a sale in progress, at a cost that follows the
// buckets and the windows, not the sale's history: what the operator
// view runs every few seconds, with Run kept for the end of the sale and
// on demand. In one snapshot it reads
//
//   - each window's three reports ([flow.Service.ReconcileWindowTx]: the
//     orders created in it, their ledger rows and events, the window's
//     reservations), classified as Run classifies the whole history's;
//   - the bucket rows, and how many reservations are in flight
//     (PENDING_DB or RELEASE_PENDING, through their partial index);
//   - the outbox's backlog (waiting and dead events);
//
// and from the front door its counters only ([frontdoor.Door.Counters]).
// Where Run matches every held reservation with its order, RunWindow
// compares counts: the front door's units (available + held - drift)
// with PostgreSQL's (available + allocated), and in each bucket the
// stock PostgreSQL has given out and the front door has not (held
// without a live order) with what is in flight. So a lost order message,
// a release never applied or a counter moved behind the ledger's back
// shows as a count in its bucket, unexplained once nothing is in flight;
// Run names the reservation. It reads no inbox or stream totals: the
// event and order message pipeline is checked by each window's events
// and the outbox's dead events, end to end by Run.
func RunWindow(ctx context.Context, s Sources, windows ...Window) (*Result, error) {
	r := &reconciler{s: s, rec: &Result{Counters: &Counters{}}}
	end, err := r.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	if err := r.readBucketRows(ctx); err != nil {
		return nil, err
	}
	if err := r.readPoison(ctx); err != nil {
		return nil, err
	}
	for _, w := range windows {
		rep, err := s.Flow.ReconcileWindowTx(ctx, r.tx, w.From, w.To)
		if err != nil {
			return nil, fmt.Errorf("reconcile: window: %w", err)
		}
		if err := r.classifyFlowReports(ctx, rep, fmt.Sprintf("window %s–%s: ", w.From.Format(time.TimeOnly), w.To.Format(time.TimeOnly))); err != nil {
			return nil, err
		}
		r.rec.Windows = append(r.rec.Windows, rep)
	}
	if err := r.readInFlight(ctx); err != nil {
		return nil, err
	}
	c, err := s.Front.Counters(ctx)
	if err != nil {
		return nil, fmt.Errorf("reconcile: front door: %w", err)
	}
	r.classifyCounters(c)
	return r.rec, nil
}

// readBucketRows reads the bucket rows alone (no ledger, no orders).
func (r *reconciler) readBucketRows(ctx context.Context) error {
	rows, err := r.tx.Query(ctx, r.q(`SELECT bucket_no, total_stock, available_stock, allocated_stock
		FROM {s}.sku_inventory WHERE activity_id = $1 AND sku_id = $2 ORDER BY bucket_no`), r.s.Flow.Item.ActivityID, r.s.Flow.Item.SKUID)
	if err != nil {
		return fmt.Errorf("reconcile: buckets: %w", err)
	}
	r.rec.Buckets, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (BucketLine, error) {
		b := BucketLine{LedgerAllocated: -1, LiveOrders: -1}
		err := row.Scan(&b.Bucket, &b.Total, &b.Available, &b.Allocated)
		return b, err
	})
	if err != nil {
		return fmt.Errorf("reconcile: buckets: %w", err)
	}
	return nil
}

// readInFlight reads what may hold a unit at the front door without a
// live order while the service works, and the outbox's backlog. Each
// count goes through a partial index whose rows are the work in flight.
func (r *reconciler) readInFlight(ctx context.Context) error {
	var pending int64
	if err := r.tx.QueryRow(ctx, r.q(`SELECT count(*) FROM {s}.inventory_reservation
		WHERE status IN (0, 30) AND activity_id = $1 AND sku_id = $2`), r.s.Flow.Item.ActivityID, r.s.Flow.Item.SKUID).Scan(&pending); err != nil {
		return fmt.Errorf("reconcile: reservations in flight: %w", err)
	}
	c := r.rec.Counters
	c.InFlight = pending + int64(len(r.poisoned)) + max(r.orderQueued, 0)
	if r.s.InFlight != nil {
		c.InFlight += r.s.InFlight()
	}
	if r.s.UnknownPublishes != nil {
		c.InFlight += r.s.UnknownPublishes()
	}
	st, err := r.s.Flow.Outbox.Backlog(ctx, r.tx)
	if err != nil {
		return fmt.Errorf("reconcile: outbox: %w", err)
	}
	c.Outbox = st
	r.rec.add("outbox", "event not yet published", st.Pending+st.Sending+st.Retry, true)
	r.rec.add("outbox", "event DEAD in the outbox", st.Dead, false)
	return nil
}

// classifyCounters compares the front door's counters with the bucket
// rows. In bucket b, PostgreSQL's available plus the front door's drift
// minus the front door's available is the stock the front door holds for
// reservations without a live order, less the live orders it does not
// hold (Run's residual, summed). Work in flight explains the first, up to
// Counters.InFlight over all buckets; nothing explains the second.
func (r *reconciler) classifyCounters(c frontdoor.Counters) {
	rec := r.rec
	rec.Counters.FrontHeld = c.Held
	budget := rec.Counters.InFlight
	var front, pg int64
	for i := range rec.Buckets {
		b := &rec.Buckets[i]
		where := fmt.Sprintf("bucket %d", b.Bucket)
		if int(b.Bucket) < len(c.Available) {
			b.FrontAvailable = c.Available[b.Bucket]
		}
		if int(b.Bucket) < len(c.Drift) {
			b.FrontDrift = c.Drift[b.Bucket]
		}
		front += b.FrontAvailable - b.FrontDrift
		pg += b.Available + b.Allocated
		rec.add(where, "front-door drift (more stock than PostgreSQL, on purpose)", b.FrontDrift, true)
		rec.add(where, "total ≠ available + allocated", b.Total-b.Available-b.Allocated, false)
		switch d := b.Available + b.FrontDrift - b.FrontAvailable; {
		case d < 0:
			rec.add(where, "live order unknown to the front door", -d, false)
		case d > 0:
			explained := min(d, budget)
			budget -= explained
			rec.add(where, "held without a live order: reservation in flight (order or release on its way)", explained, true)
			rec.add(where, "held without a live order, beyond the reservations in flight (order message lost, release never applied, or a counter moved behind the ledger's back: Run names each reservation)", d-explained, false)
		}
	}
	rec.add("front door", "front-door units (available + held - drift) ≠ PostgreSQL's (available + allocated)", front+c.Held-pg, false)
}
