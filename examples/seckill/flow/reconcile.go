package flow

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
)

// Reconciliation is the three reconciliation reports (orders by status,
// ledger by type, events by status) for the item on
// sale, read in one Repeatable Read snapshot, and the differences between
// them, each classified.
type Reconciliation struct {
	Orders []order.StatusQuantity   `json:"orders"`
	Ledger []inventory.TypeQuantity `json:"ledger"`
	Events []outbox.TagStatusCount  `json:"events"`
	// ReleasePending counts the reservations whose front-door release is
	// in flight (RELEASE_PENDING); ManualRequired those whose release kept
	// failing and that wait for a human (MANUAL_REQUIRED).
	ReleasePending int64        `json:"release_pending"`
	ManualRequired int64        `json:"manual_required"`
	Differences    []Difference `json:"differences"`
	// From and To bound the cohort of [Service.ReconcileWindow] (orders
	// created at or after From and before To); zero for the whole history.
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
}

// Difference compares one quantity of a report with the quantity another
// report implies. Class is "match" when they agree, otherwise the name of
// what the gap means.
type Difference struct {
	Name     string `json:"name"`
	Have     int64  `json:"have"`     // what the first report holds
	Expected int64  `json:"expected"` // what the other implies
	Class    string `json:"class"`
}

// Classes of a Difference.
const (
	ClassMatch              = "match"
	ClassStockWithoutOrder  = "stock held without a live order"
	ClassOrderWithoutStock  = "live order without allocated stock"
	ClassCancelNoRelease    = "cancellation without its release"
	ClassReleaseNoCancel    = "release without a cancellation"
	ClassEventsMissing      = "events missing (lost enqueue)"
	ClassEventsWithoutState = "events without their state change"
	ClassReleaseInFlight    = "front-door release not yet applied"
	ClassManualRequired     = "front-door release kept failing: needs a human"
)

// Reconcile reads the three reports (orders by status, ledger by type,
// events by status) in one read-only Repeatable Read transaction (one
// snapshot) and classifies the differences: allocated stock
// (ALLOCATE - RELEASE) against live orders, releases against
// cancellations, and each event tag against the state changes that imply
// it; reservations whose front-door release is in flight (RELEASE_PENDING)
// or needs a human (MANUAL_REQUIRED) are named too. A difference is named,
// never repaired. Every comparison holds in any committed snapshot (each
// state change commits with its ledger row and its event; a release the
// front door has yet to apply is RELEASE_PENDING, named as in flight), so
// it is as exact during a sale as at rest.
func (s *Service) Reconcile(ctx context.Context) (Reconciliation, error) {
	var rec Reconciliation
	err := pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		rec, err = s.ReconcileTx(ctx, tx)
		return err
	})
	return rec, err
}

// ReconcileTx is [Service.Reconcile] in tx, the caller's transaction, so
// that the reports and the caller's own reads see one snapshot: tx must be
// Repeatable Read or Serializable (ErrAuditSnapshot otherwise) and should
// be read-only.
func (s *Service) ReconcileTx(ctx context.Context, tx pgx.Tx) (Reconciliation, error) {
	var rec Reconciliation
	if err := oneSnapshot(ctx, tx); err != nil {
		return rec, err
	}
	var err error
	if rec.Orders, err = s.Orders.QuantitiesByStatus(ctx, tx, s.Item.ActivityID, s.Item.SKUID); err != nil {
		return rec, err
	}
	if rec.Ledger, err = s.Inventory.LedgerByType(ctx, tx, s.Item.ActivityID, s.Item.SKUID); err != nil {
		return rec, err
	}
	if rec.Events, err = s.Outbox.EventsByStatus(ctx, tx, EventTopic); err != nil {
		return rec, err
	}
	implied := map[string]int64{}
	q := strings.NewReplacer("{s}", pgx.Identifier{s.Schema}.Sanitize())
	for tag, sql := range map[string]string{
		TagOrderCreated:     `SELECT count(*) FROM {s}.orders`,
		TagOrderPaid:        `SELECT count(*) FROM {s}.orders WHERE paid_at IS NOT NULL`,
		TagFrontDoorRelease: `SELECT count(*) FROM {s}.inventory_reservation WHERE status IN (20, 30, 40, 50, 60)`,
		TagRefundRequested: `SELECT count(*) FROM {s}.payment_record AS p JOIN {s}.orders AS o USING (order_id)
			WHERE o.status = 40 AND p.status IN (40, 50)`,
	} {
		var n int64
		if err := tx.QueryRow(ctx, q.Replace(sql)).Scan(&n); err != nil {
			return rec, fmt.Errorf("flow: reconcile %s: %w", tag, err)
		}
		implied[tag] = n
	}
	if err := tx.QueryRow(ctx, q.Replace(`SELECT count(*) FILTER (WHERE status = 30), count(*) FILTER (WHERE status = 60)
		FROM {s}.inventory_reservation WHERE activity_id = $1 AND sku_id = $2`), s.Item.ActivityID, s.Item.SKUID).
		Scan(&rec.ReleasePending, &rec.ManualRequired); err != nil {
		return rec, fmt.Errorf("flow: reconcile reservations: %w", err)
	}
	rec.Differences = classify(rec, implied)
	return rec, nil
}

func classify(rec Reconciliation, implied map[string]int64) []Difference {
	var live, cancelled int64
	for _, o := range rec.Orders {
		switch o.Status {
		case order.StatusCreated, order.StatusPaying, order.StatusPaid, order.StatusRefundPending:
			live += o.Quantity
		case order.StatusCancelled:
			cancelled += o.Quantity
		}
	}
	var allocated, released int64
	for _, l := range rec.Ledger {
		switch l.Type {
		case "ALLOCATE":
			allocated += l.Quantity
		case "RELEASE":
			released += l.Quantity
		}
	}
	diff := func(name string, have, expected int64, over, under string) Difference {
		d := Difference{Name: name, Have: have, Expected: expected, Class: ClassMatch}
		switch {
		case have > expected:
			d.Class = over
		case have < expected:
			d.Class = under
		}
		return d
	}
	out := []Difference{
		diff("allocated stock (ALLOCATE - RELEASE) vs live orders", allocated-released, live, ClassStockWithoutOrder, ClassOrderWithoutStock),
		diff("released stock (RELEASE) vs cancelled orders", released, cancelled, ClassReleaseNoCancel, ClassCancelNoRelease),
	}
	events := map[string]int64{}
	for _, e := range rec.Events {
		events[e.Tag] += e.Events
	}
	for _, tag := range []string{TagOrderCreated, TagOrderPaid, TagFrontDoorRelease, TagRefundRequested} {
		out = append(out, diff(tag+" events vs the state changes that imply them", events[tag], implied[tag], ClassEventsWithoutState, ClassEventsMissing))
	}
	out = append(out,
		diff("reservations RELEASE_PENDING", rec.ReleasePending, 0, ClassReleaseInFlight, ClassMatch),
		diff("reservations MANUAL_REQUIRED", rec.ManualRequired, 0, ClassManualRequired, ClassMatch))
	return out
}

// String prints the reconciliation as the example shows it.
func (r Reconciliation) String() string {
	var b strings.Builder
	if !r.To.IsZero() {
		fmt.Fprintf(&b, "window: orders created from %s to %s\n", r.From.UTC().Format(time.RFC3339Nano), r.To.UTC().Format(time.RFC3339Nano))
	}
	b.WriteString("orders by status:\n")
	for _, o := range r.Orders {
		fmt.Fprintf(&b, "  %-15s %6d orders  %6d units  %10d amount\n", o.Status, o.Orders, o.Quantity, o.Amount)
	}
	b.WriteString("ledger by type:\n")
	for _, l := range r.Ledger {
		fmt.Fprintf(&b, "  %-15s %6d rows    %6d units\n", l.Type, l.Rows, l.Quantity)
	}
	b.WriteString("events by status:\n")
	for _, e := range r.Events {
		fmt.Fprintf(&b, "  %-20s %-8s %6d\n", e.Tag, e.Status, e.Events)
	}
	b.WriteString("differences:\n")
	for _, d := range r.Differences {
		fmt.Fprintf(&b, "  %-62s %6d vs %6d  %s\n", d.Name, d.Have, d.Expected, d.Class)
	}
	return b.String()
}
