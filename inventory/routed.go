package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgval"
	"github.com/seckillkit/seckill/internal/twin"
)

// The statements of Config.Citus. The default AcquireReservation,
// AllocateBucket and ReleaseStock are one statement each, an INSERT in a
// CTE whose result feeds the rest: Citus (schema-based sharding) does not
// route such a statement to the node that holds the schema but runs the
// INSERT as a subplan and ships its result to every worker, and the
// transaction then commits with two phases. With Config.Citus each is made
// of statements of shapes Citus routes whole (a plain INSERT … VALUES …
// ON CONFLICT DO NOTHING; SELECTs, UPDATEs and DELETEs in CTEs read by a
// SELECT): two sent together as one batch, still one round trip (the
// release reads its ALLOCATE row first, in a round trip of its own).

// acquireInsertSQL is acquireSQL's insert alone: the new row, or nothing
// when the reservation, its request id or the order id exists.
// Parameters as acquireSQL.
const acquireInsertSQL = insertReservationSQL + `
ON CONFLICT DO NOTHING
RETURNING 'new', ` + reservationCols

// acquireExistingSQL follows acquireInsertSQL in the same batch: the
// reservation locked FOR UPDATE, or the reservation holding the request id
// or the order id. A new statement: under Read Committed its snapshot sees
// a concurrent insert that committed while the insert waited for it.
// After a successful insert it locks (again) the row just inserted.
// Parameters: $1 reservation, $2 request, $3 order id (0: none).
const acquireExistingSQL = `
WITH cur AS (
	SELECT ` + reservationCols + `
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $1
	   FOR UPDATE
), other AS (
	SELECT CASE WHEN request_id = $2 THEN 'request_conflict' ELSE 'order_conflict' END AS kind,
	       reservation_id, request_id, order_id
	  FROM {schema}.inventory_reservation
	 WHERE (request_id = $2 OR (order_id = $3::int8 AND $3::int8 > 0)) AND reservation_id <> $1
	   AND NOT EXISTS (SELECT 1 FROM cur)
	 ORDER BY 1 DESC
	 LIMIT 1
)
SELECT 'existing', * FROM cur
UNION ALL
SELECT kind, reservation_id, request_id, NULL, NULL, NULL, NULL, NULL, NULL, order_id,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
  FROM other`

// acquireRouted is AcquireReservation's statement pair for Config.Citus.
// The insert's row answers when there is one; otherwise the second
// statement's, classified as acquireSQL's.
func (s *Store) acquireRouted(r NewReservation) twin.Batch[Acquired] {
	return twin.Batch[Acquired]{Add: func(_ context.Context, _ bool, b *pgx.Batch, dst *Acquired) {
		created := false
		b.Queue(s.sql.acquireInsert, acquireArgs(r)...).QueryRow(func(row pgx.Row) error {
			err := s.scanAcquire(row, r, dst)
			if errors.Is(err, ErrConcurrentInsert) {
				return nil // nothing inserted: the next statement tells why
			}
			created = err == nil
			return err
		})
		b.Queue(s.sql.acquireExisting, pgval.UUID(r.ReservationID), pgval.UUID(r.RequestID), r.orderID()).QueryRow(func(row pgx.Row) error {
			if created {
				var own Acquired // the row just inserted, locked again
				return s.scanAcquire(row, r, &own)
			}
			return s.scanAcquire(row, r, dst)
		})
	}}
}

// allocationPlaceholderSQL inserts the ALLOCATE ledger row of
// AllocateBucket with Config.Citus before the bucket is touched, as
// allocationLedgerSQL does for the one-batch path, but with ON CONFLICT
// DO NOTHING: a row with the same key (a duplicate that committed, or a
// concurrent one that commits while this insert waits for it) leaves the
// transaction usable, and allocateRoutedSQL classifies it. Its reason
// ($10) is a marker unique to the call (placeholderReason), by which the
// next statement knows the row as the one this call inserted.
const allocationPlaceholderSQL = allocationLedgerSQL + `
ON CONFLICT DO NOTHING`

// allocateRoutedSQL follows allocationPlaceholderSQL in the same batch.
// upd is allocateSQL's conditional decrement, guarded by the placeholder
// row instead of the absence of a ledger row; led writes the counters
// around the decrement and the real reason into the placeholder; del
// deletes the placeholder when upd took nothing, so a refused allocation
// writes nothing. The outer SELECT returns allocateSQL's columns: the
// zero-row branch reads the ledger row of another call directly (this is
// a new statement, whose snapshot already sees a duplicate that
// committed while the placeholder insert waited). Its bucket read tells a
// missing bucket from one without the stock; the available stock a refusal
// reports comes from availableNowSQL, the batch's next statement (the
// function allocateSQL reads it with cannot run on a Citus worker: it
// would query a distributed table from a shard's query).
//
// Parameters: $1 activity, $2 SKU, $3 bucket, $4 quantity, $5 ledger key,
// $6 reservation, $7 the placeholder's marker, $8 reason, $9 user.
const allocateRoutedSQL = `
` + allocationReadsSQL + `, upd AS (
	` + decrementSQL + `
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_ledger WHERE idempotency_key = $5 AND reason = $7)` + allocationBound + `
)` + placeholderFilled + `,
       u.before_available, u.after_available, u.before_allocated, u.after_allocated, u.version,
       CASE WHEN l.ledger_id IS NULL THEN
         (SELECT x.ledger_id FROM {schema}.inventory_ledger AS x
           WHERE x.idempotency_key = $5 AND x.reason <> $7) END,
       CASE WHEN l.ledger_id IS NULL THEN
         (SELECT b.available_stock FROM {schema}.sku_inventory AS b
           WHERE b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3) END,
` + allocationExplained + `
  FROM (SELECT 1) AS one
  LEFT JOIN upd AS u ON true
  LEFT JOIN led AS l ON true
  LEFT JOIN r ON true
  LEFT JOIN sk ON true`

// placeholderFilled follows the CTE upd of allocateRoutedSQL and
// releaseRoutedSQL, which changed the bucket (or nothing) and returned the
// counters around the change: led writes them and the real reason ($8)
// into the placeholder row (key $5, marker $7), del deletes the
// placeholder when upd took nothing, and the outer SELECT starts with the
// ledger row's id and time.
const placeholderFilled = `, led AS (
	UPDATE {schema}.inventory_ledger AS l
	   SET before_available = u.before_available, after_available = u.after_available,
	       before_allocated = u.before_allocated, after_allocated = u.after_allocated,
	       reason = $8
	  FROM upd AS u
	 WHERE l.idempotency_key = $5 AND l.reason = $7
	RETURNING l.ledger_id, l.created_at
), del AS (
	DELETE FROM {schema}.inventory_ledger
	 WHERE idempotency_key = $5 AND reason = $7 AND NOT EXISTS (SELECT 1 FROM upd)
)
SELECT l.ledger_id, l.created_at`

// placeholderReason returns a ledger reason no other call writes: the
// marker of allocationPlaceholderSQL's row (56 characters, within
// maxCodeLength).
func placeholderReason() string { return "SECKILL_PLACEHOLDER " + uuid.NewString() }

// allocateRouted is AllocateBucket's statements for Config.Citus (the
// placeholder, the allocation, the stock a refusal reports), classified as
// allocateSQL's row.
func (s *Store) allocateRouted(a Allocation) twin.Batch[Allocated] {
	return twin.Batch[Allocated]{Add: func(ctx context.Context, batch bool, b *pgx.Batch, dst *Allocated) {
		marker := placeholderReason()
		args := allocateArgs(a)
		reason := args[len(args)-1]
		args[len(args)-1] = marker
		b.Queue(s.sql.allocationPlaceholder, args...).Fn = func(br pgx.BatchResults) error {
			if _, err := br.Exec(); err != nil {
				return &driverError{fmt.Errorf("inventory: allocate %s: ledger: %w", allocateKey(a.ReservationID), err)}
			}
			return nil
		}
		var soldOut *Error // sold out: reported by the next statement, with the stock after any wait
		b.Queue(s.sql.allocateRouted, a.ActivityID, a.SKUID, a.Bucket, int32(a.Quantity), allocateKey(a.ReservationID),
			pgval.UUID(a.ReservationID), marker, reason, a.UserID).QueryRow(func(row pgx.Row) error {
			err := classifyAllocate(row, a, dst)
			if e := (*Error)(nil); errors.As(err, &e) && e.Err == ErrSoldOut {
				soldOut = e
				return nil
			}
			return s.observeAllocate(ctx, batch, a, err)
		})
		b.Queue(s.sql.availableNow, a.ActivityID, a.SKUID, a.Bucket).QueryRow(func(row pgx.Row) error {
			var avail *int32
			if err := row.Scan(&avail); err != nil {
				return &driverError{fmt.Errorf("inventory: allocate %s: available stock: %w", allocateKey(a.ReservationID), err)}
			}
			if soldOut == nil {
				return nil
			}
			if avail != nil {
				soldOut.Available = *avail
			}
			return s.observeAllocate(ctx, batch, a, soldOut)
		})
	}}
}

// availableNowSQL follows allocateRoutedSQL in its batch: the bucket's
// available stock ($1 activity, $2 SKU, $3 bucket), read by a statement of
// its own. Its snapshot is taken after allocateRoutedSQL ended, so it sees
// what a transaction that statement waited for left (one row, NULL for a
// missing bucket).
const availableNowSQL = `
SELECT (SELECT available_stock FROM {schema}.sku_inventory
         WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3)`

// allocationOfSQL reads the ALLOCATE row ($1 its key) that ReleaseStock
// with Config.Citus gives back.
const allocationOfSQL = `
SELECT activity_id, sku_id, inventory_bucket, allocated_delta::smallint, user_id, order_id, source_message_id
  FROM {schema}.inventory_ledger
 WHERE idempotency_key = $1`

// releasePlaceholderSQL is releaseLedgerSQL (the RELEASE row with
// placeholder counters) with ON CONFLICT DO NOTHING; its reason is the
// call's marker, as in allocationPlaceholderSQL.
const releasePlaceholderSQL = releaseLedgerSQL + `
ON CONFLICT DO NOTHING`

// releaseRoutedSQL follows releasePlaceholderSQL in the same batch: the
// increment of releaseSQL, guarded by the placeholder, the counters and
// the real reason written into it (led), or the placeholder deleted when
// the increment took nothing (del). It returns releaseSQL's columns.
//
// Parameters: $1 activity, $2 SKU, $3 bucket, $4 quantity (the ALLOCATE
// row's), $5 the RELEASE key, $6 reservation, $7 the placeholder's marker,
// $8 reason (placeholderFilled's numbering).
const releaseRoutedSQL = `
WITH upd AS (
	` + incrementSQL + `
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_ledger
	                WHERE idempotency_key = $5 AND reason = $7 AND reservation_id = $6)
	RETURNING available_stock - $4::int AS before_available, available_stock AS after_available,
	          allocated_stock + $4::int AS before_allocated, allocated_stock AS after_allocated, version
)` + placeholderFilled + `, $1::int8, $2::int8, $3::int2, $4::int2,
       u.before_available, u.after_available, u.before_allocated, u.after_allocated, u.version,
       CASE WHEN l.ledger_id IS NULL THEN
         (SELECT x.ledger_id FROM {schema}.inventory_ledger AS x
           WHERE x.idempotency_key = $5 AND x.reason <> $7) END
  FROM (SELECT 1) AS one
  LEFT JOIN upd AS u ON true
  LEFT JOIN led AS l ON true`

// releaseRouted is ReleaseStock for Config.Citus: the ALLOCATE row read,
// then releasePlaceholderSQL and releaseRoutedSQL in one batch, classified
// as releaseSQL's row.
func (s *Store) releaseRouted(ctx context.Context, tx pgx.Tx, r StockRelease) (Allocated, error) {
	var (
		out             Allocated
		act, sku, user  int64
		bucket, qty     int16
		orderID         *int64
		sourceMessageID uuid.UUID
	)
	err := tx.QueryRow(ctx, s.sql.allocationOf, allocateKey(r.ReservationID)).Scan(&act, &sku, &bucket, &qty, &user, &orderID, &sourceMessageID)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, s.reportRelease(ctx, false, r, &out, fmt.Errorf("inventory: release %s: %w", releaseKey(r.ReservationID), ErrNotAllocated))
	}
	if err != nil {
		return out, fmt.Errorf("inventory: release %s: %w", releaseKey(r.ReservationID), err)
	}
	args := releaseArgs(r) // allocate key, release key, order, message, reason
	if r.OrderID != 0 {
		orderID = &r.OrderID
	}
	if r.MessageID != uuid.Nil {
		sourceMessageID = r.MessageID
	}
	marker := placeholderReason()
	var b pgx.Batch
	b.Queue(s.sql.releasePlaceholder, act, sku, bucket, int32(qty), args[1], pgval.UUID(r.ReservationID), orderID,
		pgval.UUID(sourceMessageID), user, marker).Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return &driverError{fmt.Errorf("inventory: release %s: ledger: %w", releaseKey(r.ReservationID), err)}
		}
		return nil
	}
	b.Queue(s.sql.releaseRouted, act, sku, bucket, int32(qty), args[1], pgval.UUID(r.ReservationID), marker, args[4]).QueryRow(func(row pgx.Row) error {
		return s.scanRelease(ctx, false, row, r, &out)
	})
	err = tx.SendBatch(ctx, &b).Close()
	return out, err
}
