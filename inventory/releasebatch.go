package inventory

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// ReleaseRefused is the text of the error a refused
// [Store.QueueReleaseStockOrAbort] raises: PostgreSQL reports it as
// invalid_text_representation (SQLSTATE 22P02) with this text quoted in
// the message. [IsReleaseRefused] recognises it.
const ReleaseRefused = "SECKILL_RELEASE_REFUSED"

// IsReleaseRefused reports whether err (or an error it wraps) is the
// refusal [Store.QueueReleaseStockOrAbort]'s increment raises.
func IsReleaseRefused(err error) bool { return raised(err, ReleaseRefused) }

// releaseLedgerSQL inserts the RELEASE ledger row of
// [Store.QueueReleaseStockOrAbort] before the bucket is touched, as a plain
// INSERT … VALUES (see allocationLedgerSQL for why), with placeholder
// counters that satisfy the table's checks (before_available = 0,
// after_available = quantity, before_allocated = quantity,
// after_allocated = 0); releaseOrAbortSQL overwrites them in the same
// transaction. A RELEASE row with the same key raises unique_violation.
// Parameters as allocateSQL, with $5 the RELEASE key.
const releaseLedgerSQL = `
` + insertLedgerRow + `
VALUES ($5, $6, $7, $8, $1, $2, $9, $3, 20,
        0, $4::int, -$4::int,
        0, $4::int, $4::int, 0, $10)`

// releaseOrAbortSQL gives the quantity back to the bucket only when the
// reservation's ALLOCATE row is there with exactly this activity, SKU,
// bucket, quantity and buyer and the bucket's allocated stock covers it,
// then writes the counters around the increment into the RELEASE row the
// previous statement inserted. When the UPDATE takes nothing, the cast of
// ReleaseRefused raises 22P02 (see decrementOrAbortSQL). UPDATEs in CTEs
// read by a SELECT: routed whole to one node on Citus.
//
// Parameters: $1 activity, $2 SKU, $3 bucket, $4 quantity, $5 the ALLOCATE
// key, $6 the RELEASE key, $7 user.
const releaseOrAbortSQL = `
WITH upd AS (
	` + incrementSQL + `
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_ledger AS l
	                WHERE l.idempotency_key = $5 AND l.activity_id = $1 AND l.sku_id = $2
	                  AND l.inventory_bucket = $3 AND l.allocated_delta = $4::int AND l.user_id = $7)
	RETURNING available_stock - $4::int AS before_available, available_stock AS after_available,
	          allocated_stock + $4::int AS before_allocated, allocated_stock AS after_allocated, version
)` + countersLedCTE + `$6` + countersSelect + ReleaseRefused + countersEnd

// QueueReleaseStockOrAbort queues the release of allocation a into b, for
// a transaction sent as one batch ([pgtx.RunBatch], or several releases in
// one batch, as a timeout sweep sends them) that commits only when the
// stock was given back. a is the allocation as it was made (the order's
// activity, SKU, bucket, quantity, buyer, order id and source message id;
// [Reservation.Allocation] builds it from the reservation), and a.Reason
// the RELEASE reason ([DefaultReleaseReason] when empty). It is
// [Store.ReleaseStock] in two statements — the RELEASE ledger row, then
// the increment of the bucket, which writes the counters around it into
// that row — whose every refusal raises instead of returning a
// classification:
//
//   - the RELEASE row already there (a committed or concurrent duplicate):
//     the ledger insert raises unique_violation on
//     uq_inventory_ledger_idempotency;
//   - no ALLOCATE row with exactly a's activity, SKU, bucket, quantity and
//     buyer, or a bucket whose allocated stock is below a.Quantity (an
//     invariant broken): the increment raises invalid_text_representation
//     (SQLSTATE 22P02) carrying [ReleaseRefused] ([IsReleaseRefused]).
//
// Either aborts the whole transaction; nothing is written. ReleaseStock
// in a new transaction classifies the refusal. Unlike ReleaseStock's one
// statement (a chain of data-modifying CTEs ending in an INSERT … SELECT),
// both statements are routed whole to one node on Citus (schema-based
// sharding), so the transaction commits there with one phase.
//
// When the batch runs, a non-nil dst receives the RELEASE row's id, time
// and counters, the bucket's new version, and the allocation's activity,
// SKU, bucket and quantity. The
// [Observer] hears of it like of [Store.QueueReleaseStock]: Err nil, one
// wrapping [ErrAlreadyApplied] for the duplicate, or the refusal. Invalid
// input returns a *ValidationError and queues nothing.
func (s *Store) QueueReleaseStockOrAbort(b *pgx.Batch, a Allocation, dst *Allocated) error {
	if err := a.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	if a.Reason == "" {
		a.Reason = DefaultReleaseReason
	}
	key := ReleaseKey(a.ReservationID)
	args := allocateArgs(a)
	args[4] = key
	s.queueLedgerThenCounters(b, ledgerThenCounters{
		ledger: s.sql.releaseLedger, ledgerReturning: s.sql.releaseLedgerReturning, ledgerArgs: args,
		counters: s.sql.releaseOrAbort, counterArgs: []any{a.ActivityID, a.SKUID, a.Bucket, int32(a.Quantity),
			AllocateKey(a.ReservationID), key, a.UserID},
		what: "release " + key, refused: IsReleaseRefused,
		report: func(err error) {
			e := ReleaseEvent{ReservationID: a.ReservationID, ActivityID: a.ActivityID, SKUID: a.SKUID, Bucket: a.Bucket,
				Quantity: a.Quantity, Batch: true, Err: err}
			if err != nil {
				e.ActivityID, e.SKUID, e.Bucket, e.Quantity = 0, 0, -1, 0
			}
			s.observer.ReleaseEnd(context.Background(), e)
		},
	}, a, dst)
	return nil
}
