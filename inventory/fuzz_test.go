package inventory_test

import (
	"context"
	"errors"
	"hash/fnv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// FuzzPickBucket: for any key and count, PickBucket returns a bucket in
// [0, count) equal to FNV-1a(key) mod count (so it is deterministic and
// portable), or a *ValidationError when count is outside 1..MaxBuckets.
func FuzzPickBucket(f *testing.F) {
	f.Add("", 1)
	f.Add("user-42", 64)
	f.Add("01a22cc9-ca32-70dd-b7de-57e6197b048b", inventory.MaxBuckets)
	f.Add("'; DROP TABLE sku_inventory; --\x00\xff", 7)
	f.Add("k", 0)
	f.Add("k", -1)
	f.Add("k", inventory.MaxBuckets+1)
	f.Fuzz(func(t *testing.T, key string, n int) {
		got, err := inventory.PickBucket(key, n)
		if n < 1 || n > inventory.MaxBuckets {
			var ve *inventory.Error
			if !errors.Is(err, inventory.ErrInvalidArgument) || !errors.As(err, &ve) || got != 0 {
				t.Fatalf("PickBucket(%q, %d) = %d, %v; want a *ValidationError", key, n, got, err)
			}
			return
		}
		h := fnv.New64a()
		h.Write([]byte(key))
		if err != nil || got < 0 || int(got) >= n || uint64(got) != h.Sum64()%uint64(n) {
			t.Fatalf("PickBucket(%q, %d) = %d, %v", key, n, got, err)
		}
		if again, _ := inventory.PickBucket(key, n); again != got {
			t.Fatal("not deterministic")
		}
	})
}

// FuzzBucketStock: the split of any non-negative stock over 1..MaxBuckets
// buckets gives every bucket stock/n or stock/n+1 and sums to stock.
func FuzzBucketStock(f *testing.F) {
	f.Add(int32(10000), int16(64))
	f.Add(int32(0), int16(1))
	f.Add(int32(1<<31-1), int16(inventory.MaxBuckets))
	f.Add(int32(3), int16(7))
	f.Add(int32(5), int16(0))
	f.Add(int32(-1), int16(4))
	f.Fuzz(func(t *testing.T, stock int32, n int16) {
		if stock < 0 || n < 1 || n > inventory.MaxBuckets {
			// Rejected with a typed error, like Provision rejects it.
			if _, err := inventory.BucketStock(stock, n, 0); !errors.Is(err, inventory.ErrInvalidArgument) {
				t.Fatalf("BucketStock(%d, %d, 0): %v", stock, n, err)
			}
			return
		}
		if _, err := inventory.BucketStock(stock, n, n); !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Fatalf("BucketStock(%d, %d, %d): %v", stock, n, n, err)
		}
		var sum int64
		for b := int16(0); b < n; b++ {
			s, err := inventory.BucketStock(stock, n, b)
			if err != nil {
				t.Fatal(err)
			}
			if s != stock/int32(n) && s != stock/int32(n)+1 {
				t.Fatalf("BucketStock(%d, %d, %d) = %d", stock, n, b, s)
			}
			sum += int64(s)
		}
		if sum != int64(stock) {
			t.Fatalf("BucketStock(%d, %d, ·) sums to %d", stock, n, sum)
		}
	})
}

// FuzzCodeValidation feeds arbitrary ledger reasons, failure codes,
// quantities and buckets to the write helpers. Validation never panics
// and never touches the database (noDB fails the test if it is used); what
// it accepts is storable: valid UTF-8 without NUL, at most MaxCodeLength
// characters, a bucket in range and a positive quantity.
func FuzzCodeValidation(f *testing.F) {
	f.Add("ORDER_CREATED", int16(1), int16(0))
	f.Add("'; DROP TABLE inventory_ledger; --", int16(1), int16(255))
	f.Add("a\x00b", int16(1), int16(0))
	f.Add("\xff", int16(1), int16(0))
	f.Add(strings.Repeat("é", inventory.MaxCodeLength), int16(1), int16(0))
	f.Add("ok", int16(-1), int16(256))
	f.Fuzz(func(t *testing.T, code string, qty, bucket int16) {
		s, err := inventory.New(inventory.Config{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		db := noDB{t: t}
		id := uuid.Must(uuid.NewV7())
		storable := utf8.ValidString(code) && strings.IndexByte(code, 0) < 0 && utf8.RuneCountInString(code) <= inventory.MaxCodeLength
		alloc := inventory.Allocation{
			Request: seckill.Request{ReservationID: id, ActivityID: 1, SKUID: 1, Bucket: bucket, Quantity: qty, UserID: 1, MessageID: id},
			Reason:  code,
		}
		var b pgx.Batch
		errs := map[string]error{
			"allocate":   s.QueueAllocateBucket(&b, alloc, new(inventory.Allocated), pgtx.Return),
			"release":    s.QueueReleaseStock(&b, inventory.StockRelease{Request: seckill.Request{ReservationID: id}, Reason: code}, new(inventory.Allocated), pgtx.Return),
			"transition": s.QueueTransitionReservation(&b, inventory.Transition{ReservationID: id, To: inventory.StatusRejected, FailureCode: code}, new(inventory.Reservation), pgtx.Return),
		}
		if !storable { // (a valid request would go on to the database)
			_, errs["rebalance"] = s.Rebalance(ctx, db, inventory.RebalanceRequest{ActivityID: 1, SKUID: 1, Reason: code})
		}
		queued := 0
		for name, err := range errs {
			valid := storable && (name != "allocate" || qty >= 1 && bucket >= 0 && bucket < inventory.MaxBuckets)
			if valid && err != nil || !valid && !errors.Is(err, inventory.ErrInvalidArgument) {
				t.Fatalf("%s(code %q, qty %d, bucket %d) = %v (storable %v)", name, code, qty, bucket, err, valid)
			}
			if err == nil {
				queued++
			}
		}
		if b.Len() != queued {
			t.Fatalf("%d statements queued for %d accepted calls", b.Len(), queued)
		}
	})
}
