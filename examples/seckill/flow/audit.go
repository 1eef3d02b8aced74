package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

// Check is one line of the audit: an invariant of the design, checked
// against the database.
type Check struct {
	Invariant string `json:"invariant"` // the invariant's number in docs/design.md, "-" for the flow's own
	Name      string `json:"name"`
	Pass      bool   `json:"pass"`
	Detail    string `json:"detail"`
	// AtRest marks a check that is exact only when the flow is quiet
	// (nothing in flight: no event waiting for a relay, no message being
	// consumed); the others hold in every committed snapshot.
	AtRest bool `json:"at_rest"`
	// Skipped is set on an AtRest check that a live audit could not judge:
	// it did not hold while work was in flight, so it is reported with
	// Pass true and the work in flight in Detail, neither passed nor failed.
	Skipped bool `json:"skipped"`
}

// Passed reports whether every check passed (false for none). A Skipped
// check counts as passed.
func Passed(checks []Check) bool {
	for _, c := range checks {
		if !c.Pass {
			return false
		}
	}
	return len(checks) > 0
}

// AuditOptions say how an audit judges what it reads.
type AuditOptions struct {
	// Live says that the flow may be running (orders placed, paid and
	// cancelled, relays publishing): a check that is exact only at rest
	// (Check.AtRest) and does not hold is reported Skipped instead of
	// failing. The checks that hold in every committed snapshot are as
	// strict as at rest. The zero value is the audit at rest, after
	// draining: every check is judged.
	Live bool
}

// AtRest marks c as exact only at rest and, in a live audit whose
// inFlight (work under way that explains the difference: events waiting
// for a relay, messages not yet consumed) is positive, turns a failure
// into a skip: Pass true, Skipped true, and a Detail that says so. At rest
// (live false) c is returned as it is, failing or not.
func AtRest(c Check, live bool, inFlight int64) Check {
	c.AtRest = true
	if live && !c.Pass && inFlight > 0 {
		c.Pass, c.Skipped = true, true
		c.Detail = fmt.Sprintf("skipped while live: only exact at rest (%d in flight); now %s", inFlight, c.Detail)
	}
	return c
}

// Audit checks, at rest, the invariants of the design that the database
// alone can tell: one order per user, bucket and SKU conservation, the
// ledger, order states, no event left unpublished, and every state change
// with the event it promises (invariant 7). It reads only, in one
// read-only Repeatable Read transaction (one snapshot), and judges every
// check: run it when the flow is quiet (after draining). During a sale use
// [Service.AuditLive].
func (s *Service) Audit(ctx context.Context) ([]Check, error) {
	return s.audit(ctx, AuditOptions{})
}

// AuditLive is [Service.Audit] for a running flow: the same checks in one
// snapshot, and the ones that hold in every committed snapshot as strict,
// but a check exact only at rest that does not hold is reported Skipped
// (see [AuditOptions.Live]).
//
// Its cost follows the sale's pace, not its history. The first live audit
// of a Service reads the whole history; each later one reads the rows
// changed since the last one that passed (orders, reservations and
// payments by their updated_at, through BRIN indexes; the ledger from the
// inventory checkpoint's watermark, see [Service.CheckpointAudit]), and
// its details say so ("live: rows changed since …"). A change committed
// late, by a transaction that began before a live audit, is checked by the
// first live audit after it commits: the window's start never passes the
// start of a transaction still running. A failing live audit keeps its
// window, so the next one fails the same way until the damage is
// repaired. The global counts (allocated stock against live orders) are
// checked on what changed: each ALLOCATE and RELEASE row written since
// against its order, each changed order against its ledger rows, the
// buckets against the ledger's replay. Damage to history that changes no
// updated_at (an old order's event deleted by hand) is not seen live: the
// audit at rest ([Service.Audit]) and the reconciliation's counts find
// it. The window needs a role that can read other sessions' transaction
// starts in pg_stat_activity (superuser or pg_read_all_stats), and a
// single node: otherwise every live audit reads the whole history, and
// the first one logs why. At 1,000,000 orders of history a live audit
// after 100 new orders took 45 ms here, as at 10,000 (the audit at rest:
// 19 s and 0.15 s; BenchmarkAuditLiveHistory).
func (s *Service) AuditLive(ctx context.Context) ([]Check, error) {
	return s.audit(ctx, AuditOptions{Live: true})
}

func (s *Service) audit(ctx context.Context, opts AuditOptions) ([]Check, error) {
	if !opts.Live {
		return s.auditIn(ctx, opts, auditWindow{})
	}
	if s.live == nil {
		s.CheckpointAudit(ctx)
		return s.auditIn(ctx, opts, auditWindow{})
	}
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	through := s.checkpoint(ctx)
	w := auditWindow{since: s.live.since, ledgerFrom: s.live.ledgerFrom}
	var next time.Time
	if s.live.whole == "" {
		n, ok, why, err := s.nextWatermark(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			s.live.whole = why
			if s.log != nil {
				s.log.Warn("flow: every live audit reads the whole history", "why", why)
			}
		}
		next = n
	}
	checks, err := s.auditIn(ctx, opts, w)
	if err == nil && Passed(checks) && !next.IsZero() {
		if next.After(s.live.since) {
			s.live.since = next
		}
		s.live.ledgerFrom = max(s.live.ledgerFrom, through)
	}
	return checks, err
}

// auditIn runs the audit in its own read-only Repeatable Read transaction.
func (s *Service) auditIn(ctx context.Context, opts AuditOptions, w auditWindow) ([]Check, error) {
	var checks []Check
	err := pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		checks, err = s.auditTx(ctx, tx, opts, w)
		return err
	})
	return checks, err
}

// checkpointTimeout bounds [Service.CheckpointAudit]'s wait for the
// transactions writing the ledger.
const checkpointTimeout = 5 * time.Second

// CheckpointAudit moves the inventory audit checkpoint
// (inventory.Store.Checkpoint) before a live audit, so that the live
// audit's ledger replay (inventory.Store.AuditIncremental) reads only the
// ledger rows written since the previous one: its cost follows the sale's
// pace, not its history. It waits at most 5 seconds for the
// transactions writing the ledger; when it cannot move the checkpoint (a
// transaction left open, an error), it logs a warning and leaves the
// checkpoint where it was: the live audit stays exact, it replays more rows.
func (s *Service) CheckpointAudit(ctx context.Context) {
	s.checkpoint(ctx)
}

// checkpoint is CheckpointAudit; it returns the checkpoint's watermark
// (moved or not): every ledger row at or below it is committed.
func (s *Service) checkpoint(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	through, err := s.Inventory.Checkpoint(ctx, s.Pool)
	if err != nil && s.log != nil {
		s.log.Warn("flow: audit checkpoint not moved", "err", err)
	}
	return through
}

// ErrAuditSnapshot is returned by [Service.AuditTx] and
// [Service.ReconcileTx] for a transaction that is not Repeatable Read (or
// Serializable): its statements would each read a different moment.
var ErrAuditSnapshot = errors.New("flow: the transaction must be REPEATABLE READ or SERIALIZABLE (one snapshot)")

// oneSnapshot returns ErrAuditSnapshot unless tx reads one snapshot.
// SHOW takes no snapshot: the caller's first query still does.
func oneSnapshot(ctx context.Context, tx pgx.Tx) error {
	var iso string
	if err := tx.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&iso); err != nil {
		return fmt.Errorf("flow: transaction isolation: %w", err)
	}
	if iso != "repeatable read" && iso != "serializable" {
		return fmt.Errorf("%w: got %s", ErrAuditSnapshot, iso)
	}
	return nil
}

// AuditTx runs the audit's checks in tx, the caller's transaction, so that
// they and the caller's own reads see one snapshot: tx must be Repeatable
// Read or Serializable (ErrAuditSnapshot otherwise), and should be read-only;
// the audit writes nothing. The library audits it runs
// (inventory.Store.AuditAll, order.Store.Audit) read in tx too.
func (s *Service) AuditTx(ctx context.Context, tx pgx.Tx, opts AuditOptions) ([]Check, error) {
	return s.auditTx(ctx, tx, opts, auditWindow{})
}

// auditTx is AuditTx over the window w: everything when w.since is zero,
// else the rows changed since (see liveWindow).
func (s *Service) auditTx(ctx context.Context, tx pgx.Tx, opts AuditOptions, w auditWindow) ([]Check, error) {
	if err := oneSnapshot(ctx, tx); err != nil {
		return nil, err
	}
	a := &auditor{s: s, ctx: ctx, tx: tx, opts: opts, w: w}
	// The first statement takes the snapshot. The purge horizon is read
	// after it: PurgeHistory records its horizon before it deletes, so any
	// purge whose deletes this snapshot sees has its horizon read here.
	orders, dupOrders := a.orders()
	since := s.purgedBefore()
	if w.since.After(since) {
		since = w.since
	}
	a.checkOrdersAndBuckets(orders, dupOrders)
	live := a.checkLedger()
	a.checkReservations()
	a.checkAudits(live)
	a.checkOutbox()
	a.checkEvents(since)
	return a.checks, a.err
}

// orders counts the orders (changed since the window's start) and the
// (activity, sku, user) keys with more than one order (among the keys of
// those orders).
func (a *auditor) orders() (orders, dup int64) {
	if a.w.since.IsZero() {
		dup = a.count(`SELECT count(*) FROM (SELECT 1 FROM {s}.orders GROUP BY activity_id, sku_id, user_id HAVING count(*) > 1) d`)
		return a.count(`SELECT count(*) FROM {s}.orders`), dup
	}
	dup = a.count(`SELECT count(*) FROM (
		SELECT 1 FROM (SELECT DISTINCT activity_id, sku_id, user_id FROM {s}.orders WHERE updated_at >= $1) AS k
		JOIN {s}.orders AS x ON x.activity_id = k.activity_id AND x.sku_id = k.sku_id AND x.user_id = k.user_id
		GROUP BY k.activity_id, k.sku_id, k.user_id HAVING count(*) > 1) d`, a.w.since)
	return a.count(`SELECT count(*) FROM {s}.orders WHERE updated_at >= $1`, a.w.since), dup
}

// auditor collects one audit's checks; every read goes through tx, the
// one snapshot, and the first error is kept while the checks go on.
type auditor struct {
	s      *Service
	ctx    context.Context
	tx     pgx.Tx
	opts   AuditOptions
	w      auditWindow
	checks []Check
	err    error
}

// count runs a count(*)-like query; an error is kept and reads as 0.
func (a *auditor) count(sql string, args ...any) int64 {
	var n int64
	if err := a.tx.QueryRow(a.ctx, strings.ReplaceAll(sql, "{s}", pgx.Identifier{a.s.Schema}.Sanitize()), args...).Scan(&n); err != nil {
		a.keep(err)
	}
	return n
}

// keep records err if it is the first.
func (a *auditor) keep(err error) {
	if err != nil && a.err == nil {
		a.err = err
	}
}

// add records one check.
func (a *auditor) add(inv, name string, pass bool, detail string, args ...any) {
	a.checks = append(a.checks, Check{Invariant: inv, Name: name, Pass: pass, Detail: fmt.Sprintf(detail, args...)})
}

// checkOrdersAndBuckets checks invariants 1 and 2.
func (a *auditor) checkOrdersAndBuckets(orders, dupOrders int64) {
	s := a.s
	a.add("1", "one order per (activity, sku, user)", dupOrders == 0, "%d orders, %d duplicated keys%s", orders, dupOrders, a.w.scope())
	badBuckets := a.count(`SELECT count(*) FROM {s}.inventory_stock_row WHERE total_stock <> available_stock + allocated_stock OR available_stock < 0 OR allocated_stock < 0`)
	buckets := a.count(`SELECT count(*) FROM {s}.inventory_stock_row`)
	a.add("2", "per bucket: total = available + allocated, all >= 0", badBuckets == 0, "%d buckets, %d broken", buckets, badBuckets)

	total := a.count(`SELECT coalesce(sum(total_stock), 0) FROM {s}.inventory_stock_row WHERE activity_id = $1 AND sku_id = $2`, s.Item.ActivityID, s.Item.SKUID)
	a.add("2", "per SKU: sum of bucket totals = planned stock", total == int64(s.Item.Stock), "%d of %d planned", total, s.Item.Stock)
}

// checkLedger checks invariant 3's ledger rows; it returns the live orders
// (those changed since the window's start, in a window).
func (a *auditor) checkLedger() (live int64) {
	since := a.w.since // zero: every order (updated_at >= '0001-01-01')
	missingAlloc := a.count(`SELECT count(*) FROM {s}.orders o
		WHERE o.updated_at >= $1 AND o.status IN (10, 20, 30, 60) AND NOT EXISTS (
			SELECT 1 FROM {s}.inventory_ledger l WHERE l.idempotency_key = 'ALLOCATE:' || o.reservation_id::text AND l.order_id = o.order_id)`, since)
	live = a.count(`SELECT count(*) FROM {s}.orders WHERE updated_at >= $1 AND status IN (10, 20, 30, 60)`, since)
	a.add("3", "every live order has its ALLOCATE ledger row", missingAlloc == 0, "%d live orders, %d without%s", live, missingAlloc, a.w.scope())

	badRelease := a.count(`SELECT count(*) FROM {s}.orders o
		WHERE o.updated_at >= $1 AND (o.status = 40) <> EXISTS (SELECT 1 FROM {s}.inventory_ledger l WHERE l.idempotency_key = 'RELEASE:' || o.reservation_id::text)`, since)
	cancelled := a.count(`SELECT count(*) FROM {s}.orders WHERE updated_at >= $1 AND status = 40`, since)
	a.add("3", "every cancelled order has exactly one RELEASE row, no live order has one", badRelease == 0,
		"%d cancelled, %d mismatched (the idempotency key is unique: at most one row each)%s", cancelled, badRelease, a.w.scope())
	return live
}

// reservationMismatch is the condition under which a reservation r and
// the order o made from it (either side NULL when missing) disagree.
const reservationMismatch = `(r.status IN (10, 30, 40, 60) OR o.order_id IS NOT NULL)
		  AND (o.order_id IS DISTINCT FROM r.order_id
		       OR (r.status = 10) <> (o.status IN (10, 20, 30, 60))
		       OR (r.status IN (30, 40, 60)) <> (o.status = 40))`

// checkReservations checks that orders and reservations agree: a live
// order's reservation is ORDERED for it, a cancelled one's RELEASE_PENDING
// (front-door release in flight), RELEASED or MANUAL_REQUIRED (the release
// kept failing), and no reservation is ORDERED without its order (the
// fresh path inserts reservations as ORDERED, relying on its transaction
// to create the order too). In a window, the pairs where either side
// changed since its start.
func (a *auditor) checkReservations() {
	var badResv int64
	if a.w.since.IsZero() {
		badResv = a.count(`SELECT count(*) FROM {s}.inventory_reservation r
		FULL JOIN {s}.orders o ON o.reservation_id = r.reservation_id
		WHERE ` + reservationMismatch)
	} else {
		badResv = a.count(`SELECT count(*) FROM {s}.inventory_reservation r
		LEFT JOIN {s}.orders o ON o.reservation_id = r.reservation_id
		WHERE r.updated_at >= $1 AND `+reservationMismatch, a.w.since) +
			a.count(`SELECT count(*) FROM {s}.orders o
		LEFT JOIN {s}.inventory_reservation r ON r.reservation_id = o.reservation_id
		WHERE o.updated_at >= $1 AND (r.updated_at IS NULL OR r.updated_at < $1) AND `+reservationMismatch, a.w.since)
	}
	// RELEASE_PENDING is work in flight inside the database (the release
	// event waits for the front door): counted as such, never a mismatch.
	releasePending := a.count(`SELECT count(*) FROM {s}.inventory_reservation WHERE status = 30`)
	a.add("-", "each order's reservation is ORDERED (live) or RELEASE_PENDING/RELEASED/MANUAL_REQUIRED (cancelled) with its order id, and no other reservation is",
		badResv == 0, "%d mismatched (%d RELEASE_PENDING: front-door release in flight)%s", badResv, releasePending, a.w.scope())
}

// checkAudits runs the inventory and order packages' audits (invariants
// 3 and 4): live, the inventory's incremental audit.
func (a *auditor) checkAudits(live int64) {
	s := a.s
	// Live, the replay starts from the checkpoint (CheckpointAudit): its
	// cost follows the rows written since, not the sale's history. At rest
	// the whole ledger is replayed and every reservation checked.
	audit, how := s.Inventory.Audit, "inventory audit, whole ledger"
	if a.opts.Live {
		audit, how = s.Inventory.AuditIncremental, "inventory audit, incremental from the checkpoint"
	}
	invFindings, err := audit(a.ctx, a.tx, 0, 0)
	a.keep(err)
	a.add("3", "ledger replay reproduces each bucket's counters ("+how+")", len(invFindings) == 0, "%d findings%s", len(invFindings), firstFindings(lines(invFindings)))

	a.checkAllocated(live)

	paidCancelled := a.count(`SELECT count(*) FROM {s}.orders WHERE updated_at >= $1 AND status = 40 AND paid_at IS NOT NULL`, a.w.since)
	orderAudit, how := s.Orders.Audit, "order audit"
	if !a.w.since.IsZero() {
		orderAudit = func(ctx context.Context, q pgtx.Querier) ([]order.Finding, error) {
			return s.Orders.AuditSince(ctx, q, a.w.since)
		}
		how = "order audit since the window's start"
	}
	ordFindings, err := orderAudit(a.ctx, a.tx)
	a.keep(err)
	a.add("4", "no order both paid and cancelled; status timestamps match status ("+how+")", paidCancelled == 0 && len(ordFindings) == 0,
		"%d paid and cancelled, %d findings%s%s", paidCancelled, len(ordFindings), firstFindings(orderFindings(ordFindings)), a.w.scope())
}

// checkAllocated checks that the stock allocated is the live orders'. At
// rest, and in the first live audit, it counts both. In a window it checks
// the ledger rows written since the window's ledger watermark against
// their orders: each ALLOCATE row's order exists, on that reservation,
// and each RELEASE row's order is cancelled. With the replay (the
// buckets' counters are the ledger's sums) and the order-side checks of
// checkLedger on every changed order (a live order has its ALLOCATE row,
// a cancelled one its RELEASE row and no other has one), every unit
// allocated since is a live order's and every live order's unit is
// allocated: the equality the whole count checks, checked on what
// changed.
func (a *auditor) checkAllocated(live int64) {
	s := a.s
	if a.w.since.IsZero() {
		allocated := a.count(`SELECT coalesce(sum(allocated_stock), 0) FROM {s}.inventory_stock_row WHERE activity_id = $1 AND sku_id = $2`, s.Item.ActivityID, s.Item.SKUID)
		a.add("3", "allocated stock = live orders", allocated == live, "%d allocated, %d live orders", allocated, live)
		return
	}
	rows := a.count(`SELECT count(*) FROM {s}.inventory_ledger WHERE ledger_id > $1 AND ledger_type IN (10, 20)`, a.w.ledgerFrom)
	bad := a.count(`SELECT count(*) FROM {s}.inventory_ledger AS l
		LEFT JOIN {s}.orders AS o ON o.order_id = l.order_id
		WHERE l.ledger_id > $1 AND l.ledger_type IN (10, 20)
		  AND (o.order_id IS NULL OR o.reservation_id <> l.reservation_id OR l.ledger_type = 20 AND o.status <> 40)`, a.w.ledgerFrom)
	a.add("3", "allocated stock = live orders (live: each ALLOCATE and RELEASE row since the ledger watermark matches its order)", bad == 0,
		"%d ALLOCATE and RELEASE rows after ledger id %d, %d without their order's state%s", rows, a.w.ledgerFrom, bad, a.w.scope())
}

// checkOutbox checks invariant 5. A DEAD event is final (no relay tries it
// again): a failure at any moment. An event waiting for a relay is work in
// flight.
func (a *auditor) checkOutbox() {
	st, err := a.s.Outbox.Stats(a.ctx, a.tx)
	a.keep(err)
	a.add("5", "no outbox event dead", st.Dead == 0, "%d dead", st.Dead)
	unsent := st.Pending + st.Sending + st.Retry
	a.checks = append(a.checks, AtRest(Check{Invariant: "5", Name: "no outbox event left unpublished", Pass: unsent == 0,
		Detail: fmt.Sprintf("%d sent, %d pending, %d sending, %d retry", st.Sent, st.Pending, st.Sending, st.Retry)}, a.opts.Live, unsent))
}

// checkEvents checks invariant 7: every state change that promises an
// event has it in the outbox. The counts above cannot see a lost enqueue;
// these join the outbox to the state changes (by the events' dedup keys),
// in event_outbox and in event_outbox_history (where
// outbox.Store.ArchiveSent moves SENT events). They need the SENT events:
// archive them, or purge with Service.PurgeHistory, which records its
// horizon. After PurgeHistory, only the changes made since its horizon
// are checked: the events of older ones may have left with the history.
func (a *auditor) checkEvents(since time.Time) {
	scope := ""
	switch {
	case !a.w.since.IsZero() && !a.w.since.Before(since):
		scope = a.w.scope()
	case !since.IsZero():
		scope = fmt.Sprintf(" (changes since the last purge's horizon %s)", since.UTC().Format(time.RFC3339Nano))
	}
	for _, c := range eventChecks {
		missing := a.count(c.missing, since)
		changes := a.count(c.changes, since)
		a.add("7", c.name, missing == 0, "%d %s, %d without the event%s", changes, c.what, missing, scope)
	}
}

// eventChecks pair each state change with the event it promises: missing
// counts the changes without their event, changes counts them all, at or
// after $1. The updated_at bound is implied by the others (a row's
// updated_at is never before its created_at or paid_at): it lets the
// BRIN indexes read only the window. The
// same queries, returning the offending rows, are in the repository's
// testdata/events (the flow's tests run both).
var eventChecks = []struct{ name, what, changes, missing string }{
	{
		name: "event completeness: every live order has its ORDER_CREATED event", what: "live orders",
		changes: `SELECT count(*) FROM {s}.orders WHERE updated_at >= $1 AND status IN (10, 20, 30, 60) AND created_at >= $1`,
		missing: `SELECT count(*) FROM {s}.orders AS o WHERE o.updated_at >= $1 AND o.status IN (10, 20, 30, 60) AND o.created_at >= $1
			AND NOT EXISTS (SELECT 1 FROM {s}.event_outbox AS e WHERE e.dedup_key = 'ORDER_CREATED:' || o.order_id::text)
			AND NOT EXISTS (SELECT 1 FROM {s}.event_outbox_history AS e WHERE e.dedup_key = 'ORDER_CREATED:' || o.order_id::text)`,
	},
	{
		name: "event completeness: every paid order has its ORDER_PAID event", what: "paid orders",
		changes: `SELECT count(*) FROM {s}.orders WHERE updated_at >= $1 AND paid_at >= $1`,
		missing: `SELECT count(*) FROM {s}.orders AS o WHERE o.updated_at >= $1 AND o.paid_at >= $1
			AND NOT EXISTS (SELECT 1 FROM {s}.event_outbox AS e WHERE e.dedup_key = 'ORDER_PAID:' || o.order_id::text)
			AND NOT EXISTS (SELECT 1 FROM {s}.event_outbox_history AS e WHERE e.dedup_key = 'ORDER_PAID:' || o.order_id::text)`,
	},
	{
		name: "event completeness: every rejected, released (or release pending or escalated) or expired reservation has its FRONTDOOR_RELEASE event", what: "rejected, released or expired reservations",
		changes: `SELECT count(*) FROM {s}.inventory_reservation WHERE status IN (20, 30, 40, 50, 60) AND updated_at >= $1`,
		missing: `SELECT count(*) FROM {s}.inventory_reservation AS r WHERE r.status IN (20, 30, 40, 50, 60) AND r.updated_at >= $1
			AND NOT EXISTS (SELECT 1 FROM {s}.event_outbox AS e WHERE e.dedup_key = 'FRONTDOOR_RELEASE:' || r.reservation_id::text)
			AND NOT EXISTS (SELECT 1 FROM {s}.event_outbox_history AS e WHERE e.dedup_key = 'FRONTDOOR_RELEASE:' || r.reservation_id::text)`,
	},
	{
		name: "event completeness: every payment after a cancel has its REFUND_REQUESTED event", what: "payments after a cancel",
		changes: `SELECT count(*) FROM {s}.payment_record AS p JOIN {s}.orders AS o ON o.order_id = p.order_id
			WHERE p.updated_at >= $1 AND p.created_at >= $1 AND o.status = 40 AND p.status IN (40, 50)`,
		missing: `SELECT count(*) FROM {s}.payment_record AS p JOIN {s}.orders AS o ON o.order_id = p.order_id
			WHERE p.updated_at >= $1 AND p.created_at >= $1 AND o.status = 40 AND p.status IN (40, 50)
			AND NOT EXISTS (SELECT 1 FROM {s}.event_outbox AS e WHERE e.dedup_key = 'REFUND_REQUESTED:' || p.payment_id::text)
			AND NOT EXISTS (SELECT 1 FROM {s}.event_outbox_history AS e WHERE e.dedup_key = 'REFUND_REQUESTED:' || p.payment_id::text)`,
	},
}

// orderFinding prints an order finding: kind, order and detail.
type orderFinding order.Finding

func (f orderFinding) String() string {
	return fmt.Sprintf("%s order=%d %s", f.Kind, f.OrderID, f.Detail)
}

func orderFindings(fs []order.Finding) []orderFinding {
	out := make([]orderFinding, len(fs))
	for i, f := range fs {
		out[i] = orderFinding(f)
	}
	return out
}

func firstFindings[T fmt.Stringer](fs []T) string {
	if len(fs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(": ")
	for i, f := range fs {
		if i == 3 {
			fmt.Fprintf(&b, " … (%d more)", len(fs)-3)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.String())
	}
	return b.String()
}

// invFinding renders an inventory finding on one line.
type invFinding inventory.Finding

func (f invFinding) String() string {
	s := fmt.Sprintf("%s: activity %d sku %d", f.Kind, f.ActivityID, f.SKUID)
	if f.Bucket >= 0 {
		s += fmt.Sprintf(" bucket %d", f.Bucket)
	}
	if f.ReservationID != uuid.Nil {
		s += " reservation " + f.ReservationID.String()
	}
	return s + fmt.Sprintf(": expected %d, actual %d", f.Expected, f.Actual)
}

// lines gives inventory findings their one-line String.
func lines(fs []inventory.Finding) []invFinding {
	out := make([]invFinding, len(fs))
	for i, f := range fs {
		out[i] = invFinding(f)
	}
	return out
}
