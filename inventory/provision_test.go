package inventory_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/inventory"
)

func TestProvisionSplitsRemainderOverFirstBuckets(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, tc := range []struct {
		stock   int32
		buckets int16
	}{{10_000, 64}, {10, 3}, {1, 1}, {0, 4}, {3, 8}, {256, 256}, {1_000_003, 256}} {
		sku := int64(tc.stock) + int64(tc.buckets)*10_000_000
		res, err := tb.store.Provision(tb.ctx, tb.pool, inventory.SKU{ActivityID: 1, SKUID: sku, Stock: tc.stock, Buckets: tc.buckets})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Created || res.Buckets != int(tc.buckets) {
			t.Fatalf("stock %d/%d buckets: %+v", tc.stock, tc.buckets, res)
		}
		bs, err := inventory.BucketsOf(tb.store, tb.ctx, tb.pool, 1, sku)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != int(tc.buckets) {
			t.Fatalf("%d buckets, want %d", len(bs), tc.buckets)
		}
		var sum int32
		for i, b := range bs {
			q, r := tc.stock/int32(tc.buckets), tc.stock%int32(tc.buckets)
			want := q
			if int32(i) < r {
				want++
			}
			if b.BucketNo != int16(i) || b.Total != want || b.Available != want || b.Allocated != 0 {
				t.Fatalf("stock %d/%d buckets: bucket %d = %+v, want total=available=%d", tc.stock, tc.buckets, i, b, want)
			}
			if got, err := inventory.BucketStock(tc.stock, tc.buckets, int16(i)); err != nil || got != want {
				t.Fatalf("BucketStock(%d, %d, %d) = %d, %v; want %d", tc.stock, tc.buckets, i, got, err, want)
			}
			sum += b.Total
		}
		if sum != tc.stock {
			t.Fatalf("bucket totals sum to %d, want %d", sum, tc.stock)
		}
		tot := tb.totals(t, 1, sku)
		if tot.PlannedStock != tc.stock || tot.Total != int64(tc.stock) || tot.BucketCount != tc.buckets || len(tot.Buckets) != int(tc.buckets) {
			t.Fatalf("totals %+v", tot)
		}
		if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")+` WHERE sku_id = $1 AND ledger_type = 40`, sku); n != int64(tc.buckets) {
			t.Fatalf("%d PROVISION ledger rows, want %d", n, tc.buckets)
		}
		tb.auditClean(t, 1, sku)
	}
}

func TestProvisionIdempotentAndConflict(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	k := inventory.SKU{ActivityID: 7, SKUID: 8, Stock: 100, Buckets: 4}
	if res, err := tb.store.Provision(tb.ctx, tb.pool, k); err != nil || !res.Created {
		t.Fatalf("first: %+v, %v", res, err)
	}
	res, err := tb.store.Provision(tb.ctx, tb.pool, k)
	if err != nil || res.Created || res.Buckets != 0 {
		t.Fatalf("second: %+v, %v; want already provisioned", res, err)
	}
	for _, other := range []inventory.SKU{
		{ActivityID: 7, SKUID: 8, Stock: 101, Buckets: 4},
		{ActivityID: 7, SKUID: 8, Stock: 100, Buckets: 5},
		{ActivityID: 7, SKUID: 8, Stock: 100, Buckets: 1},
	} {
		_, err := tb.store.Provision(tb.ctx, tb.pool, other)
		var ce *inventory.Error
		if !errors.Is(err, inventory.ErrProvisionConflict) || !errors.As(err, &ce) {
			t.Fatalf("%+v: err %v, want ProvisionConflictError", other, err)
		}
		if ce.ExistingStock != 100 || ce.ExistingBuckets != 4 || ce.RequestedStock != other.Stock || ce.RequestedBuckets != other.Buckets {
			t.Fatalf("conflict details %+v", ce)
		}
	}
	if n := tb.count(t, `SELECT count(*) FROM `+tb.table("sku_inventory")); n != 4 {
		t.Fatalf("%d bucket rows, want 4", n)
	}
	if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")); n != 4 {
		t.Fatalf("%d ledger rows, want 4", n)
	}
	tb.auditClean(t, 7, 8)
}

func TestProvisionConcurrentSameSKU(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const callers = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
		errs    []error
	)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := tb.store.Provision(tb.ctx, tb.pool, inventory.SKU{ActivityID: 1, SKUID: 2, Stock: 1000, Buckets: 16})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if res.Created {
				created++
			}
		}()
	}
	testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
	if len(errs) > 0 || created != 1 {
		t.Fatalf("created %d times (want 1), errors %v", created, errs)
	}
	tb.auditClean(t, 1, 2)
}

func TestPickBucket(t *testing.T) {
	t.Parallel()
	// FNV-1a 64 of "" is the offset basis 0xcbf29ce484222325; of "a" it is
	// 0xaf63dc4c8601ec8c (published test vectors).
	if b, _ := inventory.PickBucket("", 251); b != int16(uint64(0xcbf29ce484222325)%251) {
		t.Fatalf(`PickBucket("", 251) = %d`, b)
	}
	if b, _ := inventory.PickBucket("a", 256); b != int16(uint64(0xaf63dc4c8601ec8c)%256) {
		t.Fatalf(`PickBucket("a", 256) = %d`, b)
	}
	hits := make([]int, 64)
	for i := range 64_000 {
		key := "user-" + string(rune('a'+i%26)) + "-" + itoa(i)
		b, err := inventory.PickBucket(key, 64)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := inventory.PickBucket(key, 64)
		if b != again || b < 0 || b >= 64 {
			t.Fatalf("PickBucket(%q) = %d then %d", key, b, again)
		}
		hits[b]++
	}
	for b, n := range hits {
		if n < 800 || n > 1200 { // expectation 1000; far outside means a broken hash
			t.Errorf("bucket %d got %d of 64000 keys", b, n)
		}
	}
	if b, err := inventory.PickBucket("x", 1); b != 0 || err != nil {
		t.Fatalf("PickBucket(x, 1) = %d, %v", b, err)
	}
	for _, n := range []int{0, -1, 257} {
		if _, err := inventory.PickBucket("x", n); !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Errorf("PickBucket(x, %d): err %v, want ErrInvalidArgument", n, err)
		}
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
