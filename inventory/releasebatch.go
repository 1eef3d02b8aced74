package inventory

import (
	"context"

	"github.com/jackc/pgx/v5"
)

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
// previous statement inserted. When the UPDATE takes nothing, the SELECT
// calls inventory_refuse with the condition releaseRefusalSQL finds (see
// countersSelect). UPDATEs in CTEs read by a SELECT: routed whole to one
// node on Citus.
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
)` + countersLedCTE + `$6` + countersSelect + `$5::text` + countersEnd + releaseRefusalSQL

// releaseRefusalSQL, joined after releaseOrAbortSQL's increment u, finds
// why it took nothing (only then): no ALLOCATE row $5 (SK006), one that is
// not this allocation (SK005), or else the bucket's allocated stock below
// the quantity, an invariant broken (SK007). The ALLOCATE row is read with
// the statement's snapshot, as the increment's guard read it; the bucket's
// stock is what the increment re-checked on its row after any wait.
// Parameters as releaseOrAbortSQL.
const releaseRefusalSQL = `
  LEFT JOIN LATERAL (
	SELECT CASE
	         WHEN l.ledger_id IS NULL THEN 'SK006'
	         WHEN NOT (l.activity_id = $1 AND l.sku_id = $2 AND l.inventory_bucket = $3
	                   AND l.allocated_delta = $4::int AND l.user_id = $7) THEN 'SK005'
	         ELSE 'SK007'
	       END AS code
	  FROM (SELECT 1) AS o
	  LEFT JOIN {schema}.inventory_ledger AS l ON l.idempotency_key = $5
	 WHERE u.version IS NULL) AS w ON true`

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
//     invariant broken): the increment raises the condition, [ErrNotAllocated]
//     (SQLSTATE SK006), [ErrAllocationMismatch] (SK005) or [ErrInconsistent]
//     (SK007).
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
// matching [ErrAlreadyApplied] for the duplicate, or the refusal. The
// error [pgtx.RunBatch] returns names this call and matches the
// condition's sentinel with errors.Is. Invalid
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
	from := b.Len()
	defer s.nameAbort(b, from, "inventory.Store.QueueReleaseStockOrAbort("+key+")")
	s.queueLedgerThenCounters(b, ledgerThenCounters{
		ledger: s.sql.releaseLedger, ledgerReturning: s.sql.releaseLedgerReturning, ledgerArgs: args,
		counters: s.sql.releaseOrAbort, counterArgs: []any{a.ActivityID, a.SKUID, a.Bucket, int32(a.Quantity),
			AllocateKey(a.ReservationID), key, a.UserID},
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
