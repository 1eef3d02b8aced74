package inventory

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// PickBucket returns the bucket, in [0, bucketCount), that key maps to:
// the 64-bit FNV-1a hash of key's bytes modulo bucketCount. It is pure and
// deterministic, so any process (and any language: FNV-1a is a few lines of
// Lua in a Redis script) maps the same key to the same bucket. Use a key
// that is fixed for the purchase, e.g. the reservation id or the user id as
// a decimal string.
//
// The front door (Redis in production) picks the bucket once, when it
// reserves, and records it in the reservation. The order transaction then
// decrements exactly that bucket ([Allocation].Bucket) and never switches to
// another one, even when it is sold out: otherwise the front door's and
// PostgreSQL's per-bucket stock could no longer be reconciled. Stranded stock in other buckets is moved by [Store.Rebalance], not
// by the order transaction.
//
// bucketCount outside 1..256 gives a *Error.
func PickBucket(key string, bucketCount int) (int16, error) {
	if bucketCount < 1 || bucketCount > maxBuckets {
		return 0, invalid("bucketCount", fmt.Sprintf("must be between 1 and %d", maxBuckets))
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return int16(h.Sum64() % uint64(bucketCount)), nil
}

// Bucket is one row of sku_inventory.
type Bucket struct {
	ActivityID, SKUID int64 // the SKU
	BucketNo          int16 // bucket_no, 0 .. the SKU's bucket count - 1
	Total             int32 // = Available + Allocated
	Available         int32 // available_stock: units an allocation can still take
	Allocated         int32 // allocated_stock: units held by allocations not released
	Version           int64 // incremented by every change
	// UpdatedAt is updated_at: the server time of the statement that last
	// changed the row (its creation, for a bucket never changed).
	UpdatedAt time.Time
}

func scanBucket(row pgx.Row, b *Bucket) error {
	return row.Scan(&b.ActivityID, &b.SKUID, &b.BucketNo, &b.Total, &b.Available, &b.Allocated, &b.Version, &b.UpdatedAt)
}

// GetBucket reads one bucket's counters. A bucket that does not exist
// gives [ErrUnknownBucket].
func (s *Store) GetBucket(ctx context.Context, db pgtx.Querier, activityID, skuID int64, bucketNo int16) (_ Bucket, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return Bucket{}, nilHandle("db")
	}
	var b Bucket
	err = scanBucket(db.QueryRow(ctx, s.sql.bucket, activityID, skuID, bucketNo), &b)
	if errors.Is(err, pgx.ErrNoRows) {
		return Bucket{}, fmt.Errorf("inventory: activity %d sku %d bucket %d: %w", activityID, skuID, bucketNo, ErrUnknownBucket)
	}
	if err != nil {
		return Bucket{}, fmt.Errorf("inventory: read bucket: %w", err)
	}
	return b, nil
}

// Stock is a SKU's stock, read in one snapshot: as provisioned, summed
// over its buckets, and bucket by bucket.
type Stock struct {
	ActivityID, SKUID int64    // the SKU, as asked
	PlannedStock      int32    // as provisioned
	BucketCount       int16    // as provisioned
	Buckets           []Bucket // the bucket rows in bucket order (BucketCount of them unless damaged)
	Total             int64    // sum of bucket totals; equals PlannedStock unless damaged
	Available         int64    // sum of the buckets' available stock
	Allocated         int64    // sum of the buckets' allocated stock: units held by live allocations
	SoldOutBuckets    int      // buckets with no available stock
}

// Stock reads a SKU's planned stock, its buckets and the sums over them,
// in one statement, hence one snapshot. An unknown SKU gives
// [ErrUnknownSKU].
func (s *Store) Stock(ctx context.Context, db pgtx.Querier, activityID, skuID int64) (_ Stock, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return Stock{}, nilHandle("db")
	}
	rows, err := db.Query(ctx, s.sql.stock, activityID, skuID)
	if err != nil {
		return Stock{}, fmt.Errorf("inventory: read stock: %w", err)
	}
	defer rows.Close()
	t := Stock{ActivityID: activityID, SKUID: skuID}
	found := false
	for rows.Next() {
		found = true
		var (
			act, sku                *int64
			no                      *int16
			total, avail, allocated *int32
			version                 *int64
			updated                 *time.Time
		)
		if err := rows.Scan(&t.PlannedStock, &t.BucketCount, &act, &sku, &no, &total, &avail, &allocated, &version, &updated); err != nil {
			return Stock{}, fmt.Errorf("inventory: read stock: %w", err)
		}
		if no == nil {
			continue // a SKU without bucket rows
		}
		b := Bucket{ActivityID: *act, SKUID: *sku, BucketNo: *no, Total: *total, Available: *avail, Allocated: *allocated,
			Version: *version, UpdatedAt: *updated}
		t.Buckets = append(t.Buckets, b)
		t.Total += int64(b.Total)
		t.Available += int64(b.Available)
		t.Allocated += int64(b.Allocated)
		if b.Available == 0 {
			t.SoldOutBuckets++
		}
	}
	if err := rows.Err(); err != nil {
		return Stock{}, fmt.Errorf("inventory: read stock: %w", err)
	}
	if !found {
		return Stock{}, fmt.Errorf("inventory: activity %d sku %d: %w", activityID, skuID, ErrUnknownSKU)
	}
	return t, nil
}
