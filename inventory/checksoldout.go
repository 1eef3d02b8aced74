package inventory

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// QueueCheckSoldOut queues into b a read that checks that the allocation
// a would now be refused as sold out: the sale is on and a's bucket holds
// fewer than a.Quantity available units. Otherwise the condition that
// holds instead is the refusal: [ErrNotSoldOut] (the bucket holds the
// quantity), [ErrNotOnSale], [ErrUnknownBucket] or [ErrUnknownSKU]. It
// reads the bucket without locking it: a rejection does not wait for the
// transactions queued on the hot row. Only a's activity, SKU, bucket and
// quantity are used (and must be valid). The returned error is only for
// invalid input, in which case nothing is queued.
//
// With [pgtx.Return] the refusal is the callback's error (returned by
// BatchResults.Close) and the transaction stays usable. With [pgtx.Abort]
// the read raises it, so a batch that records a SOLD_OUT rejection (the
// reservation queued by [Store.QueueAcquireReservation] with a
// FailureCode) commits only while the bucket is sold out; the error
// [pgtx.RunBatch] returns names this call and matches the condition with
// errors.Is; run the general path.
func (s *Store) QueueCheckSoldOut(b *pgx.Batch, a Allocation, on pgtx.OnRefusal) error {
	switch {
	case a.ActivityID <= 0:
		return invalid("ActivityID", "must be positive")
	case a.SKUID <= 0:
		return invalid("SKUID", "must be positive")
	case a.Bucket < 0 || a.Bucket >= maxBuckets:
		return invalid("Bucket", fmt.Sprintf("must be between 0 and %d", maxBuckets-1))
	case a.Quantity < 1:
		return invalid("Quantity", "must be at least 1")
	case b == nil:
		return invalid("batch", "must not be nil")
	}
	name := fmt.Sprintf("inventory.Store.QueueCheckSoldOut(activity %d sku %d bucket %d)", a.ActivityID, a.SKUID, a.Bucket)
	if on != pgtx.Abort {
		defer s.fail.Mark(b, "inventory.Store.QueueCheckSoldOut")()
		b.Queue(s.sql.soldOutCode, a.ActivityID, a.SKUID, a.Bucket, int32(a.Quantity)).QueryRow(func(row pgx.Row) error {
			var code *string
			if err := row.Scan(&code); err != nil {
				return err
			}
			if code == nil {
				return nil
			}
			return fmt.Errorf("%s: %w", name, refusals[*code])
		})
		return nil
	}
	from := b.Len()
	b.Queue(s.sql.soldOutOrAbort, a.ActivityID, a.SKUID, a.Bucket, int32(a.Quantity))
	s.nameAbort(b, from, name)
	return nil
}
