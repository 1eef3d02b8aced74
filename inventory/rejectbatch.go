package inventory

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// insertRejectedOrAbortSQL is insertReservationOrAbortSQL for a
// reservation decided at once as REJECTED with failure code $11: the row a
// PENDING_DB insert followed by the transition to REJECTED leaves. An
// existing reservation, request id raises unique_violation.
const insertRejectedOrAbortSQL = `
INSERT INTO {schema}.inventory_reservation (
	reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, status, redis_reserved_at, expires_at, failure_code)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 20, $9, $10, $11)`

// soldOutOrAbortSQL raises unless the sale of $1/$2 is on (status and
// window) and bucket $3 holds fewer than $4 available units: exactly when
// AllocateBucket would answer ErrSoldOut for this bucket now. It calls
// inventory_refuse with the condition that holds instead: the SKU unknown
// (SK004), the sale not on (SK002), the bucket unknown (SK003) or the
// bucket not sold out (SK008). It reads the bucket without locking it. Parameters: $1 activity, $2 SKU, $3 bucket,
// $4 quantity.
const soldOutOrAbortSQL = `
SELECT CASE WHEN w.code IS NULL THEN 1
            ELSE {schema}.inventory_refuse(w.code, $1, $2, $3, $4::int, NULL) END
  FROM (SELECT CASE
	               WHEN k.sku_id IS NULL THEN 'SK004'
	               WHEN NOT (k.sale_status = 10
	                         AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                         AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at)) THEN 'SK002'
	               WHEN b.bucket_no IS NULL THEN 'SK003'
	               WHEN b.available_stock >= $4::int THEN 'SK008'
	             END AS code
	        FROM (SELECT 1) AS o
	        LEFT JOIN {schema}.inventory_sku AS k ON k.activity_id = $1 AND k.sku_id = $2
	        LEFT JOIN {schema}.sku_inventory AS b ON b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3) AS w`

// QueueInsertRejectedReservationOrAbort queues the insert of r as a
// reservation REJECTED with failureCode (up to [MaxCodeLength]
// characters) into b, for a transaction sent as one batch that records a
// refusal decided before the transaction (for example by
// [Store.QueueSoldOutOrAbort] in the same batch). The row is the one
// [Store.AcquireReservation] followed by [Store.TransitionReservation] to
// REJECTED leaves (r.OrderID must be 0). An existing reservation or
// request id raises unique_violation (the primary key or
// uq_reservation_request), which aborts the whole transaction; the error
// [pgtx.RunBatch] returns names this call and matches
// [ErrReservationExists]. Invalid
// input returns a *ValidationError and queues nothing.
func (s *Store) QueueInsertRejectedReservationOrAbort(b *pgx.Batch, r NewReservation, failureCode string) error {
	if err := r.validate(); err != nil {
		return err
	}
	if r.OrderID != 0 {
		return invalid("OrderID", "must be 0 for a rejected reservation")
	}
	if failureCode == "" {
		return invalid("failureCode", "required")
	}
	if err := checkCode("failureCode", failureCode); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	args := acquireArgs(r)
	args[10] = failureCode
	from := b.Len()
	b.Queue(s.sql.insertRejectedOrAbort, args...)
	s.nameAbort(b, from, "inventory.Store.QueueInsertRejectedReservationOrAbort(reservation "+r.ReservationID.String()+")")
	return nil
}

// QueueSoldOutOrAbort queues into b a read that raises unless the
// allocation a would now be refused as sold out: the sale is on and a's
// bucket holds fewer than a.Quantity available units. So a batch that
// records a SOLD_OUT rejection commits only while that is true; when it
// raises, the error [pgtx.RunBatch] returns names this call and matches
// the condition that holds instead with errors.Is: [ErrNotSoldOut] (the
// bucket holds the quantity), [ErrNotOnSale], [ErrUnknownBucket] or
// [ErrUnknownSKU]; run the general path. It reads the bucket without
// locking it: a rejection does not wait for the transactions queued on the
// hot row. Invalid input returns a *ValidationError and queues nothing.
func (s *Store) QueueSoldOutOrAbort(b *pgx.Batch, a Allocation) error {
	if err := a.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	from := b.Len()
	b.Queue(s.sql.soldOutOrAbort, a.ActivityID, a.SKUID, a.Bucket, int32(a.Quantity))
	s.nameAbort(b, from, fmt.Sprintf("inventory.Store.QueueSoldOutOrAbort(activity %d sku %d bucket %d)", a.ActivityID, a.SKUID, a.Bucket))
	return nil
}
