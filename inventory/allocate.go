package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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
	if s.observer.AllocateEnd != nil && !errors.As(err, &driverErr) {
		s.observer.allocateEnd(ctx, StockEvent{ReservationID: a.ReservationID, ActivityID: a.ActivityID,
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

// driverError marks an error that is not a classification of the result
// (connection or server failure); it is not reported to the Observer.
type driverError struct{ err error }

// Error implements error.
func (e *driverError) Error() string { return e.err.Error() }

// Unwrap returns the wrapped error.
func (e *driverError) Unwrap() error { return e.err }

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
		report: s.reportOrAbortHook(a),
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
	if dst == nil && s.observer.AllocateEnd == nil {
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
// the counters (statements decrement_abort, release_abort).
type ledgerThenCounters struct {
	ledger, ledgerReturning string // the insert, without and with RETURNING ledger_id, created_at
	ledgerArgs              []any
	counters                string
	counterArgs             []any
	report                  func(error) // to the observer's hook; nil when that hook is not set
}

// queueLedgerThenCounters queues q into b. When dst is non-nil or
// q.report is set, the results are read back: dst receives a's
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
	if dst == nil && q.report == nil {
		return // nothing to read back: the batch's own error handling suffices
	}
	report := func(err error) {
		if q.report != nil {
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

// reportOrAbortHook returns reportOrAbort for a, or nil when the
// observer has no AllocateEnd hook.
func (s *Store) reportOrAbortHook(a Allocation) func(error) {
	if s.observer.AllocateEnd == nil {
		return nil
	}
	return func(err error) { s.reportOrAbort(a, err) }
}

// reportOrAbort reports a classified result of
// [Store.QueueAllocateBucket] with [pgtx.Abort] to the observer's
// AllocateEnd, if set.
func (s *Store) reportOrAbort(a Allocation, err error) {
	s.observer.allocateEnd(context.Background(), StockEvent{ReservationID: a.ReservationID, ActivityID: a.ActivityID,
		SKUID: a.SKUID, Bucket: a.Bucket, Quantity: a.Quantity, Batch: true, Err: err})
}

// placeholderReason returns a ledger reason no other call writes: the
// marker of the allocation_placeholder statement's row (56 characters, within
// maxCodeLength).
func placeholderReason() string { return "SECKILL_PLACEHOLDER " + uuid.NewString() }

// allocateRouted is AllocateBucket's statements for Config.Citus (the
// placeholder, the allocation, the stock a refusal reports), classified as
// the allocate statement's row.
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
		b.Queue(s.sql.availableNow, a.ActivityID, a.SKUID, a.Bucket, pgval.UUID(a.ReservationID)).QueryRow(func(row pgx.Row) error {
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
