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
	if s.observer.ReleaseEnd != nil && !errors.As(err, &driverErr) {
		e := StockEvent{ReservationID: r.ReservationID, ActivityID: dst.ActivityID, SKUID: dst.SKUID, Bucket: dst.Bucket,
			Quantity: dst.Quantity, Batch: batch, Err: err}
		if err != nil {
			e.ActivityID, e.SKUID, e.Bucket, e.Quantity = 0, 0, -1, 0
		}
		s.observer.releaseEnd(ctx, e)
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

// queueReleaseOrAbort is [Store.QueueReleaseStock] with [pgtx.Abort].
func (s *Store) queueReleaseOrAbort(b *pgx.Batch, r StockRelease, dst *Allocated) error {
	a := Allocation{Request: r.Request, Reason: r.Reason}
	if err := a.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	if a.Reason == "" {
		a.Reason = defaultReleaseReason
	}
	key := releaseKey(a.ReservationID)
	args := allocateArgs(a)
	args[4] = key
	from := b.Len()
	defer s.nameAbort(b, from, "inventory.Store.QueueReleaseStock("+key+")")
	q := ledgerThenCounters{
		ledger: s.sql.releaseLedger, ledgerReturning: s.sql.releaseLedgerReturning, ledgerArgs: args,
		counters: s.sql.releaseOrAbort, counterArgs: []any{a.ActivityID, a.SKUID, a.Bucket, int32(a.Quantity),
			allocateKey(a.ReservationID), key, a.UserID},
	}
	if s.observer.ReleaseEnd != nil {
		q.report = func(err error) {
			e := StockEvent{ReservationID: a.ReservationID, ActivityID: a.ActivityID, SKUID: a.SKUID, Bucket: a.Bucket,
				Quantity: a.Quantity, Batch: true, Err: err}
			if err != nil {
				e.ActivityID, e.SKUID, e.Bucket, e.Quantity = 0, 0, -1, 0
			}
			s.observer.ReleaseEnd(context.Background(), e)
		}
	}
	s.queueLedgerThenCounters(b, q, a, dst)
	return nil
}

// releaseRouted is ReleaseStock for Config.Citus: the ALLOCATE row read,
// then the release_placeholder and release_routed statements in one batch,
// classified as the release statement's row.
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
