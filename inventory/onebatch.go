package inventory

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgval"
)

// The statements of a transaction sent as one batch (pgtx.RunBatch): every
// condition that must stop the transaction raises an error, which makes the
// server skip the rest of the batch, COMMIT included. Each is a plain
// INSERT … VALUES, or UPDATEs in CTEs read by a SELECT: shapes Citus routes
// whole to the one node that holds the schema. None is an INSERT fed by a
// query or by another write's RETURNING, which Citus splits into subplans
// or pulls through the coordinator, and then commits with two phases.

// insertReservationOrAbortSQL is acquireSQL's insert without its ON
// CONFLICT: an existing reservation, request id or order id raises
// unique_violation. Parameters as acquireSQL.
const insertReservationOrAbortSQL = `
` + insertReservationSQL

// insertLedgerRow starts the one-batch ledger inserts
// (allocationLedgerSQL, releaseLedgerSQL): the columns that VALUES lists as
// $5 key, $6 reservation, $7 order, $8 source message, $1 activity, $2
// SKU, $9 user, $3 bucket, then the type, the deltas, the placeholder
// counters and $10 the reason.
const insertLedgerRow = `INSERT INTO {schema}.inventory_ledger (
	idempotency_key, reservation_id, order_id, source_message_id,
	activity_id, sku_id, user_id, inventory_bucket, ledger_type,
	total_delta, available_delta, allocated_delta,
	before_available, after_available, before_allocated, after_allocated, reason)`

// allocationLedgerSQL inserts the ALLOCATE ledger row of
// [Store.QueueAllocateBucket] with [pgtx.Abort] before the bucket is touched, as a
// plain INSERT … VALUES: a ledger row with the same key (a duplicate that
// committed, or a concurrent one that commits while this insert waits for
// it) raises unique_violation on uq_inventory_ledger_idempotency. The
// counters it writes are placeholders that satisfy the table's checks
// (before_available = quantity, after_available = 0, before_allocated = 0,
// after_allocated = quantity); decrementOrAbortSQL, the next statement,
// overwrites them with the bucket's counters around the decrement in the
// same transaction, so no other transaction ever sees them.
//
// Why not INSERT … SELECT from the bucket row after the decrement: on Citus
// an INSERT … SELECT into a table with an identity column (ledger_id) is
// not pushed down to the worker ("pull to coordinator": nextval is
// volatile); the row travels back as a COPY, and a transaction that wrote
// through such a COPY commits with two phases. INSERT … VALUES is routed
// to the one node as it is, here and on plain PostgreSQL.
//
// Parameters as allocateSQL. With dst, the statement returns ledger_id and
// created_at.
const allocationLedgerSQL = `
` + insertLedgerRow + `
VALUES ($5, $6, $7, $8, $1, $2, $9, $3, 10,
        0, -$4::int, $4::int,
        $4::int, 0, 0, $4::int, $10)`

// decrementOrAbortSQL is the decrement of allocateSQL with the same guards
// on the reservation and the sale (status and window), after
// allocationLedgerSQL inserted the ledger row: the uniqueness of that row
// stands for allocateSQL's NOT EXISTS guard on the ledger. The second CTE
// writes the counters around the decrement into that ledger row (only
// when the decrement took the stock). When the UPDATE takes nothing, the
// outer SELECT calls inventory_refuse with the condition
// allocationRefusalSQL finds, which raises it and aborts the transaction.
// It returns the bucket's new version and the counters.
//
// Both CTEs are UPDATEs of tables in the same schema, read by a SELECT: one
// statement that Citus routes to one node whole.
//
// Parameters: $1 activity, $2 SKU, $3 bucket, $4 quantity, $5
// reservation, $6 user, $7 ledger key.
const decrementOrAbortSQL = `
WITH upd AS (
	` + decrementSQL + allocationGuards + `
	RETURNING available_stock + $4::int AS before_available, available_stock AS after_available,
	          allocated_stock - $4::int AS before_allocated, allocated_stock AS after_allocated, version
)` + countersLedCTE + `$7` + countersSelect + `$5::text` + countersEnd + allocationRefusalSQL

// allocationGuards are the conditions the one-batch decrements add to
// decrementSQL: the reservation $5 recorded with exactly the allocation's
// activity, SKU, bucket, quantity and buyer ($6), in PENDING_DB or
// ORDERED, and the sale on (status and window).
const allocationGuards = `
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_reservation AS r
	                WHERE r.reservation_id = $5 AND r.activity_id = $1 AND r.sku_id = $2
	                  AND r.inventory_bucket = $3 AND r.quantity = $4::int AND r.user_id = $6
	                  AND r.status IN (0, 10))
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_sku AS k
	                WHERE k.activity_id = $1 AND k.sku_id = $2 AND k.sale_status = 10
	                  AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                  AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at))`

// allocationRefusalSQL, joined after a one-batch decrement whose result
// row is u (an outer join that keeps one row when the decrement took
// nothing), finds why it took nothing, only then (u.version IS NULL): the
// SQLSTATE of the condition, for inventory_refuse. It reads the SKU's sale
// and the reservation with the statement's snapshot, as the decrement's
// guards did; when they hold, the refusal is the stock condition the
// decrement re-checked on the bucket row after any wait for its lock:
// sold out (or the bucket was never provisioned). Parameters as
// decrementOrAbortSQL.
const allocationRefusalSQL = `
  LEFT JOIN LATERAL (
	SELECT CASE
	         WHEN k.sku_id IS NULL THEN 'SK004'
	         WHEN NOT (k.sale_status = 10
	                   AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                   AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at)) THEN 'SK002'
	         WHEN r.reservation_id IS NULL THEN 'SK009'
	         WHEN NOT (r.activity_id = $1 AND r.sku_id = $2 AND r.inventory_bucket = $3 AND r.quantity = $4::int
	                   AND r.user_id = $6 AND r.status IN (0, 10)) THEN 'SK005'
	         WHEN NOT EXISTS (SELECT 1 FROM {schema}.sku_inventory AS b
	                           WHERE b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3) THEN 'SK003'
	         ELSE 'SK001'
	       END AS code
	  FROM (SELECT 1) AS o
	  LEFT JOIN {schema}.inventory_sku AS k ON k.activity_id = $1 AND k.sku_id = $2
	  LEFT JOIN {schema}.inventory_reservation AS r ON r.reservation_id = $5
	 WHERE u.version IS NULL) AS w ON true`

// decrementThenLedger is queueAllocateOrAbort's pair on plain
// PostgreSQL (without Config.Citus): the guarded decrement first, which
// raises the refusal's condition when it takes nothing and otherwise returns the
// bucket's new version, then the ALLOCATE ledger row as an INSERT … SELECT
// of the bucket's counters, which a new statement of the same transaction
// reads after the decrement. The ledger row is written once, with its
// counters; the ledger-first pair of Config.Citus writes it twice (a
// placeholder, then the counters), which costs a row version and its
// WAL: 12% more time per allocation on 1 bucket and 22% more on 64 in
// BenchmarkOneBatchAllocation, which runs both side by side. Citus cannot
// route this INSERT … SELECT.
// Without a guard on the ledger, a duplicate (committed, or concurrent
// and committing first) decrements and then raises unique_violation on
// the ledger key, which aborts the decrement with the rest.
//
// decrementThenRaiseSQL's parameters are decrementOrAbortSQL's first six;
// allocationLedgerFromBucketSQL's are allocateSQL's.
const (
	decrementThenRaiseSQL = `
WITH upd AS (
	` + decrementSQL + allocationGuards + `
	RETURNING version
)
SELECT coalesce(u.version, {schema}.inventory_refuse(w.code, $1, $2, $3, $4, $5::text))
  FROM (SELECT 1) AS one LEFT JOIN upd AS u ON true` + allocationRefusalSQL

	allocationLedgerFromBucketSQL = `
` + insertLedgerRow + `
SELECT $5, $6, $7, $8, $1, $2, $9, $3, 10,
       0, -$4::int, $4::int,
       b.available_stock + $4::int, b.available_stock, b.allocated_stock - $4::int, b.allocated_stock, $10
  FROM {schema}.sku_inventory AS b
 WHERE b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3`
)

// countersLedCTE, countersSelect and countersEnd end a one-batch stock
// change whose CTE upd updated the bucket and returned the counters around
// the change and the new version: the CTE led writes those counters into
// the ledger row with the key parameter written between countersLedCTE
// and countersSelect (the row the batch's previous statement inserted
// with placeholders), and the SELECT returns the version and the counters,
// or, when upd took nothing, calls inventory_refuse with the reference
// written between countersSelect and countersEnd and the condition the
// lateral join written after countersEnd finds (allocationRefusalSQL,
// releaseRefusalSQL), which raises it. (The call's first argument comes
// from that join's row, so neither the planner nor a Citus coordinator
// evaluates it in advance: it runs only when upd took nothing.)
const (
	countersLedCTE = `, led AS (
	UPDATE {schema}.inventory_ledger AS l
	   SET before_available = u.before_available, after_available = u.after_available,
	       before_allocated = u.before_allocated, after_allocated = u.after_allocated
	  FROM upd AS u
	 WHERE l.idempotency_key = `
	countersSelect = `
)
SELECT coalesce(u.version, {schema}.inventory_refuse(w.code, $1, $2, $3, $4, `
	countersEnd = `)),
       u.before_available, u.after_available, u.before_allocated, u.after_allocated
  FROM (SELECT 1) AS one LEFT JOIN upd AS u ON true`
)

// returningReservation ends an insert of a reservation that returns the
// row.
const returningReservation = `
RETURNING ` + reservationCols

// queueInsertOrAbort is [Store.QueueAcquireReservation] with
// [pgtx.Abort]: the plain insert (insertReservationOrAbortSQL, or
// insertRejectedOrAbortSQL with r.FailureCode), returning the row when dst
// is not nil.
func (s *Store) queueInsertOrAbort(b *pgx.Batch, r NewReservation, dst *Acquired) error {
	if err := r.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	sql, returning, args := s.sql.insertReservationOrAbort, s.sql.insertReservationOrAbortReturning, acquireArgs(r)
	if r.FailureCode != "" {
		sql, returning, args[10] = s.sql.insertRejectedOrAbort, s.sql.insertRejectedOrAbortReturning, r.FailureCode
	}
	from := b.Len()
	if dst == nil {
		b.Queue(sql, args...)
	} else {
		b.Queue(returning, args...).QueryRow(func(row pgx.Row) error {
			var got Reservation
			if err := row.Scan(scanReservationInto(&got)...); err != nil {
				return err
			}
			*dst = Acquired{Reservation: got, Created: true}
			return nil
		})
	}
	s.nameAbort(b, from, "inventory.Store.QueueAcquireReservation(reservation "+r.ReservationID.String()+")")
	return nil
}

// queueAllocateOrAbort is [Store.QueueAllocateBucket] with [pgtx.Abort].
func (s *Store) queueAllocateOrAbort(b *pgx.Batch, a Allocation, dst *Allocated) error {
	if err := a.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	key := allocateKey(a.ReservationID)
	decrementArgs := []any{a.ActivityID, a.SKUID, a.Bucket, int32(a.Quantity), pgval.UUID(a.ReservationID), a.UserID}
	from := b.Len()
	defer s.nameAbort(b, from, "inventory.Store.QueueAllocateBucket("+key+")")
	if !s.citus {
		s.queueDecrementThenLedger(b, a, decrementArgs, dst)
		return nil
	}
	s.queueLedgerThenCounters(b, ledgerThenCounters{
		ledger: s.sql.allocationLedger, ledgerReturning: s.sql.allocationLedgerReturning, ledgerArgs: allocateArgs(a),
		counters: s.sql.decrementOrAbort, counterArgs: append(decrementArgs, key),
		report: func(err error) { s.reportOrAbort(a, err) },
	}, a, dst)
	return nil
}

// queueDecrementThenLedger queues decrementThenLedger into b, with the
// read-back of queueLedgerThenCounters: dst (when non-nil) and the
// observer hear of a success, of the refusal, or of the duplicate the
// ledger insert met.
func (s *Store) queueDecrementThenLedger(b *pgx.Batch, a Allocation, decrementArgs []any, dst *Allocated) {
	ledger := s.sql.allocationLedgerFromBucket
	if dst != nil {
		ledger = s.sql.allocationLedgerFromBucketReturning
	}
	d := b.Queue(s.sql.decrementThenRaise, decrementArgs...)
	l := b.Queue(ledger, allocateArgs(a)...)
	if dst == nil && s.observer == nil {
		return // nothing to read back: the batch's own error handling suffices
	}
	got := Allocated{ActivityID: a.ActivityID, SKUID: a.SKUID, Bucket: a.Bucket, Quantity: a.Quantity}
	d.QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&got.Version); err != nil {
			err = s.fail.Classify(err)
			if refused(err) {
				s.reportOrAbort(a, err)
			}
			return err
		}
		return nil
	})
	l.Fn = func(br pgx.BatchResults) error {
		var err error
		if dst == nil {
			_, err = br.Exec()
		} else {
			err = br.QueryRow().Scan(&got.LedgerID, &got.CreatedAt, &got.BeforeAvailable, &got.AfterAvailable,
				&got.BeforeAllocated, &got.AfterAllocated)
		}
		if err != nil {
			err = s.fail.Classify(err)
			if errors.Is(err, ErrAlreadyApplied) {
				s.reportOrAbort(a, err)
			}
			return err
		}
		s.reportOrAbort(a, nil)
		if dst != nil {
			*dst = got
		}
		return nil
	}
}

// ledgerThenCounters is a one-batch stock change: a ledger row inserted
// with placeholder counters, then the guarded UPDATE of the bucket that
// writes the real counters into it and returns the bucket's version and
// the counters (decrementOrAbortSQL, releaseOrAbortSQL).
type ledgerThenCounters struct {
	ledger, ledgerReturning string // the insert, without and with RETURNING ledger_id, created_at
	ledgerArgs              []any
	counters                string
	counterArgs             []any
	report                  func(error) // to the observer; called only when it is set
}

// queueLedgerThenCounters queues q into b. When dst is non-nil or the
// Store has an observer, the results are read back: dst receives a's
// activity, SKU, bucket and quantity with the ledger row's id and time and
// the counters, and q.report hears of a success, of the duplicate the
// ledger insert met (matching [ErrAlreadyApplied]) or of the refusal, as
// classified by the Store.
func (s *Store) queueLedgerThenCounters(b *pgx.Batch, q ledgerThenCounters, a Allocation, dst *Allocated) {
	ledger := q.ledger
	if dst != nil {
		ledger = q.ledgerReturning
	}
	l := b.Queue(ledger, q.ledgerArgs...)
	c := b.Queue(q.counters, q.counterArgs...)
	if dst == nil && s.observer == nil {
		return // nothing to read back: the batch's own error handling suffices
	}
	report := func(err error) {
		if s.observer != nil {
			q.report(err)
		}
	}
	got := Allocated{ActivityID: a.ActivityID, SKUID: a.SKUID, Bucket: a.Bucket, Quantity: a.Quantity}
	ledgerErr := func(err error) error {
		err = s.fail.Classify(err)
		if errors.Is(err, ErrAlreadyApplied) {
			report(err)
		}
		return err
	}
	if dst == nil {
		l.Fn = func(br pgx.BatchResults) error {
			if _, err := br.Exec(); err != nil {
				return ledgerErr(err)
			}
			return nil
		}
	} else {
		l.QueryRow(func(row pgx.Row) error {
			if err := row.Scan(&got.LedgerID, &got.CreatedAt); err != nil {
				return ledgerErr(err)
			}
			return nil
		})
	}
	c.QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&got.Version, &got.BeforeAvailable, &got.AfterAvailable,
			&got.BeforeAllocated, &got.AfterAllocated); err != nil {
			err = s.fail.Classify(err)
			if refused(err) {
				report(err)
			}
			return err
		}
		report(nil)
		if dst != nil {
			*dst = got
		}
		return nil
	})
}

// reportOrAbort reports a classified result of
// [Store.QueueAllocateBucket] with [pgtx.Abort] to the observer, if any.
func (s *Store) reportOrAbort(a Allocation, err error) {
	if s.observer == nil {
		return
	}
	s.observer.AllocateEnd(context.Background(), StockEvent{ReservationID: a.ReservationID, ActivityID: a.ActivityID,
		SKUID: a.SKUID, Bucket: a.Bucket, Quantity: a.Quantity, Batch: true, Err: err})
}
