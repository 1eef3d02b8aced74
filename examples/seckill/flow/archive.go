package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
)

// An ended activity leaves the active tables whole: ArchiveActivity moves
// its rows to an archive schema that holds the same tables (migrated with
// the same components), so that every audit and the reconciliation run on
// the archive unchanged, through a Service opened on it.
//
// Each statement below moves one batch and everything that hangs on it, in
// one statement: DELETE … RETURNING in the active schema ({src}) feeding an
// INSERT into the archive ({dst}). A statement is atomic, so an archive
// interrupted anywhere has moved whole batches, and running it again moves
// the rest; the foreign keys of the archive (order_items, payment_record
// → orders; sku_inventory, inventory_sale_log → inventory_sku) are checked
// at the end of each statement, when parent and children are both there.
// The tables of {src} and {dst} come from the same migrations, so their
// columns are in the same order and SELECT * copies a row whole; identity
// columns keep their values (OVERRIDING SYSTEM VALUE).

// archiveOrdersSQL moves up to $2 orders of activity $1 with their items,
// payments, payment reviews and their SENT events (ORDER_CREATED,
// ORDER_PAID, REFUND_REQUESTED of their payments), from event_outbox and
// from event_outbox_history (where outbox.Store.ArchiveSent put the older
// ones) to the same table of the archive. It returns the orders and the
// events moved.
const archiveOrdersSQL = `WITH batch AS (
	SELECT order_id FROM {src}.orders WHERE activity_id = $1 LIMIT $2 FOR UPDATE
), items AS (
	DELETE FROM {src}.order_items AS t USING batch AS b WHERE t.order_id = b.order_id RETURNING t.*
), payments AS (
	DELETE FROM {src}.payment_record AS t USING batch AS b WHERE t.order_id = b.order_id RETURNING t.*
), reviews AS (
	DELETE FROM {src}.payment_review AS t USING batch AS b WHERE t.order_id = b.order_id RETURNING t.*
), order_events AS (
	DELETE FROM {src}.event_outbox AS t USING batch AS b
	WHERE t.dedup_key IN ('ORDER_CREATED:' || b.order_id, 'ORDER_PAID:' || b.order_id) AND t.status = 20
	RETURNING t.*
), refund_events AS (
	DELETE FROM {src}.event_outbox AS t USING payments AS p
	WHERE t.dedup_key = 'REFUND_REQUESTED:' || p.payment_id AND t.status = 20
	RETURNING t.*
), archived_events AS (
	DELETE FROM {src}.event_outbox_history AS t USING batch AS b
	WHERE t.dedup_key IN ('ORDER_CREATED:' || b.order_id, 'ORDER_PAID:' || b.order_id)
	RETURNING t.*
), archived_refunds AS (
	DELETE FROM {src}.event_outbox_history AS t USING payments AS p
	WHERE t.dedup_key = 'REFUND_REQUESTED:' || p.payment_id
	RETURNING t.*
), gone AS (
	DELETE FROM {src}.orders AS t USING batch AS b WHERE t.order_id = b.order_id RETURNING t.*
), kept AS (
	INSERT INTO {dst}.orders SELECT * FROM gone RETURNING 1
), kept_items AS (
	INSERT INTO {dst}.order_items SELECT * FROM items
), kept_payments AS (
	INSERT INTO {dst}.payment_record SELECT * FROM payments
), kept_reviews AS (
	INSERT INTO {dst}.payment_review OVERRIDING SYSTEM VALUE SELECT * FROM reviews
), kept_events AS (
	INSERT INTO {dst}.event_outbox OVERRIDING SYSTEM VALUE
	SELECT * FROM order_events UNION ALL SELECT * FROM refund_events
	RETURNING 1
), kept_archived AS (
	INSERT INTO {dst}.event_outbox_history
	SELECT * FROM archived_events UNION ALL SELECT * FROM archived_refunds
	RETURNING 1
)
SELECT (SELECT count(*) FROM kept), (SELECT count(*) FROM kept_events) + (SELECT count(*) FROM kept_archived)`

// archiveReservationsSQL moves up to $2 reservations of activity $1 with
// their ledger rows, their SENT FRONTDOOR_RELEASE events and the inbox rows
// of the order messages that made them (ref = reservation id), the active
// and the already archived ones alike. It returns the reservations, ledger
// rows, events and inbox rows moved.
const archiveReservationsSQL = `WITH batch AS (
	SELECT reservation_id FROM {src}.inventory_reservation WHERE activity_id = $1 LIMIT $2 FOR UPDATE
), ledger AS (
	DELETE FROM {src}.inventory_ledger AS t USING batch AS b WHERE t.reservation_id = b.reservation_id RETURNING t.*
), events AS (
	DELETE FROM {src}.event_outbox AS t USING batch AS b
	WHERE t.dedup_key = 'FRONTDOOR_RELEASE:' || b.reservation_id AND t.status = 20
	RETURNING t.*
), archived_events AS (
	DELETE FROM {src}.event_outbox_history AS t USING batch AS b
	WHERE t.dedup_key = 'FRONTDOOR_RELEASE:' || b.reservation_id
	RETURNING t.*
), messages AS (
	DELETE FROM {src}.consumer_inbox AS t USING batch AS b WHERE t.ref = b.reservation_id::text RETURNING t.*
), archived_messages AS (
	DELETE FROM {src}.consumer_inbox_history AS t USING batch AS b WHERE t.ref = b.reservation_id::text RETURNING t.*
), gone AS (
	DELETE FROM {src}.inventory_reservation AS t USING batch AS b WHERE t.reservation_id = b.reservation_id RETURNING t.*
), kept AS (
	INSERT INTO {dst}.inventory_reservation SELECT * FROM gone RETURNING 1
), kept_ledger AS (
	INSERT INTO {dst}.inventory_ledger OVERRIDING SYSTEM VALUE SELECT * FROM ledger RETURNING 1
), kept_events AS (
	INSERT INTO {dst}.event_outbox OVERRIDING SYSTEM VALUE SELECT * FROM events RETURNING 1
), kept_messages AS (
	INSERT INTO {dst}.consumer_inbox SELECT * FROM messages RETURNING 1
), kept_archived_events AS (
	INSERT INTO {dst}.event_outbox_history SELECT * FROM archived_events RETURNING 1
), kept_archived_messages AS (
	INSERT INTO {dst}.consumer_inbox_history SELECT * FROM archived_messages RETURNING 1
)
SELECT (SELECT count(*) FROM kept), (SELECT count(*) FROM kept_ledger),
       (SELECT count(*) FROM kept_events) + (SELECT count(*) FROM kept_archived_events),
       (SELECT count(*) FROM kept_messages) + (SELECT count(*) FROM kept_archived_messages)`

// archiveLedgerSQL moves up to $2 ledger rows of activity $1 that belong
// to no reservation (PROVISION, ADJUST): the last rows of the activity's
// ledger once its reservations have moved. It returns the rows moved.
const archiveLedgerSQL = `WITH moved AS (
	DELETE FROM {src}.inventory_ledger AS t
	WHERE t.ledger_id IN (SELECT ledger_id FROM {src}.inventory_ledger WHERE activity_id = $1 AND reservation_id IS NULL LIMIT $2 FOR UPDATE)
	RETURNING t.*
)
INSERT INTO {dst}.inventory_ledger OVERRIDING SYSTEM VALUE SELECT * FROM moved`

// archiveSKUsSQL moves the SKUs of activity $1 with their buckets, the
// tokens of a token SKU, their sale-status log and their SENT
// SALE_STATUS_CHANGED events: the last statement of an activity's archive
// (its rows are few: at most 256 buckets per SKU; a token SKU moves one
// row per unit of its stock in this one statement). It returns the SKUs and events
// moved. The activity's ledger has left by then, so its sums leave the
// active schema's audit checkpoint (inventory.Store.Checkpoint) too; the
// archive received ledger rows with their old ids, which may lie below its
// own checkpoint's watermark, so its checkpoint starts again from 0 (its
// next incremental audit replays its whole ledger).
const archiveSKUsSQL = `WITH batch AS (
	SELECT activity_id, sku_id FROM {src}.inventory_sku WHERE activity_id = $1 FOR UPDATE
), buckets AS (
	DELETE FROM {src}.sku_inventory AS t USING batch AS b
	WHERE t.activity_id = b.activity_id AND t.sku_id = b.sku_id RETURNING t.*
), tokens AS (
	DELETE FROM {src}.inventory_token AS t USING batch AS b
	WHERE t.activity_id = b.activity_id AND t.sku_id = b.sku_id RETURNING t.*
), log AS (
	DELETE FROM {src}.inventory_sale_log AS t USING batch AS b
	WHERE t.activity_id = b.activity_id AND t.sku_id = b.sku_id RETURNING t.*
), events AS (
	DELETE FROM {src}.event_outbox AS t USING batch AS b
	WHERE t.aggregate_type = 'SKU' AND t.aggregate_id = b.activity_id || ':' || b.sku_id AND t.status = 20
	RETURNING t.*
), archived_events AS (
	DELETE FROM {src}.event_outbox_history AS t USING batch AS b
	WHERE t.aggregate_type = 'SKU' AND t.aggregate_id = b.activity_id || ':' || b.sku_id
	RETURNING t.*
), checkpoint AS (
	DELETE FROM {src}.inventory_audit_checkpoint AS t USING batch AS b
	WHERE t.activity_id = b.activity_id AND t.sku_id = b.sku_id
), dst_checkpoint AS (
	DELETE FROM {dst}.inventory_audit_checkpoint
), dst_watermark AS (
	UPDATE {dst}.inventory_audit_watermark SET through_ledger_id = 0, advanced_at = statement_timestamp()
), gone AS (
	DELETE FROM {src}.inventory_sku AS t USING batch AS b
	WHERE t.activity_id = b.activity_id AND t.sku_id = b.sku_id RETURNING t.*
), kept AS (
	INSERT INTO {dst}.inventory_sku SELECT * FROM gone RETURNING 1
), kept_buckets AS (
	INSERT INTO {dst}.sku_inventory SELECT * FROM buckets
), kept_tokens AS (
	INSERT INTO {dst}.inventory_token SELECT * FROM tokens
), kept_log AS (
	INSERT INTO {dst}.inventory_sale_log OVERRIDING SYSTEM VALUE SELECT * FROM log
), kept_events AS (
	INSERT INTO {dst}.event_outbox OVERRIDING SYSTEM VALUE SELECT * FROM events RETURNING 1
), kept_archived AS (
	INSERT INTO {dst}.event_outbox_history SELECT * FROM archived_events RETURNING 1
)
SELECT (SELECT count(*) FROM kept), (SELECT count(*) FROM kept_events) + (SELECT count(*) FROM kept_archived)`

// activityOpenSQL counts what keeps activity $1 from being archived: SKUs
// still on sale or paused, orders not final (CREATED, PAYING,
// REFUND_PENDING), reservations not final (PENDING_DB, RELEASE_PENDING),
// and its events not SENT (PENDING, SENDING, RETRY, DEAD), which would be
// left behind. The first column counts its SKUs.
const activityOpenSQL = `SELECT
	(SELECT count(*) FROM {src}.inventory_sku WHERE activity_id = $1),
	(SELECT count(*) FROM {src}.inventory_sku WHERE activity_id = $1 AND sale_status <> 30),
	(SELECT count(*) FROM {src}.orders WHERE activity_id = $1 AND status IN (10, 20, 60)),
	(SELECT count(*) FROM {src}.inventory_reservation WHERE activity_id = $1 AND status IN (0, 30)),
	(SELECT count(*) FROM {src}.event_outbox AS e WHERE e.status IN (0, 10, 30, 40) AND (
		e.aggregate_type = 'SKU' AND split_part(e.aggregate_id, ':', 1) = $1::text
		OR e.aggregate_type = 'ORDER' AND EXISTS (
			SELECT 1 FROM {src}.orders AS o WHERE o.order_id::text = e.aggregate_id AND o.activity_id = $1)
		OR e.aggregate_type = 'RESERVATION' AND EXISTS (
			SELECT 1 FROM {src}.inventory_reservation AS r WHERE r.reservation_id::text = e.aggregate_id AND r.activity_id = $1)
		OR e.aggregate_type = 'PAYMENT' AND EXISTS (
			SELECT 1 FROM {src}.payment_record AS p JOIN {src}.orders AS o ON o.order_id = p.order_id
			WHERE p.payment_id::text = e.aggregate_id AND o.activity_id = $1)))`

// DefaultArchiveBatchSize is the batch size of [Service.ArchiveActivity]
// when given 0; MaxArchiveBatchSize bounds it.
const (
	DefaultArchiveBatchSize = 500
	MaxArchiveBatchSize     = 10000
)

// ActivityArchived counts what [Service.ArchiveActivity] moved.
type ActivityArchived struct {
	Orders       int64 // orders, with their items, payments and payment reviews
	Reservations int64
	Ledger       int64 // ledger rows
	Events       int64 // SENT outbox events
	Inbox        int64 // inbox rows of the order messages
	SKUs         int64 // SKUs, with their buckets and sale-status log
}

// ErrActivityOpen is matched by the error [Service.ArchiveActivity]
// returns for an activity that has not ended; the concrete type is
// *ActivityOpenError. Nothing was moved.
var ErrActivityOpen = errors.New("flow: the activity has not ended")

// ActivityOpenError says what keeps an activity in the active tables.
type ActivityOpenError struct {
	ActivityID       int64
	Selling          int64 // SKUs whose sale status is not ENDED
	OpenOrders       int64 // orders CREATED, PAYING or REFUND_PENDING
	OpenReservations int64 // reservations PENDING_DB or RELEASE_PENDING
	UnfinishedEvents int64 // events PENDING, SENDING, RETRY or DEAD
}

// Error lists the counts.
func (e *ActivityOpenError) Error() string {
	return fmt.Sprintf("flow: activity %d has not ended: %d SKUs not ENDED, %d orders and %d reservations not final, %d events not SENT",
		e.ActivityID, e.Selling, e.OpenOrders, e.OpenReservations, e.UnfinishedEvents)
}

// Is reports whether target is [ErrActivityOpen].
func (e *ActivityOpenError) Is(target error) bool { return target == ErrActivityOpen }

// ArchiveActivity moves every row of the Service's activity (Item's
// ActivityID: its orders with their items, payments and payment reviews,
// its reservations, its ledger, its SKUs with their buckets and sale log,
// their SENT outbox events and the inbox rows of its order messages) from
// the Service's schema to schema archive, which it creates or migrates
// with the same components, in batches of at most batchSize orders or
// reservations (0 means [DefaultArchiveBatchSize], at most
// [MaxArchiveBatchSize]). Other activities in the schema keep selling: only
// the activity's rows are locked, one batch at a time.
//
// Every batch is one statement that moves a set of rows with everything
// that refers to them, so an archive interrupted anywhere has moved whole
// batches and calling it again moves the rest: nothing is lost or copied
// twice. Afterwards the activity's audit and reconciliation run on the
// archive: open a Service on it with [New] (same Item; its provisioning
// finds the SKU already there and writes nothing) and call
// [Service.Audit] and [Service.Reconcile].
//
// The activity must have ended: every SKU ENDED, no order or reservation
// waiting for a final state, every event SENT. Otherwise it returns an
// *[ActivityOpenError] and moves nothing. Inbox rows of the event
// consumers (keyed by event id) stay in the active inbox: the inbox's
// time-based retention (inbox.Store.Archive) takes them. On Citus, where
// each activity has a schema of its own, the same is one command that
// moves or detaches the schema (see the operations docs).
func (s *Service) ArchiveActivity(ctx context.Context, archive string, batchSize int) (ActivityArchived, error) {
	var res ActivityArchived
	switch {
	case batchSize < 0 || batchSize > MaxArchiveBatchSize:
		return res, fmt.Errorf("flow: archive activity: batch size %d, want 0 (default) to %d", batchSize, MaxArchiveBatchSize)
	case batchSize == 0:
		batchSize = DefaultArchiveBatchSize
	}
	dst, err := migrate.QuoteSchema(archive)
	if err != nil {
		return res, err
	}
	if archive == "" || archive == s.Schema {
		return res, fmt.Errorf("flow: archive activity: the archive schema %q must be named and differ from the active one", archive)
	}
	src := pgx.Identifier{s.Schema}.Sanitize()
	r := strings.NewReplacer("{src}", src, "{dst}", dst)
	act := s.Item.ActivityID

	var skus int64
	open := ActivityOpenError{ActivityID: act}
	if err := s.Pool.QueryRow(ctx, r.Replace(activityOpenSQL), act).Scan(&skus, &open.Selling, &open.OpenOrders,
		&open.OpenReservations, &open.UnfinishedEvents); err != nil {
		return res, fmt.Errorf("flow: archive activity: %w", err)
	}
	if open.Selling+open.OpenOrders+open.OpenReservations+open.UnfinishedEvents > 0 {
		return res, &open
	}
	if skus == 0 { // archived already (or never provisioned): nothing left
		return res, nil
	}
	if _, err := migrate.Apply(ctx, s.Pool, archive, inbox.Migrations, outbox.Migrations, inventory.Migrations, order.Migrations); err != nil {
		return res, fmt.Errorf("flow: archive activity: migrate the archive: %w", err)
	}
	wrap := func(err error) (ActivityArchived, error) {
		return res, fmt.Errorf("flow: archive activity %d: %w", act, err)
	}
	for {
		var orders, events int64
		if err := s.Pool.QueryRow(ctx, r.Replace(archiveOrdersSQL), act, batchSize).Scan(&orders, &events); err != nil {
			return wrap(err)
		}
		res.Orders, res.Events = res.Orders+orders, res.Events+events
		if orders < int64(batchSize) {
			break
		}
	}
	for {
		var rsv, ledger, events, msgs int64
		if err := s.Pool.QueryRow(ctx, r.Replace(archiveReservationsSQL), act, batchSize).Scan(&rsv, &ledger, &events, &msgs); err != nil {
			return wrap(err)
		}
		res.Reservations, res.Ledger, res.Events, res.Inbox = res.Reservations+rsv, res.Ledger+ledger, res.Events+events, res.Inbox+msgs
		if rsv < int64(batchSize) {
			break
		}
	}
	for {
		tag, err := s.Pool.Exec(ctx, r.Replace(archiveLedgerSQL), act, batchSize)
		if err != nil {
			return wrap(err)
		}
		res.Ledger += tag.RowsAffected()
		if tag.RowsAffected() < int64(batchSize) {
			break
		}
	}
	var skuRows, events int64
	if err := s.Pool.QueryRow(ctx, r.Replace(archiveSKUsSQL), act).Scan(&skuRows, &events); err != nil {
		return wrap(err)
	}
	res.SKUs, res.Events = skuRows, res.Events+events
	return res, nil
}
