package inventory

import (
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

// NotSoldOut is the text of the error [Store.QueueSoldOutOrAbort] raises
// when the bucket is not sold out for the allocation (or the sale is not
// on, or the bucket is unknown): PostgreSQL reports it as
// invalid_text_representation (SQLSTATE 22P02) with this text quoted in
// the message. [IsNotSoldOut] recognises it.
const NotSoldOut = "SECKILL_NOT_SOLD_OUT"

// IsNotSoldOut reports whether err (or an error it wraps) is the refusal
// [Store.QueueSoldOutOrAbort] raises.
func IsNotSoldOut(err error) bool { return raised(err, NotSoldOut) }

// soldOutOrAbortSQL raises unless the sale of $1/$2 is on (status and
// window) and bucket $3 holds fewer than $4 available units: exactly when
// AllocateBucket would answer ErrSoldOut for this bucket now. It reads the
// bucket without locking it. Parameters: $1 activity, $2 SKU, $3 bucket,
// $4 quantity.
const soldOutOrAbortSQL = `
SELECT coalesce((
	SELECT 1::text
	  FROM {schema}.sku_inventory AS b
	  JOIN {schema}.inventory_sku AS k ON k.activity_id = b.activity_id AND k.sku_id = b.sku_id
	 WHERE b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3
	   AND b.available_stock < $4::int
	   AND k.sale_status = 10
	   AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	   AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at)), '` + NotSoldOut + `')::int`

// QueueInsertRejectedReservationOrAbort queues the insert of r as a
// reservation REJECTED with failureCode (up to [MaxCodeLength]
// characters) into b, for a transaction sent as one batch that records a
// refusal decided before the transaction (for example by
// [Store.QueueSoldOutOrAbort] in the same batch). The row is the one
// [Store.AcquireReservation] followed by [Store.TransitionReservation] to
// REJECTED leaves (r.OrderID must be 0). An existing reservation or
// request id raises unique_violation (the primary key or
// uq_reservation_request), which aborts the whole transaction. Invalid
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
	b.Queue(s.sql.insertRejectedOrAbort, args...)
	return nil
}

// QueueSoldOutOrAbort queues into b a read that raises unless the
// allocation a would now be refused as sold out: the sale is on and a's
// bucket holds fewer than a.Quantity available units. So a batch that
// records a SOLD_OUT rejection commits only while that is true; when it
// raises (invalid_text_representation carrying [NotSoldOut],
// [IsNotSoldOut]), run the general path. It reads the bucket without
// locking it: a rejection does not wait for the transactions queued on the
// hot row. Invalid input returns a *ValidationError and queues nothing.
func (s *Store) QueueSoldOutOrAbort(b *pgx.Batch, a Allocation) error {
	if err := a.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	b.Queue(s.sql.soldOutOrAbort, a.ActivityID, a.SKUID, a.Bucket, int32(a.Quantity))
	return nil
}
