package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/frontdoor"
)

// HeldManualRequired is the class of a reservation the front door still
// holds because it refused the release too often.
const HeldManualRequired = "held: the front door refused its release too often, reservation MANUAL_REQUIRED (needs a human)"

// Difference is one named finding of the reconciliation.
type Difference struct {
	Where     string `json:"where"`
	Class     string `json:"class"`
	Count     int64  `json:"count"`
	Explained bool   `json:"explained"`
}

// BucketLine is one bucket in the three tables.
type BucketLine struct {
	Bucket          int16 `json:"bucket"`
	FrontAvailable  int64 `json:"front_available"`
	FrontHeld       int64 `json:"front_held"`
	FrontDrift      int64 `json:"front_drift"`
	Total           int64 `json:"pg_total"`
	Available       int64 `json:"pg_available"`
	Allocated       int64 `json:"pg_allocated"`
	LedgerAllocated int64 `json:"ledger_allocated"` // -1: not read (RunWindow)
	LiveOrders      int64 `json:"live_orders"`      // -1: not read (RunWindow)
}

// EventLine is one event type across outbox, stream and consumer.
type EventLine struct {
	Tag             string `json:"tag"`
	Pending         int64  `json:"outbox_waiting"` // PENDING, SENDING or RETRY
	Sent            int64  `json:"outbox_sent"`
	Dead            int64  `json:"outbox_dead"`
	Stream          int64  `json:"stream"`   // messages in the stream (memory: distinct events published)
	Consumed        int64  `json:"consumed"` // inbox rows of its consumer group (-1: nobody consumes it)
	ConsumerPending int64  `json:"consumer_pending"`
	Redelivering    int64  `json:"redelivering"` // the consumer's messages waiting for a redelivery now
	Poison          int64  `json:"poison"`
}

// Result is a reconciliation: the three tables (buckets, events, order
// messages), PostgreSQL's counts and reports, and every difference found.
type Result struct {
	Buckets        []BucketLine     `json:"buckets"`
	OrdersByStatus map[string]int64 `json:"orders_by_status"`
	LedgerByType   map[string]int64 `json:"ledger_by_type"`
	Events         []EventLine      `json:"events"`
	OrderMessages  struct {
		Stored      int64 `json:"stored"`   // by the broker (JetStream: stream sequences since start-up)
		Consumed    int64 `json:"consumed"` // inbox rows of the order consumer group
		Poison      int64 `json:"poison"`
		Queued      int64 `json:"queued"`
		Redelivered int64 `json:"redelivered"` // deliveries after the first, since start-up
	} `json:"order_messages"`
	// Reports are the three reconciliation reports (orders
	// by status, ledger by type, events by status) read in one snapshot,
	// with their differences classified (flow.Service.Reconcile). Every
	// difference but a release in flight is unexplained.
	Reports *flow.Reconciliation `json:"reports"`
	// Windows are [RunWindow]'s reports, one per window (Reports, the
	// whole history's, is nil then), and Counters what it read instead
	// of the rows Run reads; both nil for Run.
	Windows     []flow.Reconciliation `json:"windows,omitempty"`
	Counters    *Counters             `json:"counters,omitempty"`
	Differences []Difference          `json:"differences"`
}

// Passed reports whether every difference is explained.
func (r *Result) Passed() bool {
	for _, d := range r.Differences {
		if !d.Explained {
			return false
		}
	}
	return true
}

func (r *Result) add(where, class string, n int64, explained bool) {
	if n != 0 {
		r.Differences = append(r.Differences, Difference{Where: where, Class: class, Count: n, Explained: explained})
	}
}

// Sources are the three stores a reconciliation reads, and what the
// service knows of the work in flight.
type Sources struct {
	// Flow is PostgreSQL: the schema, the item on sale and the flow's
	// three reconciliation reports.
	Flow *flow.Service
	// Queue is the order broker; JetStream is the same broker when it is
	// JetStream (nil with -stack memory).
	Queue     broker.Broker
	JetStream *broker.JetStream
	// Front is the front door.
	Front frontdoor.Door
	// UnknownPublish reports whether the publish of a reservation's order
	// message had no definite answer (the message may be in the broker).
	UnknownPublish func(reservation uuid.UUID) bool
	// InFlight is the number of clicks between the front door and the
	// broker now.
	InFlight func() int64
	// UnknownPublishes is how many order messages' publishes had no
	// definite answer (nil: none), for RunWindow, which counts instead of
	// asking UnknownPublish of each reservation.
	UnknownPublishes func() int64
	// PublishedTag is how many distinct events of tag were published, for
	// the in-memory broker that keeps no stream.
	PublishedTag func(tag string) int64
}

// Run reads the three stores and classifies every difference. All
// that PostgreSQL holds is read in one snapshot (one read-only Repeatable
// Read transaction); the broker is read before it and the front door
// after it, so what moves between the reads moves forward. Exact when the
// service is quiet; during a sale, in-flight work shows as explained
// differences.
func Run(ctx context.Context, s Sources) (*Result, error) {
	r := &reconciler{s: s, rec: &Result{OrdersByStatus: map[string]int64{}, LedgerByType: map[string]int64{}}}
	end, err := r.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	for _, step := range []func(context.Context) error{
		r.readBuckets, r.readReservations, r.readPoison, r.classifyReports, r.readCounts,
		r.readFrontDoor, r.classifyHeld, r.classifyBuckets, r.classifyEvents, r.classifyOrderMessages,
	} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return r.rec, nil
}

// begin reads the broker, then opens the snapshot every PostgreSQL read
// of the run goes through (one read-only Repeatable Read transaction,
// taken by its first query); the front door is read after it. What moves
// between the reads moves forward: consumed, then decided, then applied.
// end rolls the snapshot back.
func (r *reconciler) begin(ctx context.Context) (end func(), err error) {
	if r.s.JetStream != nil {
		if r.js, err = r.s.JetStream.State(ctx); err != nil {
			return nil, fmt.Errorf("reconcile: jetstream: %w", err)
		}
	}
	r.orderQueued = r.s.Queue.Pending(ctx)
	tx, err := r.s.Flow.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	r.tx = tx
	return func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }, nil
}

// reconciler holds one reconciliation's reads while its steps classify
// them. Every PostgreSQL read goes through tx, the one snapshot.
type reconciler struct {
	s           Sources
	tx          pgx.Tx
	rec         *Result
	js          broker.StreamState // the broker, read first
	orderQueued int64              // order messages the queue still holds
	front       frontdoor.State    // the front door, read last

	pg             map[uuid.UUID]resvState // reservations by id
	poisoned       map[uuid.UUID]bool      // reservations of poison order messages
	poisonByStream map[string]int64
	pb             map[int16]*perBucket
	releases       *bool // releasesInFlight, once read
}

// resvState is a reservation as PostgreSQL holds it, with its order's and
// its release event's state.
type resvState struct {
	bucket      int16
	status      int16
	live        bool
	eventStatus *int16
}

// perBucket counts the front door's reservations that PostgreSQL
// disagrees with, per bucket.
type perBucket struct{ heldNotLive, liveNotHeld int64 }

// q puts the service's schema into sql.
func (r *reconciler) q(sql string) string {
	return strings.ReplaceAll(sql, "{s}", pgx.Identifier{r.s.Flow.Schema}.Sanitize())
}

// consumerOf is the broker's state of a durable consumer (zero without it).
func (r *reconciler) consumerOf(durable string) broker.ConsumerState {
	for _, c := range r.js.Consumers {
		if c.Durable == durable {
			return c
		}
	}
	return broker.ConsumerState{}
}

// bucket is the per-bucket tally of b.
func (r *reconciler) bucket(b int16) *perBucket {
	if r.pb == nil {
		r.pb = map[int16]*perBucket{}
	}
	if r.pb[b] == nil {
		r.pb[b] = &perBucket{}
	}
	return r.pb[b]
}

// readBuckets reads the buckets with their ledger and live orders.
func (r *reconciler) readBuckets(ctx context.Context) error {
	rows, err := r.tx.Query(ctx, r.q(`SELECT b.bucket_no, b.total_stock, b.available_stock, b.allocated_stock,
			coalesce(l.allocated, 0), coalesce(o.live, 0)
		FROM {s}.sku_inventory b
		LEFT JOIN (SELECT inventory_bucket, sum(allocated_delta) AS allocated FROM {s}.inventory_ledger
			WHERE activity_id = $1 AND sku_id = $2 GROUP BY 1) l ON l.inventory_bucket = b.bucket_no
		LEFT JOIN (SELECT inventory_bucket, count(*) AS live FROM {s}.orders
			WHERE activity_id = $1 AND sku_id = $2 AND status IN (10, 20, 30, 60) GROUP BY 1) o ON o.inventory_bucket = b.bucket_no
		WHERE b.activity_id = $1 AND b.sku_id = $2 ORDER BY b.bucket_no`), r.s.Flow.Item.ActivityID, r.s.Flow.Item.SKUID)
	if err != nil {
		return fmt.Errorf("reconcile: buckets: %w", err)
	}
	r.rec.Buckets, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (BucketLine, error) {
		var b BucketLine
		err := row.Scan(&b.Bucket, &b.Total, &b.Available, &b.Allocated, &b.LedgerAllocated, &b.LiveOrders)
		return b, err
	})
	if err != nil {
		return fmt.Errorf("reconcile: buckets: %w", err)
	}
	return nil
}

// readReservations reads the reservations: their state, their order's,
// their release event's.
func (r *reconciler) readReservations(ctx context.Context) error {
	r.pg = map[uuid.UUID]resvState{}
	rows, err := r.tx.Query(ctx, r.q(`SELECT r.reservation_id, r.inventory_bucket, r.status,
			coalesce(o.status IN (10, 20, 30, 60), false), e.status
		FROM {s}.inventory_reservation r
		LEFT JOIN {s}.orders o ON o.reservation_id = r.reservation_id
		LEFT JOIN (SELECT DISTINCT ON (aggregate_id) aggregate_id, status FROM {s}.event_outbox
			WHERE tag = 'FRONTDOOR_RELEASE' ORDER BY aggregate_id, status) e ON e.aggregate_id = r.reservation_id::text
		WHERE r.activity_id = $1 AND r.sku_id = $2`), r.s.Flow.Item.ActivityID, r.s.Flow.Item.SKUID)
	if err != nil {
		return fmt.Errorf("reconcile: reservations: %w", err)
	}
	for rows.Next() {
		var id uuid.UUID
		var st resvState
		if err := rows.Scan(&id, &st.bucket, &st.status, &st.live, &st.eventStatus); err != nil {
			rows.Close()
			return fmt.Errorf("reconcile: reservations: %w", err)
		}
		r.pg[id] = st
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reconcile: reservations: %w", err)
	}
	return nil
}

// readPoison reads the poison messages recorded for review.
func (r *reconciler) readPoison(ctx context.Context) error {
	r.poisoned, r.poisonByStream = map[uuid.UUID]bool{}, map[string]int64{}
	rows, err := r.tx.Query(ctx, r.q(`SELECT stream, body FROM {s}.poison_message`))
	if err != nil {
		return fmt.Errorf("reconcile: poison messages: %w", err)
	}
	for rows.Next() {
		var stream string
		var body []byte
		if err := rows.Scan(&stream, &body); err != nil {
			rows.Close()
			return err
		}
		r.poisonByStream[stream]++
		var m flow.OrderMessage
		if json.Unmarshal(body, &m) == nil && m.ReservationID != uuid.Nil {
			r.poisoned[m.ReservationID] = true
		}
	}
	return rows.Err()
}

// classifyReports reads the flow's three reports in the same snapshot.
// A RELEASE_PENDING reservation is explained while a release is in
// flight: its event waits in the outbox, or in the consumer.
func (r *reconciler) classifyReports(ctx context.Context) error {
	reports, err := r.s.Flow.ReconcileTx(ctx, r.tx)
	if err != nil {
		return fmt.Errorf("reconcile: reports: %w", err)
	}
	r.rec.Reports = &reports
	return r.classifyFlowReports(ctx, reports, "reports: ")
}

// classifyFlowReports adds the differences of one set of reports (the
// whole history's, or a window's), each named with prefix.
func (r *reconciler) classifyFlowReports(ctx context.Context, reports flow.Reconciliation, prefix string) error {
	inFlight, err := r.releasesInFlight(ctx)
	if err != nil {
		return err
	}
	for _, d := range reports.Differences {
		switch {
		case d.Class == flow.ClassMatch:
		case d.Class == flow.ClassReleaseInFlight && !inFlight:
			r.rec.add(prefix+d.Name, "RELEASE_PENDING with no release in flight (release never recorded as applied)", d.Have-d.Expected, false)
		default:
			r.rec.add(prefix+d.Name, d.Class, d.Have-d.Expected, d.Class == flow.ClassReleaseInFlight)
		}
	}
	return nil
}

// releasesInFlight reports whether a front-door release is on its way: its
// event waits in the outbox (PENDING or RETRY through the ready index,
// SENDING through the stale-sending one), or in the consumer.
func (r *reconciler) releasesInFlight(ctx context.Context) (bool, error) {
	if r.releases != nil {
		return *r.releases, nil
	}
	var waiting bool
	if err := r.tx.QueryRow(ctx, r.q(`SELECT EXISTS (SELECT FROM {s}.event_outbox WHERE status IN (0, 30) AND tag = 'FRONTDOOR_RELEASE')
			OR EXISTS (SELECT FROM {s}.event_outbox WHERE status = 10 AND tag = 'FRONTDOOR_RELEASE')`)).Scan(&waiting); err != nil {
		return false, fmt.Errorf("reconcile: outbox: %w", err)
	}
	rc := r.consumerOf("frontdoor-release")
	inFlight := waiting || (r.s.JetStream != nil && rc.Pending+rc.AckPending > 0)
	r.releases = &inFlight
	return inFlight, nil
}

// readCounts reads the orders by status and the ledger by type, and
// compares them.
func (r *reconciler) readCounts(ctx context.Context) error {
	rec := r.rec
	for _, x := range []struct {
		sql string
		dst map[string]int64
	}{
		{`SELECT CASE status WHEN 10 THEN 'CREATED' WHEN 20 THEN 'PAYING' WHEN 30 THEN 'PAID' WHEN 40 THEN 'CANCELLED'
			WHEN 50 THEN 'CLOSED' WHEN 60 THEN 'REFUND_PENDING' ELSE status::text END, count(*) FROM {s}.orders GROUP BY 1`, rec.OrdersByStatus},
		{`SELECT CASE ledger_type WHEN 10 THEN 'ALLOCATE' WHEN 20 THEN 'RELEASE' WHEN 30 THEN 'ADJUST' WHEN 40 THEN 'PROVISION' ELSE ledger_type::text END,
			sum(abs(allocated_delta) + CASE WHEN ledger_type IN (30, 40) THEN abs(available_delta) ELSE 0 END)
			FROM {s}.inventory_ledger GROUP BY 1`, rec.LedgerByType},
	} {
		if err := r.readCount(ctx, x.sql, x.dst); err != nil {
			return err
		}
	}
	live := rec.OrdersByStatus["CREATED"] + rec.OrdersByStatus["PAYING"] + rec.OrdersByStatus["PAID"] + rec.OrdersByStatus["REFUND_PENDING"]
	rec.add("orders vs ledger", "live orders ≠ units ALLOCATEd − RELEASEd", live-(rec.LedgerByType["ALLOCATE"]-rec.LedgerByType["RELEASE"]), false)
	rec.add("orders vs ledger", "cancelled orders ≠ units RELEASEd", rec.OrdersByStatus["CANCELLED"]-rec.LedgerByType["RELEASE"], false)
	return nil
}

// readCount reads sql's (name, count) rows into dst.
func (r *reconciler) readCount(ctx context.Context, sql string, dst map[string]int64) error {
	rows, err := r.tx.Query(ctx, r.q(sql))
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			rows.Close()
			return err
		}
		dst[k] = n
	}
	return rows.Err()
}

// readFrontDoor reads the front door, last.
func (r *reconciler) readFrontDoor(ctx context.Context) error {
	front, err := r.s.Front.State(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: front door: %w", err)
	}
	r.front = front
	return nil
}

// classifyHeld classifies every reservation the front door holds that
// PostgreSQL has no live order for, and every live order the front door
// does not hold.
func (r *reconciler) classifyHeld(context.Context) error {
	for id, b := range r.front.Held {
		st, ok := r.pg[id]
		if ok && st.live {
			continue
		}
		r.bucket(b).heldNotLive++
		class, explained := r.heldClass(id, ok, st)
		r.rec.add(fmt.Sprintf("bucket %d", b), class, 1, explained)
	}
	for id, st := range r.pg {
		if _, held := r.front.Held[id]; st.live && !held {
			r.bucket(st.bucket).liveNotHeld++
			r.rec.add(fmt.Sprintf("bucket %d", st.bucket), "live order unknown to the front door", 1, false)
		}
	}
	return nil
}

// heldClass names why the front door holds reservation id without a live
// order (known says whether PostgreSQL has the reservation, as st).
func (r *reconciler) heldClass(id uuid.UUID, known bool, st resvState) (string, bool) {
	s := r.s
	switch {
	case !known && r.poisoned[id]:
		return "held for a poison message (recorded for review)", true
	case !known && s.UnknownPublish(id):
		return "held: the order message's publish got no definite answer", true
	case !known && s.InFlight() > 0:
		return "held: click in flight (order message being published)", true
	case !known && r.orderQueued > 0:
		return "held: order message not yet consumed", true
	case !known:
		return "held in the front door, unknown to PostgreSQL (order message lost)", false
	case st.status == 0:
		return "held: order transaction in progress", true
	case st.status == 60:
		return HeldManualRequired, false
	case st.eventStatus == nil:
		return "held, but PostgreSQL gave it back without a release event", false
	case *st.eventStatus == 40:
		return "held: its release event is DEAD in the outbox", false
	case *st.eventStatus != 20:
		return "held: release event not yet published (or being tried again)", true
	}
	if rc := r.consumerOf("frontdoor-release"); s.JetStream != nil && rc.Pending+rc.AckPending > 0 {
		return "held: release not yet applied (message not yet consumed)", true
	}
	return "held: release published but never applied", false
}

// classifyBuckets compares each bucket across the front door, the bucket
// row, the ledger and the live orders.
func (r *reconciler) classifyBuckets(context.Context) error {
	front := r.front
	for i := range r.rec.Buckets {
		b := &r.rec.Buckets[i]
		where := fmt.Sprintf("bucket %d", b.Bucket)
		if int(b.Bucket) < len(front.Available) {
			b.FrontAvailable = front.Available[b.Bucket]
		}
		if int(b.Bucket) < len(front.Drift) {
			b.FrontDrift = front.Drift[b.Bucket]
		}
		for _, hb := range front.Held {
			if hb == b.Bucket {
				b.FrontHeld++
			}
		}
		x := r.bucket(b.Bucket)
		r.rec.add(where, "front-door drift (more stock than PostgreSQL, on purpose)", b.FrontDrift, true)
		residual := b.FrontAvailable - b.Available - b.FrontDrift + x.heldNotLive - x.liveNotHeld
		r.rec.add(where, "front-door counter drift, unexplained", residual, false)
		r.rec.add(where, "PostgreSQL allocated ≠ ledger", b.Allocated-b.LedgerAllocated, false)
		r.rec.add(where, "PostgreSQL allocated ≠ live orders", b.Allocated-b.LiveOrders, false)
		r.rec.add(where, "total ≠ available + allocated", b.Total-b.Available-b.Allocated, false)
	}
	return nil
}

// classifyEvents compares the outbox by status with the stream and the
// consumers.
func (r *reconciler) classifyEvents(ctx context.Context) error {
	rows, err := r.tx.Query(ctx, r.q(`SELECT coalesce(tag, ''), count(*) FILTER (WHERE status IN (0, 10, 30)),
		count(*) FILTER (WHERE status = 20), count(*) FILTER (WHERE status = 40) FROM {s}.event_outbox GROUP BY 1 ORDER BY 1`))
	if err != nil {
		return fmt.Errorf("reconcile: outbox: %w", err)
	}
	r.rec.Events, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventLine, error) {
		var e EventLine
		err := row.Scan(&e.Tag, &e.Pending, &e.Sent, &e.Dead)
		return e, err
	})
	if err != nil {
		return fmt.Errorf("reconcile: outbox: %w", err)
	}
	for i := range r.rec.Events {
		if err := r.classifyEvent(ctx, &r.rec.Events[i]); err != nil {
			return err
		}
	}
	return nil
}

// classifyEvent compares the events of one tag.
func (r *reconciler) classifyEvent(ctx context.Context, e *EventLine) error {
	rec, s := r.rec, r.s
	where := "events " + e.Tag
	rec.add(where, "event not yet published", e.Pending, true)
	rec.add(where, "event DEAD in the outbox", e.Dead, false)
	if s.JetStream == nil {
		e.Stream, e.Consumed = s.PublishedTag(e.Tag), -1
		rec.add(where, "event marked SENT but never published", e.Sent-e.Stream, false)
		return nil
	}
	e.Stream = int64(r.js.EventsBySubject[e.Tag])
	const overPublished = "stream holds more events than the outbox sent (published under a new Nats-Msg-Id or past the duplicate window)"
	switch d := e.Stream - e.Sent; {
	case d < 0:
		rec.add(where, "event marked SENT but missing from the stream", -d, false)
	case d > 0 && e.Pending > 0:
		rec.add(where, "events in the stream not yet marked SENT (PubAck lost, republish pending)", min(d, e.Pending), true)
		rec.add(where, overPublished, max(d-e.Pending, 0), false)
	case d > 0:
		rec.add(where, overPublished, d, false)
	}
	ec := -1
	for i := range broker.EventConsumers {
		if broker.EventConsumers[i].Tag == e.Tag {
			ec = i
		}
	}
	if ec < 0 {
		e.Consumed = -1
		return nil
	}
	if err := r.tx.QueryRow(ctx, r.q(`SELECT count(*) FROM {s}.consumer_inbox WHERE consumer_group = $1`), broker.EventConsumers[ec].Group).Scan(&e.Consumed); err != nil {
		return fmt.Errorf("reconcile: inbox: %w", err)
	}
	c := r.consumerOf(broker.EventConsumers[ec].Durable)
	e.ConsumerPending, e.Redelivering = int64(c.Pending+c.AckPending), int64(c.Redelivered)
	e.Poison = poisonPerTag(ctx, r.tx, s.Flow.Schema, e.Tag)
	rec.add(where, "poison message (recorded for review)", e.Poison, true)
	missing := e.Stream - e.Consumed - e.Poison
	switch {
	case missing > 0 && e.ConsumerPending > 0:
		rec.add(where, "message not yet consumed", min(missing, e.ConsumerPending), true)
		rec.add(where, "message in the stream never consumed", max(missing-e.ConsumerPending, 0), false)
	case missing != 0:
		rec.add(where, "stream messages ≠ messages consumed (inbox rows)", missing, false)
	}
	return nil
}

// classifyOrderMessages checks that the order messages the broker stored
// are consumed (inbox rows), poison or queued.
func (r *reconciler) classifyOrderMessages(ctx context.Context) error {
	s, rec := r.s, r.rec
	om := &rec.OrderMessages
	if err := r.tx.QueryRow(ctx, r.q(`SELECT count(*) FROM {s}.consumer_inbox WHERE consumer_group = $1`), flow.ConsumerGroup).Scan(&om.Consumed); err != nil {
		return fmt.Errorf("reconcile: inbox: %w", err)
	}
	om.Poison = r.poisonByStream["orders"]
	if s.JetStream != nil {
		om.Poison += r.poisonByStream[s.JetStream.OrderStream]
	}
	om.Stored, om.Queued, om.Redelivered = s.Queue.Figures().Published, max(r.orderQueued, 0), s.Queue.Figures().Redeliveries
	if s.JetStream != nil {
		om.Stored = int64(r.js.OrderLastSeq - s.JetStream.OrderBaseSeq)
	}
	rec.add("order messages", "message not yet consumed", min(om.Queued, om.Stored-om.Consumed-om.Poison), true)
	rec.add("order messages", "poison message (recorded for review)", om.Poison, true)
	rec.add("order messages", "stored by the broker ≠ consumed + poison + queued", om.Stored-om.Consumed-om.Poison-om.Queued, false)
	return nil
}

// poisonPerTag counts the poison messages recorded for events of tag.
func poisonPerTag(ctx context.Context, tx pgx.Tx, schema, tag string) int64 {
	var n int64
	_ = tx.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "poison_message"}.Sanitize()+` p
		JOIN `+pgx.Identifier{schema, "event_outbox"}.Sanitize()+` e ON e.event_id = p.message_id AND e.tag = $1`, tag).Scan(&n)
	return n
}

// Print writes the three tables and the differences.
func (r *Result) Print(w io.Writer) {
	if r.Counters != nil {
		r.printWindows(w)
		return
	}
	fmt.Fprintln(w, "reconciliation (front door | PostgreSQL buckets | ledger):")
	var fa, fh, fd, tot, av, al, la, lo int64
	for _, b := range r.Buckets {
		fa, fh, fd, tot, av, al, la, lo = fa+b.FrontAvailable, fh+b.FrontHeld, fd+b.FrontDrift, tot+b.Total, av+b.Available, al+b.Allocated, la+b.LedgerAllocated, lo+b.LiveOrders
	}
	fmt.Fprintf(w, "  %d buckets: front door available %d, held %d, drift %d | total %d, available %d, allocated %d | ledger allocated %d | live orders %d\n",
		len(r.Buckets), fa, fh, fd, tot, av, al, la, lo)
	fmt.Fprintf(w, "  orders by status: %s\n", kv(r.OrdersByStatus))
	fmt.Fprintf(w, "  ledger units by type: %s\n", kv(r.LedgerByType))
	for _, e := range r.Events {
		consumed := "not consumed here"
		if e.Consumed >= 0 {
			consumed = fmt.Sprintf("consumed %d (pending %d, awaiting redelivery %d, poison %d)", e.Consumed, e.ConsumerPending, e.Redelivering, e.Poison)
		}
		fmt.Fprintf(w, "  events %-18s outbox sent %d, waiting %d, dead %d | stream %d | %s\n", e.Tag, e.Sent, e.Pending, e.Dead, e.Stream, consumed)
	}
	om := r.OrderMessages
	fmt.Fprintf(w, "  order messages: stored %d | consumed %d, poison %d, queued %d, redelivered %d\n", om.Stored, om.Consumed, om.Poison, om.Queued, om.Redelivered)
	r.printDifferences(w)
	if r.Reports != nil {
		fmt.Fprintln(w, "  reports, one snapshot:")
		printReports(w, *r.Reports)
	}
	r.printVerdict(w)
}

// printWindows is Print for RunWindow's result.
func (r *Result) printWindows(w io.Writer) {
	c := r.Counters
	fmt.Fprintln(w, "reconciliation of the recent windows (front door counters | PostgreSQL buckets):")
	var fa, fd, tot, av, al int64
	for _, b := range r.Buckets {
		fa, fd, tot, av, al = fa+b.FrontAvailable, fd+b.FrontDrift, tot+b.Total, av+b.Available, al+b.Allocated
	}
	fmt.Fprintf(w, "  %d buckets: front door available %d, held %d, drift %d | total %d, available %d, allocated %d | in flight %d\n",
		len(r.Buckets), fa, c.FrontHeld, fd, tot, av, al, c.InFlight)
	fmt.Fprintf(w, "  outbox: waiting %d, dead %d\n", c.Outbox.Pending+c.Outbox.Sending+c.Outbox.Retry, c.Outbox.Dead)
	r.printDifferences(w)
	for _, rep := range r.Windows {
		fmt.Fprintf(w, "  reports of the orders created %s – %s, one snapshot:\n", rep.From.Format(time.RFC3339), rep.To.Format(time.RFC3339))
		printReports(w, rep)
	}
	r.printVerdict(w)
}

func printReports(w io.Writer, rep flow.Reconciliation) {
	for _, l := range strings.Split(strings.TrimSuffix(rep.String(), "\n"), "\n") {
		fmt.Fprintln(w, "    "+l)
	}
}

// printDifferences writes the differences grouped by class.
func (r *Result) printDifferences(w io.Writer) {
	// Group the differences by class.
	type agg struct {
		n         int64
		where     []string
		explained bool
	}
	byClass := map[string]*agg{}
	var classes []string
	for _, d := range r.Differences {
		a := byClass[d.Class]
		if a == nil {
			a = &agg{explained: d.Explained}
			byClass[d.Class] = a
			classes = append(classes, d.Class)
		}
		a.n += d.Count
		if len(a.where) < 3 && !contains(a.where, d.Where) {
			a.where = append(a.where, d.Where)
		}
	}
	sort.Strings(classes)
	for _, c := range classes {
		a := byClass[c]
		status := "EXPLAINED"
		if !a.explained {
			status = "FAIL"
		}
		fmt.Fprintf(w, "  %-9s %s: %d (%s)\n", status, c, a.n, strings.Join(a.where, ", "))
	}
}

func (r *Result) printVerdict(w io.Writer) {
	if r.Passed() {
		fmt.Fprintf(w, "reconciliation: PASS (%d differences, all explained)\n", len(r.Differences))
	} else {
		fmt.Fprintln(w, "reconciliation: FAILED (unexplained differences)")
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func kv(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
