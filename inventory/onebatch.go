package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/internal/pgval"
	"github.com/seckillkit/seckill/pgtx"
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

// AllocationRefused is the text of the error a refused
// [Store.QueueAllocateBucketOrAbort] raises: PostgreSQL reports it as
// invalid_text_representation (SQLSTATE 22P02) with this text quoted in
// the message. [IsAllocationRefused] recognises it.
const AllocationRefused = "SECKILL_ALLOCATION_REFUSED"

// allocationLedgerSQL inserts the ALLOCATE ledger row of
// [Store.QueueAllocateBucketOrAbort] before the bucket is touched, as a
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
// outer SELECT casts AllocationRefused to a number, which raises 22P02 and
// aborts the transaction. (The cast's argument depends on the UPDATE's
// result, so the planner cannot fold it into a constant and raise on every
// execution.) It returns the bucket's new version and the counters.
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
)` + countersLedCTE + `$7` + countersSelect + AllocationRefused + countersEnd

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

// decrementThenLedger is QueueAllocateBucketOrAbort's pair on plain
// PostgreSQL (without Config.Citus): the guarded decrement first, which
// raises AllocationRefused when it takes nothing and otherwise returns the
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
SELECT coalesce((SELECT version::text FROM upd), '` + AllocationRefused + `')::int8`

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
// or, when upd took nothing, casts the refusal text written between
// countersSelect and countersEnd to a number, which raises 22P02. (The
// cast's argument depends on the UPDATE's result, so the planner cannot
// fold it into a constant and raise on every execution.)
const (
	countersLedCTE = `, led AS (
	UPDATE {schema}.inventory_ledger AS l
	   SET before_available = u.before_available, after_available = u.after_available,
	       before_allocated = u.before_allocated, after_allocated = u.after_allocated
	  FROM upd AS u
	 WHERE l.idempotency_key = `
	countersSelect = `
)
SELECT coalesce((SELECT version::text FROM upd), '`
	countersEnd = `')::int8,
       u.before_available, u.after_available, u.before_allocated, u.after_allocated
  FROM (SELECT 1) AS one LEFT JOIN upd AS u ON true`
)

// QueueInsertReservationOrAbort queues the insert of the new reservation r
// into b, for a transaction sent as one batch ([pgtx.RunBatch]) that
// commits only when the reservation is new. It records r as
// [Store.AcquireReservation] does for a new row (PENDING_DB, or ORDERED
// with r.OrderID), and holds the row's lock as the inserter; but a
// reservation that exists is not returned for inspection: the insert
// raises unique_violation (SQLSTATE 23505; [pgtx.UniqueViolationOf] names
// the constraint: the primary key for the same reservation,
// uq_reservation_request for its request id, uq_reservation_order for
// r.OrderID), which aborts the whole transaction, COMMIT included. A
// concurrent insert of the same reservation makes it wait, then raise if
// that transaction commits. Run the general path (AcquireReservation, in a
// new transaction) after an abort to learn what the reservation became.
//
// Invalid input returns a *ValidationError and queues nothing.
func (s *Store) QueueInsertReservationOrAbort(b *pgx.Batch, r NewReservation) error {
	if err := r.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	b.Queue(s.sql.insertReservationOrAbort, acquireArgs(r)...)
	return nil
}

// QueueAllocateBucketOrAbort queues the allocation a into b, for a
// transaction sent as one batch ([pgtx.RunBatch]) that commits only when
// the stock was taken. It is [Store.AllocateBucket] in two statements —
// the conditional decrement of the bucket, then the ALLOCATE ledger row
// with the counters around it; with Config.Citus, the ledger row first,
// then the decrement, which writes the counters into that row — whose
// every refusal raises instead of returning a classification:
//
//   - the ALLOCATE row already there (a duplicate that committed, or a
//     concurrent one that commits while this transaction waits for it):
//     the ledger insert raises unique_violation on
//     uq_inventory_ledger_idempotency;
//   - sold out, the sale not on (status or window), the reservation not
//     recorded with exactly a's activity, SKU, bucket, quantity and buyer
//     in PENDING_DB or ORDERED, or the bucket not provisioned: the
//     decrement raises invalid_text_representation (SQLSTATE 22P02)
//     carrying [AllocationRefused] ([IsAllocationRefused] reports it).
//
// With Config.Citus both statements are routed whole to one node on Citus
// (schema-based sharding), so the transaction commits there with one
// phase; without it the ledger row is an INSERT … SELECT from the bucket,
// written once with its counters, which is faster on plain PostgreSQL
// (12% on one bucket, 22% on 64) and which Citus pulls through the coordinator.
//
// Either aborts the whole transaction, COMMIT included; nothing is written.
// Run the general path (AllocateBucket, in a new transaction) to learn
// which refusal it was. Queue it last, as AllocateBucket is called last
// (after the reservation, in the lock order): the bucket row stays locked
// from the decrement to COMMIT.
//
// When the batch runs, a non-nil dst receives the ledger row's id and
// counters and the bucket's new version. The [Observer] hears of it like
// of [Store.QueueAllocateBucket], per attempt and before the COMMIT: Err
// nil when both statements succeeded, an error for which
// [IsAllocationRefused] is true when the decrement refused, one wrapping
// [ErrAlreadyApplied] when the ledger insert met the duplicate.
// Invalid input returns a *ValidationError and queues nothing.
func (s *Store) QueueAllocateBucketOrAbort(b *pgx.Batch, a Allocation, dst *Allocated) error {
	if err := a.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	key := AllocateKey(a.ReservationID)
	decrementArgs := []any{a.ActivityID, a.SKUID, a.Bucket, int32(a.Quantity), pgval.UUID(a.ReservationID), a.UserID}
	if !s.citus {
		s.queueDecrementThenLedger(b, a, decrementArgs, dst)
		return nil
	}
	s.queueLedgerThenCounters(b, ledgerThenCounters{
		ledger: s.sql.allocationLedger, ledgerReturning: s.sql.allocationLedgerReturning, ledgerArgs: allocateArgs(a),
		counters: s.sql.decrementOrAbort, counterArgs: append(decrementArgs, key),
		what: "allocate " + key, refused: IsAllocationRefused,
		report: func(err error) { s.reportOrAbort(a, err) },
	}, a, dst)
	return nil
}

// queueDecrementThenLedger queues decrementThenLedger into b, with the
// read-back of queueLedgerThenCounters: dst (when non-nil) and the
// observer hear of a success, of the refusal, or of the duplicate the
// ledger insert met.
func (s *Store) queueDecrementThenLedger(b *pgx.Batch, a Allocation, decrementArgs []any, dst *Allocated) {
	key := AllocateKey(a.ReservationID)
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
			if IsAllocationRefused(err) {
				s.reportOrAbort(a, err)
			}
			return fmt.Errorf("inventory: allocate %s: %w", key, err)
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
			if _, ok := pgtx.UniqueViolationOf(err); ok {
				s.reportOrAbort(a, fmt.Errorf("%w: %w", ErrAlreadyApplied, err))
			}
			return fmt.Errorf("inventory: allocate %s: ledger: %w", key, err)
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
	what                    string           // for errors: "allocate <key>", "release <key>"
	refused                 func(error) bool // the counters statement's refusal
	report                  func(error)      // to the observer; called only when it is set
}

// queueLedgerThenCounters queues q into b. When dst is non-nil or the
// Store has an observer, the results are read back: dst receives a's
// activity, SKU, bucket and quantity with the ledger row's id and time and
// the counters, and q.report hears of a success, of the duplicate the
// ledger insert met (wrapping [ErrAlreadyApplied]) or of the refusal.
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
		if _, ok := pgtx.UniqueViolationOf(err); ok {
			report(fmt.Errorf("%w: %w", ErrAlreadyApplied, err))
		}
		return fmt.Errorf("inventory: %s: ledger: %w", q.what, err)
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
			if q.refused(err) {
				report(err)
			}
			return fmt.Errorf("inventory: %s: %w", q.what, err)
		}
		report(nil)
		if dst != nil {
			*dst = got
		}
		return nil
	})
}

// reportOrAbort reports a classified result of
// [Store.QueueAllocateBucketOrAbort] to the observer, if any.
func (s *Store) reportOrAbort(a Allocation, err error) {
	if s.observer == nil {
		return
	}
	s.observer.AllocateEnd(context.Background(), AllocateEvent{ReservationID: a.ReservationID, ActivityID: a.ActivityID,
		SKUID: a.SKUID, Bucket: a.Bucket, Quantity: a.Quantity, Batch: true, Err: err})
}

// IsAllocationRefused reports whether err (or an error it wraps) is the
// refusal [Store.QueueAllocateBucketOrAbort]'s decrement raises.
func IsAllocationRefused(err error) bool { return raised(err, AllocationRefused) }

// raised reports whether err (or an error it wraps) is the
// invalid_text_representation (22P02) that casting text to a number
// raises, with text in its message: how the one-batch statements refuse.
func raised(err error, text string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InvalidTextRepresentation &&
		strings.Contains(pgErr.Message, text)
}
