package inventory

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// releaseLedgerSQL inserts the RELEASE ledger row of
// [Store.QueueReleaseStock] with [pgtx.Abort] before the bucket is touched, as a plain
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
	s.queueLedgerThenCounters(b, ledgerThenCounters{
		ledger: s.sql.releaseLedger, ledgerReturning: s.sql.releaseLedgerReturning, ledgerArgs: args,
		counters: s.sql.releaseOrAbort, counterArgs: []any{a.ActivityID, a.SKUID, a.Bucket, int32(a.Quantity),
			allocateKey(a.ReservationID), key, a.UserID},
		report: func(err error) {
			e := StockEvent{ReservationID: a.ReservationID, ActivityID: a.ActivityID, SKUID: a.SKUID, Bucket: a.Bucket,
				Quantity: a.Quantity, Batch: true, Err: err}
			if err != nil {
				e.ActivityID, e.SKUID, e.Bucket, e.Quantity = 0, 0, -1, 0
			}
			s.observer.ReleaseEnd(context.Background(), e)
		},
	}, a, dst)
	return nil
}
