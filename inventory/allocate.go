package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgval"
	"github.com/seckillkit/seckill/internal/twin"
	"github.com/seckillkit/seckill/pgtx"
)

// Ledger reasons written when the caller gives none.
const (
	defaultAllocateReason = "ORDER_CREATED"
	defaultReleaseReason  = "ORDER_CANCELLED"
)

// allocateKey returns the ledger idempotency key of a reservation's
// allocation: "ALLOCATE:<reservation_id>".
func allocateKey(reservationID uuid.UUID) string { return "ALLOCATE:" + reservationID.String() }

// releaseKey returns the ledger idempotency key of a reservation's
// release: "RELEASE:<reservation_id>".
func releaseKey(reservationID uuid.UUID) string { return "RELEASE:" + reservationID.String() }

// Allocation asks [Store.AllocateBucket] to take stock from one bucket
// for one reservation (and [Store.QueueCheckSoldOut] to check that it
// would be refused as sold out). Of the embedded request it uses:
//
//   - ReservationID, required: the ledger key is ALLOCATE:<ReservationID>;
//   - ActivityID, SKUID and UserID (> 0), Bucket (0..255: the
//     reservation's bucket, never another one) and Quantity (>= 1): they
//     must be the reservation's;
//   - OrderID, recorded in the ledger (0: none);
//   - MessageID, required: the message being processed, recorded in the
//     ledger.
//
// RequestID is not used.
type Allocation struct {
	seckill.Request
	// Reason is the ledger reason, up to 64 characters.
	// Defaults to "ORDER_CREATED".
	Reason string
}

func (a Allocation) validate() error {
	if err := validPurchase(a.Request); err != nil {
		return err
	}
	switch {
	case a.OrderID < 0:
		return invalid("OrderID", "must not be negative")
	case a.MessageID == uuid.Nil:
		return invalid("MessageID", "required")
	}
	return checkCode("Reason", a.Reason)
}

// validPurchase checks the fields of a request every allocation and
// reservation needs: the reservation id, the SKU, the buyer, the bucket
// and the quantity.
func validPurchase(r seckill.Request) error {
	switch {
	case r.ReservationID == uuid.Nil:
		return invalid("ReservationID", "required")
	case r.ActivityID <= 0:
		return invalid("ActivityID", "must be positive")
	case r.SKUID <= 0:
		return invalid("SKUID", "must be positive")
	case r.Bucket < 0 || r.Bucket >= maxBuckets:
		return invalid("Bucket", fmt.Sprintf("must be between 0 and %d", maxBuckets-1))
	case r.Quantity < 1:
		return invalid("Quantity", "must be at least 1")
	case r.UserID <= 0:
		return invalid("UserID", "must be positive")
	}
	return nil
}

// Allocated is a successful allocation or release: the bucket's counters
// around the change, as recorded in the ledger row.
type Allocated struct {
	LedgerID   int64 // the ALLOCATE (or RELEASE) ledger row written
	ActivityID int64 // the SKU's activity
	SKUID      int64 // the SKU
	// Bucket is the bucket changed: the reservation's (for a release, the
	// one its ALLOCATE row names).
	Bucket int16
	// Quantity is the units moved from available to allocated (a release:
	// back from allocated to available).
	Quantity int16
	// BeforeAvailable, AfterAvailable, BeforeAllocated and AfterAllocated
	// are the bucket's counters just before and just after the change, as
	// the ledger row records them.
	BeforeAvailable int32
	AfterAvailable  int32 // see BeforeAvailable
	BeforeAllocated int32 // see BeforeAvailable
	AfterAllocated  int32 // see BeforeAvailable
	Version         int64 // the bucket's version after the change
	// CreatedAt is the ledger row's created_at: the server time of the
	// statement (not of the commit).
	CreatedAt time.Time
}

// decrementSQL is the conditional decrement of one bucket that
// allocateSQL and decrementOrAbortSQL share: $1 activity, $2 SKU, $3
// bucket, $4 quantity taken. Each adds its guards on the reservation, the
// sale and the ALLOCATE ledger row.
const decrementSQL = `UPDATE {schema}.sku_inventory
	   SET available_stock = available_stock - $4::int,
	       allocated_stock = allocated_stock + $4::int,
	       version = version + 1,
	       updated_at = statement_timestamp()
	 WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3
	   AND available_stock >= $4::int`

// allocationReadsSQL starts allocateSQL and allocateRoutedSQL: r, the
// reservation $6's columns that bind the allocation, and sk, the sale's
// state ($1 activity, $2 SKU) at the statement's time.
const allocationReadsSQL = `WITH r AS (
	SELECT activity_id, sku_id, inventory_bucket, quantity, user_id, status
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $6
), sk AS (
	SELECT sale_status, sale_starts_at, sale_ends_at,
	       sale_status = 10
	       AND (sale_starts_at IS NULL OR sale_starts_at <= statement_timestamp())
	       AND (sale_ends_at IS NULL OR statement_timestamp() < sale_ends_at) AS selling,
	       statement_timestamp() AS at
	  FROM {schema}.inventory_sku
	 WHERE activity_id = $1 AND sku_id = $2
)`

// incrementSQL is the guarded increment of one bucket that the one-batch
// release (releaseOrAbortSQL) and the release of Config.Citus
// (releaseRoutedSQL) share, the mirror of decrementSQL: $1 activity, $2
// SKU, $3 bucket, $4 quantity given back. Each adds its guard on the
// ledger.
const incrementSQL = `UPDATE {schema}.sku_inventory
	   SET available_stock = available_stock + $4::int,
	       allocated_stock = allocated_stock - $4::int,
	       version = version + 1,
	       updated_at = statement_timestamp()
	 WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3
	   AND allocated_stock >= $4::int`

// allocationBound ends the decrement of allocateSQL and allocateRoutedSQL
// (after their guard on the ledger): the reservation r bound to the
// allocation ($1 activity, $2 SKU, $3 bucket, $4 quantity, $9 buyer) and
// still PENDING_DB or ORDERED, the sale on; it returns the counters around
// the decrement and the bucket's version.
const allocationBound = `
	   AND EXISTS (SELECT 1 FROM r
	                WHERE r.activity_id = $1 AND r.sku_id = $2 AND r.inventory_bucket = $3
	                  AND r.quantity = $4::int AND r.user_id = $9 AND r.status IN (0, 10))
	   AND (SELECT selling FROM sk)
	RETURNING available_stock + $4::int AS before_available, available_stock AS after_available,
	          allocated_stock - $4::int AS before_allocated, allocated_stock AS after_allocated, version`

// allocationOutcome is the end of allocateSQL's result row after the
// applied ledger id: for a refused allocation, the bucket's available
// stock, read with a snapshot of its own (migration 007: after a wait for
// the bucket's lock, the statement's snapshot still holds the units the
// transaction it waited for took); then allocationExplained.
const allocationOutcome = `       CASE WHEN l.ledger_id IS NULL THEN
         {schema}.inventory_available_now($1, $2, $3::smallint) END,
` + allocationExplained

// allocationExplained ends allocateSQL's and allocateRoutedSQL's result
// row: what explains a refusal, the reservation r and the sale sk.
const allocationExplained = `       r.activity_id, r.sku_id, r.inventory_bucket, r.quantity, r.user_id, r.status,
       sk.sale_status, sk.sale_starts_at, sk.sale_ends_at, sk.selling, sk.at`

// allocateSQL is the bucket decrement and its ledger row in one
// statement. The UPDATE decrements
// only when the bucket has the stock AND no ALLOCATE row exists for the
// reservation; the ledger INSERT runs only for the updated row. When nothing
// was updated the final SELECT classifies why: an existing ledger row, read
// by inventory_ledger_id_now with a fresh snapshot (migration 002), then a
// missing bucket, otherwise sold out.
//
// Binding to the reservation: the UPDATE decrements only when the
// reservation row ($6) exists with exactly the caller's activity, SKU,
// bucket, quantity and user, in PENDING_DB or ORDERED, so a caller cannot
// take stock for a reservation from another bucket, in another quantity,
// for another buyer, or for a reservation already rejected, expired or
// released. Those columns never change after the insert; the status is
// the caller's business to hold still (the reservation row lock).
//
// Idempotency under concurrency: the NOT EXISTS guard sees the statement's
// snapshot. A duplicate that commits before the statement starts is seen and
// nothing is decremented. A duplicate that is still running is invisible to
// the guard, so this statement may decrement too, but its ledger INSERT then
// hits the unique index uq_inventory_ledger_idempotency, which waits for the
// other transaction and raises unique_violation if it commits: the whole
// statement, decrement included, fails, and the caller's transaction aborts.
// The unique index is the final guard; the bucket is never decremented twice
// for one reservation. A duplicate that waited for the bucket's row lock
// while the other transaction took the last units finds, after that commit,
// a bucket whose own condition fails; its snapshot still misses the other
// ledger row, which is why the zero-row branch probes the ledger with a
// snapshot of its own: every concurrent duplicate is classified as already
// applied, whatever the bucket's stock.
const allocateSQL = `
` + allocationReadsSQL + `, upd AS (
	` + decrementSQL + `
	   AND NOT EXISTS (SELECT 1 FROM {schema}.inventory_ledger WHERE idempotency_key = $5)` + allocationBound + `
), led AS (
	INSERT INTO {schema}.inventory_ledger (
		idempotency_key, reservation_id, order_id, source_message_id,
		activity_id, sku_id, user_id, inventory_bucket, ledger_type,
		total_delta, available_delta, allocated_delta,
		before_available, after_available, before_allocated, after_allocated, reason)
	SELECT $5, $6, $7, $8, $1, $2, $9, $3, 10,
	       0, -$4::int, $4::int,
	       u.before_available, u.after_available, u.before_allocated, u.after_allocated, $10
	  FROM upd AS u
	RETURNING ledger_id, created_at
)
SELECT l.ledger_id, l.created_at,
       u.before_available, u.after_available, u.before_allocated, u.after_allocated, u.version,
       CASE WHEN l.ledger_id IS NULL THEN {schema}.inventory_ledger_id_now($5) END,
` + allocationOutcome + `
  FROM (VALUES (1)) AS one (x)
  LEFT JOIN upd AS u ON true
  LEFT JOIN led AS l ON true
  LEFT JOIN r ON true
  LEFT JOIN sk ON true`

// AllocateBucket takes a.Quantity from the available stock of bucket
// a.Bucket for the reservation a.ReservationID, which must be recorded
// with exactly a's activity, SKU, bucket, quantity and buyer and be
// PENDING_DB or ORDERED (a's request is the reservation's), and
// writes the ALLOCATE ledger row (idempotency key
// ALLOCATE:<reservation_id>, with the counters before and after) in one
// statement, in the caller's transaction tx. The decrement is conditional
// (available_stock >= quantity), so under Read Committed concurrent callers
// can never oversell: a waiting UPDATE re-checks the condition on the row
// the previous one committed.
//
// Outcomes:
//   - nil error: allocated; the result holds the ledger id and counters.
//   - *Error ([ErrSoldOut]): the bucket lacks the stock. Nothing
//     written; the transaction stays usable (reject the reservation).
//   - [ErrUnknownBucket]: the bucket (or SKU) was never provisioned.
//   - [ErrReservationNotFound]: no reservation a.ReservationID is visible
//     to tx (record it first: [Store.AcquireReservation]).
//   - *Error ([ErrNotOnSale]; its Status and window say why): the SKU is not
//     ON_SALE or the statement's time is outside its sale window
//     ([Store.SetSaleStatus]). Nothing written; tx stays usable (reject
//     the reservation).
//   - *Error ([ErrAllocationMismatch]): the reservation
//     has another activity, SKU, bucket, quantity or buyer than a, or is
//     no longer PENDING_DB or ORDERED. Nothing written; tx stays usable.
//   - *Error ([ErrAlreadyApplied]): the reservation's ALLOCATE row
//     exists; nothing was decremented again. With TxAborted set the
//     duplicate was concurrent and tx is aborted (see [Error]).
//     With Config.Citus a concurrent duplicate never aborts tx: the
//     ledger row is inserted first, with ON CONFLICT DO NOTHING, which
//     waits for the other transaction and then inserts nothing.
//   - *Error ([ErrInvalidArgument]): bad input, nothing sent.
//
// Concurrent duplicates of one reservation are classified as already
// applied whatever the bucket's stock: a duplicate that waited behind the
// original for the bucket's row lock, and then finds the bucket emptied by
// it, re-reads the ledger key after the wait instead of calling itself sold
// out. The reservation row lock ([Store.AcquireReservation]) still
// serialises them first in a real order transaction.
//
// With Config.Citus the allocation is two statements sent as one batch
// (one round trip): the ALLOCATE row with placeholder counters, then the
// decrement, which writes the counters into that row or, refused, deletes
// it. The outcomes are the same.
//
// Lock order: the reservation, then the bucket. The bucket row is the
// hottest lock of the order transaction; call AllocateBucket as late as correctness allows (after the
// reservation lock and the order insert) so the row is held only until
// COMMIT.
func (s *Store) AllocateBucket(ctx context.Context, tx pgx.Tx, a Allocation) (_ Allocated, err error) {
	defer s.fail.Explain(&err)
	if tx == nil {
		return Allocated{}, nilHandle("tx")
	}
	if err := a.validate(); err != nil {
		return Allocated{}, err
	}
	if s.citus {
		return s.allocateRouted(a).Run(ctx, tx)
	}
	return s.allocateRow(a).Run(ctx, tx)
}

// QueueAllocateBucket queues the allocation a into b. The returned error
// is only for invalid input, in which case nothing is queued; dst, when
// not nil, receives the result when the batch results are read.
//
// With [pgtx.Return] it queues [Store.AllocateBucket]'s statement: the
// callback's error (returned by BatchResults.Close) is classified as
// described there and, a concurrent duplicate aside, the transaction
// stays usable.
//
// With [pgtx.Abort] it queues the allocation for a transaction sent as
// one batch ([pgtx.RunBatch]) that commits only when the stock was taken.
// It is AllocateBucket in two statements — the conditional decrement of
// the bucket, then the ALLOCATE ledger row with the counters around it;
// with Config.Citus, the ledger row first, then the decrement, which
// writes the counters into that row — whose every refusal raises instead
// of returning a classification:
//
//   - the ALLOCATE row already there (a duplicate that committed, or a
//     concurrent one that commits while this transaction waits for it):
//     the ledger insert raises unique_violation on
//     uq_inventory_ledger_idempotency ([ErrAlreadyApplied]);
//   - the decrement raises the condition that refused it: sold out
//     ([ErrSoldOut], SQLSTATE SK001), the sale not on, by status or
//     window ([ErrNotOnSale], SK002), the bucket or the SKU not
//     provisioned ([ErrUnknownBucket] SK003, [ErrUnknownSKU] SK004), the
//     reservation missing ([ErrReservationNotFound], SK009) or not
//     recorded with exactly a's activity, SKU, bucket, quantity and buyer
//     in PENDING_DB or ORDERED ([ErrAllocationMismatch], SK005).
//
// The error [pgtx.RunBatch] returns names this call and matches the
// condition's sentinel with errors.Is (see [ErrNotSoldOut] for the
// table of conditions). Either aborts the whole transaction, COMMIT
// included; nothing is written. Run the general path (AllocateBucket, in
// a new transaction) for the refusal's details. Queue it last, as
// AllocateBucket is called last (after the reservation, in the lock
// order): the bucket row stays locked from the decrement to COMMIT.
//
// With Config.Citus both statements are routed whole to one node on Citus
// (schema-based sharding), so the transaction commits there with one
// phase; without it the ledger row is an INSERT … SELECT from the bucket,
// written once with its counters, which is faster on plain PostgreSQL
// (12% on one bucket, 22% on 64) and which Citus pulls through the
// coordinator. The [Observer] hears of it per attempt and before the
// COMMIT: Err nil when both statements succeeded, the refusal's error
// (matching its sentinel) when the decrement refused, one matching
// [ErrAlreadyApplied] when the ledger insert met the duplicate.
func (s *Store) QueueAllocateBucket(b *pgx.Batch, a Allocation, dst *Allocated, on pgtx.OnRefusal) error {
	if on == pgtx.Abort {
		return s.queueAllocateOrAbort(b, a, dst)
	}
	defer s.fail.Mark(b, "inventory.Store.QueueAllocateBucket")()
	if err := a.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	if dst == nil {
		dst = new(Allocated)
	}
	if s.citus {
		s.allocateRouted(a).Queue(b, dst)
	} else {
		s.allocateRow(a).Queue(b, dst)
	}
	return nil
}

// allocateRow is the allocation statement of a validated a, shared by
// [Store.AllocateBucket] and its Queue twin.
func (s *Store) allocateRow(a Allocation) twin.Row[Allocated] {
	return twin.Row[Allocated]{SQL: s.sql.allocate, Args: allocateArgs(a),
		Scan: func(ctx context.Context, batch bool, row pgx.Row, dst *Allocated) error {
			return s.scanAllocate(ctx, batch, row, a, dst)
		}}
}

func allocateArgs(a Allocation) []any {
	var order *int64
	if a.OrderID != 0 {
		order = &a.OrderID
	}
	reason := a.Reason
	if reason == "" {
		reason = defaultAllocateReason
	}
	return []any{a.ActivityID, a.SKUID, a.Bucket, int32(a.Quantity), allocateKey(a.ReservationID),
		pgval.UUID(a.ReservationID), order, pgval.UUID(a.MessageID), a.UserID, reason}
}

// scanAllocate classifies an allocation's result and reports it (batch:
// the Queue form, whose callback has no context).
func (s *Store) scanAllocate(ctx context.Context, batch bool, row pgx.Row, a Allocation, dst *Allocated) error {
	return s.observeAllocate(ctx, batch, a, classifyAllocate(row, a, dst))
}

// observeAllocate reports an allocation's outcome err to the observer
// (not a driver error) and returns err.
func (s *Store) observeAllocate(ctx context.Context, batch bool, a Allocation, err error) error {
	var driverErr *driverError
	if s.observer != nil && !errors.As(err, &driverErr) {
		s.observer.AllocateEnd(ctx, StockEvent{ReservationID: a.ReservationID, ActivityID: a.ActivityID,
			SKUID: a.SKUID, Bucket: a.Bucket, Quantity: a.Quantity, Batch: batch, Err: err})
	}
	return err
}

func classifyAllocate(row pgx.Row, a Allocation, dst *Allocated) error {
	var (
		ledgerID, version, appliedID                    *int64
		createdAt                                       *time.Time
		beforeAvail, afterAvail, beforeAlloc, afterAllo *int32
		curAvail                                        *int32
		rAct, rSKU, rUser                               *int64
		rBucket, rQty, rStatus                          *int16
		saleStatus                                      *int16
		saleFrom, saleTo, saleAt                        *time.Time
		selling                                         *bool
	)
	key := allocateKey(a.ReservationID)
	err := row.Scan(&ledgerID, &createdAt, &beforeAvail, &afterAvail, &beforeAlloc, &afterAllo, &version, &appliedID, &curAvail,
		&rAct, &rSKU, &rBucket, &rQty, &rUser, &rStatus, &saleStatus, &saleFrom, &saleTo, &selling, &saleAt)
	switch {
	case err != nil && uniqueViolation(err, "uq_inventory_ledger_idempotency"):
		return &Error{Err: ErrAlreadyApplied, Key: key, TxAborted: true, Cause: err}
	case err != nil:
		return &driverError{fmt.Errorf("inventory: allocate %s: %w", key, err)}
	case ledgerID != nil:
		*dst = Allocated{
			LedgerID: *ledgerID, ActivityID: a.ActivityID, SKUID: a.SKUID, Bucket: a.Bucket, Quantity: a.Quantity,
			BeforeAvailable: *beforeAvail, AfterAvailable: *afterAvail,
			BeforeAllocated: *beforeAlloc, AfterAllocated: *afterAllo,
			Version: *version, CreatedAt: *createdAt,
		}
		return nil
	case appliedID != nil:
		return &Error{Err: ErrAlreadyApplied, Key: key, LedgerID: *appliedID}
	case rAct == nil:
		return fmt.Errorf("inventory: allocate %s: reservation %s: %w", key, a.ReservationID, ErrReservationNotFound)
	}
	if field, want, got := allocationDiff(a, *rAct, *rSKU, *rBucket, *rQty, *rUser, ReservationStatus(*rStatus)); field != "" {
		return &Error{Err: ErrAllocationMismatch, ReservationID: a.ReservationID, Field: field, Found: got, Asked: want}
	}
	switch {
	case saleStatus != nil && !*selling:
		e := &Error{Err: ErrNotOnSale, ActivityID: a.ActivityID, SKUID: a.SKUID, Status: SaleStatus(*saleStatus), At: *saleAt}
		if saleFrom != nil {
			e.StartsAt = *saleFrom
		}
		if saleTo != nil {
			e.EndsAt = *saleTo
		}
		return e
	case curAvail == nil:
		return fmt.Errorf("inventory: allocate %s: activity %d sku %d bucket %d: %w",
			key, a.ActivityID, a.SKUID, a.Bucket, ErrUnknownBucket)
	default:
		return &Error{Err: ErrSoldOut, ActivityID: a.ActivityID, SKUID: a.SKUID, Bucket: a.Bucket,
			Requested: a.Quantity, Available: *curAvail}
	}
}

// allocationDiff names the first column in which the reservation differs
// from the allocation (or "status" when the reservation may no longer
// take stock), with both values as text; "" when they agree.
func allocationDiff(a Allocation, act, sku int64, bucket, qty int16, user int64, st ReservationStatus) (field, want, got string) {
	d := func(f string, w, g any) (string, string, string) { return f, fmt.Sprint(w), fmt.Sprint(g) }
	switch {
	case act != a.ActivityID:
		return d("activity_id", a.ActivityID, act)
	case sku != a.SKUID:
		return d("sku_id", a.SKUID, sku)
	case bucket != a.Bucket:
		return d("inventory_bucket", a.Bucket, bucket)
	case qty != a.Quantity:
		return d("quantity", a.Quantity, qty)
	case user != a.UserID:
		return d("user_id", a.UserID, user)
	case st != StatusPendingDB && st != StatusOrdered:
		return d("status", "PENDING_DB or ORDERED", st)
	}
	return "", "", ""
}

// StockRelease asks [Store.ReleaseStock] to give back a reservation's
// allocation. Of the embedded request it uses:
//
//   - ReservationID, required: the ledger key is RELEASE:<ReservationID>;
//   - OrderID and MessageID, recorded in the ledger: 0 and uuid.Nil mean
//     the allocation's;
//   - ActivityID, SKUID, Bucket, Quantity and UserID: ignored by the
//     direct form and by [Store.QueueReleaseStock] with [pgtx.Return],
//     which read them from the ALLOCATE row; required with [pgtx.Abort],
//     which releases exactly this allocation (it must match the ALLOCATE
//     row) and then also requires MessageID.
//
// RequestID is not used.
type StockRelease struct {
	seckill.Request
	// Reason is the ledger reason, up to 64 characters.
	// Defaults to "ORDER_CANCELLED".
	Reason string
}

func (r StockRelease) validate() error {
	switch {
	case r.ReservationID == uuid.Nil:
		return invalid("ReservationID", "required")
	case r.OrderID < 0:
		return invalid("OrderID", "must not be negative")
	}
	return checkCode("Reason", r.Reason)
}

// releaseSQL is the mirror of allocateSQL: it takes bucket,
// quantity and buyer from the reservation's ALLOCATE ledger row, so a
// release gives back exactly what was allocated, to the same bucket, and
// there is no RELEASE without its ALLOCATE. Guards: allocated_stock >=
// quantity and no RELEASE row yet; the unique index is the final guard
// against a concurrent duplicate, and the zero-row branch re-reads the
// RELEASE key with a fresh snapshot, as for allocateSQL.
const releaseSQL = `
WITH a AS (
	SELECT reservation_id, activity_id, sku_id, inventory_bucket, user_id, order_id,
	       source_message_id, allocated_delta AS qty
	  FROM {schema}.inventory_ledger
	 WHERE idempotency_key = $1
), upd AS (
	UPDATE {schema}.sku_inventory AS s
	   SET available_stock = s.available_stock + a.qty,
	       allocated_stock = s.allocated_stock - a.qty,
	       version = s.version + 1,
	       updated_at = statement_timestamp()
	  FROM a
	 WHERE s.activity_id = a.activity_id AND s.sku_id = a.sku_id AND s.bucket_no = a.inventory_bucket
	   AND s.allocated_stock >= a.qty
	   AND NOT EXISTS (SELECT 1 FROM {schema}.inventory_ledger WHERE idempotency_key = $2)
	RETURNING a.reservation_id, a.activity_id, a.sku_id, a.inventory_bucket, a.user_id, a.order_id,
	          a.source_message_id, a.qty,
	          s.available_stock - a.qty AS before_available, s.available_stock AS after_available,
	          s.allocated_stock + a.qty AS before_allocated, s.allocated_stock AS after_allocated, s.version
), led AS (
	INSERT INTO {schema}.inventory_ledger (
		idempotency_key, reservation_id, order_id, source_message_id,
		activity_id, sku_id, user_id, inventory_bucket, ledger_type,
		total_delta, available_delta, allocated_delta,
		before_available, after_available, before_allocated, after_allocated, reason)
	SELECT $2, u.reservation_id, coalesce($3, u.order_id), coalesce($4, u.source_message_id),
	       u.activity_id, u.sku_id, u.user_id, u.inventory_bucket, 20,
	       0, u.qty, -u.qty,
	       u.before_available, u.after_available, u.before_allocated, u.after_allocated, $5
	  FROM upd AS u
	RETURNING ledger_id, created_at
)
SELECT l.ledger_id, l.created_at, a.activity_id, a.sku_id, a.inventory_bucket, a.qty::smallint,
       u.before_available, u.after_available, u.before_allocated, u.after_allocated, u.version,
       CASE WHEN l.ledger_id IS NULL THEN {schema}.inventory_ledger_id_now($2) END
  FROM (VALUES (1)) AS one (x)
  LEFT JOIN a ON true
  LEFT JOIN upd AS u ON true
  LEFT JOIN led AS l ON true`

// ReleaseStock gives back the stock a reservation's allocation took: it moves
// the ALLOCATE row's quantity from allocated back to available on the same
// bucket and writes the RELEASE ledger row (idempotency key
// RELEASE:<reservation_id>), in one statement, in the caller's transaction
// tx (with the order cancellation and the compensation event).
//
// Outcomes: nil error (released; counters in the result); *Error
// ([ErrAlreadyApplied]) when the RELEASE row exists (nothing changed; with
// TxAborted for a concurrent duplicate, as for [Store.AllocateBucket]);
// [ErrNotAllocated] when the reservation has no ALLOCATE row;
// [ErrInconsistent] when the bucket's allocated stock is below the
// allocation (an invariant is broken; nothing written; a concurrent
// duplicate that emptied the bucket's allocated stock before this one got
// its lock is already applied, never inconsistent);
// *Error for bad input (nothing sent).
//
// With Config.Citus it takes two round trips of statements Citus routes
// whole: the ALLOCATE row is read, then the RELEASE row is inserted with
// placeholder counters and the increment writes the counters into it (or,
// refused, deletes it), as [Store.AllocateBucket] does; a concurrent
// duplicate then never aborts tx. [Store.QueueReleaseStock] always queues
// the one statement.
func (s *Store) ReleaseStock(ctx context.Context, tx pgx.Tx, r StockRelease) (_ Allocated, err error) {
	defer s.fail.Explain(&err)
	if tx == nil {
		return Allocated{}, nilHandle("tx")
	}
	if err := r.validate(); err != nil {
		return Allocated{}, err
	}
	if s.citus {
		return s.releaseRouted(ctx, tx, r)
	}
	return s.releaseRow(r).Run(ctx, tx)
}

// QueueReleaseStock queues the release r into b. The returned error is
// only for invalid input, in which case nothing is queued; dst, when not
// nil, receives the result when the batch results are read.
//
// With [pgtx.Return] it queues [Store.ReleaseStock]'s statement: the
// callback's error (returned by BatchResults.Close) is classified as
// described there and the transaction stays usable.
//
// With [pgtx.Abort] it queues the release for a transaction sent as one
// batch ([pgtx.RunBatch], or several releases in one batch, as a timeout
// sweep sends them) that commits only when the stock was given back. r
// must then be the allocation as it was made (see [StockRelease]). It is
// ReleaseStock in two statements — the RELEASE ledger row, then the
// increment of the bucket, which writes the counters around it into that
// row — whose every refusal raises instead of returning a
// classification:
//
//   - the RELEASE row already there (a committed or concurrent duplicate):
//     the ledger insert raises unique_violation on
//     uq_inventory_ledger_idempotency;
//   - no ALLOCATE row with exactly r's activity, SKU, bucket, quantity and
//     buyer, or a bucket whose allocated stock is below r.Quantity (an
//     invariant broken): the increment raises the condition, [ErrNotAllocated]
//     (SQLSTATE SK006), [ErrAllocationMismatch] (SK005) or [ErrInconsistent]
//     (SK007).
//
// Either aborts the whole transaction; nothing is written. ReleaseStock
// in a new transaction classifies the refusal. Unlike ReleaseStock's one
// statement (a chain of data-modifying CTEs ending in an INSERT … SELECT),
// both statements are routed whole to one node on Citus (schema-based
// sharding), so the transaction commits there with one phase. A non-nil
// dst receives the RELEASE row's id, time and counters, the bucket's new
// version, and the allocation's activity, SKU, bucket and quantity. The
// [Observer] hears of it: Err nil, one matching [ErrAlreadyApplied] for the
// duplicate, or the refusal. The error [pgtx.RunBatch] returns names this
// call and matches the condition's sentinel with errors.Is.
func (s *Store) QueueReleaseStock(b *pgx.Batch, r StockRelease, dst *Allocated, on pgtx.OnRefusal) error {
	if on == pgtx.Abort {
		return s.queueReleaseOrAbort(b, r, dst)
	}
	defer s.fail.Mark(b, "inventory.Store.QueueReleaseStock")()
	if err := r.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	if dst == nil {
		dst = new(Allocated)
	}
	s.releaseRow(r).Queue(b, dst)
	return nil
}

// releaseRow is the release statement of a validated r, shared by
// [Store.ReleaseStock] and its Queue twin.
func (s *Store) releaseRow(r StockRelease) twin.Row[Allocated] {
	return twin.Row[Allocated]{SQL: s.sql.release, Args: releaseArgs(r),
		Scan: func(ctx context.Context, batch bool, row pgx.Row, dst *Allocated) error {
			return s.scanRelease(ctx, batch, row, r, dst)
		}}
}

func releaseArgs(r StockRelease) []any {
	var order *int64
	if r.OrderID != 0 {
		order = &r.OrderID
	}
	var msg pgtype.UUID // NULL: the ALLOCATE row's message
	if r.MessageID != uuid.Nil {
		msg = pgval.UUID(r.MessageID)
	}
	reason := r.Reason
	if reason == "" {
		reason = defaultReleaseReason
	}
	return []any{allocateKey(r.ReservationID), releaseKey(r.ReservationID), order, msg, reason}
}

// scanRelease classifies a release's result and reports it (batch: the
// Queue form, whose callback has no context).
func (s *Store) scanRelease(ctx context.Context, batch bool, row pgx.Row, r StockRelease, dst *Allocated) error {
	return s.reportRelease(ctx, batch, r, dst, classifyRelease(row, r, dst))
}

// reportRelease reports a release's classified result err to the
// observer, if any, and returns err.
func (s *Store) reportRelease(ctx context.Context, batch bool, r StockRelease, dst *Allocated, err error) error {
	var driverErr *driverError
	if s.observer != nil && !errors.As(err, &driverErr) {
		e := StockEvent{ReservationID: r.ReservationID, ActivityID: dst.ActivityID, SKUID: dst.SKUID, Bucket: dst.Bucket,
			Quantity: dst.Quantity, Batch: batch, Err: err}
		if err != nil {
			e.ActivityID, e.SKUID, e.Bucket, e.Quantity = 0, 0, -1, 0
		}
		s.observer.ReleaseEnd(ctx, e)
	}
	return err
}

func classifyRelease(row pgx.Row, r StockRelease, dst *Allocated) error {
	var (
		ledgerID, version, appliedID, activity, sku     *int64
		createdAt                                       *time.Time
		bucket, qty                                     *int16
		beforeAvail, afterAvail, beforeAlloc, afterAllo *int32
	)
	key := releaseKey(r.ReservationID)
	err := row.Scan(&ledgerID, &createdAt, &activity, &sku, &bucket, &qty,
		&beforeAvail, &afterAvail, &beforeAlloc, &afterAllo, &version, &appliedID)
	switch {
	case err != nil && uniqueViolation(err, "uq_inventory_ledger_idempotency"):
		return &Error{Err: ErrAlreadyApplied, Key: key, TxAborted: true, Cause: err}
	case err != nil:
		return &driverError{fmt.Errorf("inventory: release %s: %w", key, err)}
	case ledgerID != nil:
		*dst = Allocated{
			LedgerID: *ledgerID, ActivityID: *activity, SKUID: *sku, Bucket: *bucket, Quantity: *qty,
			BeforeAvailable: *beforeAvail, AfterAvailable: *afterAvail,
			BeforeAllocated: *beforeAlloc, AfterAllocated: *afterAllo,
			Version: *version, CreatedAt: *createdAt,
		}
		return nil
	case appliedID != nil:
		return &Error{Err: ErrAlreadyApplied, Key: key, LedgerID: *appliedID}
	case activity == nil:
		return fmt.Errorf("inventory: release %s: %w", key, ErrNotAllocated)
	default:
		return fmt.Errorf("inventory: release %s: bucket %d of activity %d sku %d has less allocated stock than the allocation of %d: %w",
			key, *bucket, *activity, *sku, *qty, ErrInconsistent)
	}
}

// driverError marks an error that is not a classification of the result
// (connection or server failure); it is not reported to the Observer.
type driverError struct{ err error }

// Error implements error.
func (e *driverError) Error() string { return e.err.Error() }

// Unwrap returns the wrapped error.
func (e *driverError) Unwrap() error { return e.err }
