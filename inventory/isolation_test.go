package inventory_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inventory"
)

// TestOperationsTouchOnlyTheirSKU: the SKU operations other than
// allocation and release (provisioning again, the sale's status and its
// log, a bucket's read, a rebalance) act on their own SKU only, beside
// SKU 20 of two other activities (written first, their sales paused, so
// that a statement that lost its activity filter meets their rows first)
// and another SKU of the activity, all with the same bucket numbers, on
// the plain and the Citus statements: nothing of theirs changes, and what
// is read is SKU 2/20's own. (SKU 2/19 is written before 2/20, and both
// other activities' bucket 1 hold what 2/20's does before the rebalance.)
func TestOperationsTouchOnlyTheirSKU(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 3, 20, 10, 2)
		tb.provision(t, 1, 20, 7, 2)
		for _, act := range []int64{1, 3} {
			if _, err := tb.setSale(t, inventory.SaleChange{ActivityID: act, SKUID: 20, To: inventory.SalePaused, Operator: "test", Reason: "other activity"}); err != nil {
				t.Fatal(err)
			}
		}
		tb.provision(t, 2, 19, 10, 2)
		tb.provision(t, 2, 20, 10, 2)
		others := func() string {
			t.Helper()
			var s string
			if err := tb.pool.QueryRow(tb.ctx, `SELECT
					(SELECT string_agg(format('%s/%s/%s:%s/%s/%s/%s', activity_id, sku_id, bucket_no, total_stock, available_stock, allocated_stock, version), ' '
						ORDER BY activity_id, sku_id, bucket_no) FROM `+tb.table("sku_inventory")+` WHERE NOT (activity_id = 2 AND sku_id = 20))
					|| ' | ' || (SELECT string_agg(format('%s/%s:%s/%s/%s/%s', activity_id, sku_id, planned_stock, bucket_count, sale_status, sale_version), ' '
						ORDER BY activity_id, sku_id) FROM `+tb.table("inventory_sku")+` WHERE NOT (activity_id = 2 AND sku_id = 20))`).Scan(&s); err != nil {
				t.Fatal(err)
			}
			return s
		}
		before := others()

		// Provisioned again, identically: nothing created, no conflict.
		if got, err := tb.store.Provision(tb.ctx, tb.pool, inventory.SKU{ActivityID: 2, SKUID: 20, Stock: 10, Buckets: 2}); err != nil || got.Created {
			t.Fatalf("provision 2/20 again: %+v, %v; want it found as it is", got, err)
		}

		// The sale paused and opened again: its log holds its own two
		// changes (and its own provisioning, if logged), none of the others'.
		log0, err := tb.store.SaleLog(tb.ctx, tb.pool, 2, 20)
		if err != nil {
			t.Fatal(err)
		}
		for _, to := range []inventory.SaleStatus{inventory.SalePaused, inventory.SaleOnSale} {
			if _, err := tb.setSale(t, inventory.SaleChange{ActivityID: 2, SKUID: 20, To: to, Operator: "test", Reason: "own"}); err != nil {
				t.Fatal(err)
			}
		}
		log, err := tb.store.SaleLog(tb.ctx, tb.pool, 2, 20)
		if n := len(log); err != nil || n != len(log0)+2 || log[n-2].From != inventory.SaleOnSale || log[n-2].To != inventory.SalePaused ||
			log[n-1].From != inventory.SalePaused || log[n-1].To != inventory.SaleOnSale {
			t.Fatalf("sale log of 2/20: %+v, %v; want its %d entries and the two changes", log, err, len(log0))
		}
		for _, c := range log {
			if c.ActivityID != 2 || c.SKUID != 20 {
				t.Fatalf("sale log of 2/20 holds %+v", c)
			}
		}

		// A bucket's read is its own.
		if bk, err := tb.store.GetBucket(tb.ctx, tb.pool, 2, 20, 1); err != nil || bk.ActivityID != 2 || bk.SKUID != 20 || bk.Total != 5 {
			t.Fatalf("bucket 2/20/1: %+v, %v", bk, err)
		}

		// A rebalance after bucket 0 sold 4 of its 5: it evens out 2/20's
		// buckets only.
		for range 4 {
			r := tb.reservationFor(t, 2, 20, 2, func(b int16) bool { return b == 0 })
			if err := tb.buy(tb.ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		var moved inventory.Rebalanced
		if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			var err error
			moved, err = tb.store.Rebalance(tb.ctx, tx, inventory.RebalanceRequest{ActivityID: 2, SKUID: 20})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		b0, err0 := tb.store.GetBucket(tb.ctx, tb.pool, 2, 20, 0)
		b1, err1 := tb.store.GetBucket(tb.ctx, tb.pool, 2, 20, 1)
		if err0 != nil || err1 != nil || b0.Available+b1.Available != 6 || b0.Available-b1.Available > 1 || b1.Available-b0.Available > 1 {
			t.Fatalf("after the rebalance (%+v): buckets %+v, %+v (%v, %v); want 6 available, evened out", moved, b0, b1, err0, err1)
		}
		if after := others(); after != before {
			t.Fatalf("the other SKUs changed:\n before %s\n after  %s", before, after)
		}
		tb.auditClean(t, 2, 20)
	})
}

// TestRebalanceSpreadsTheLastUnits: a rebalance of buckets holding 0, 0
// and 2 units leaves no bucket with more than one, and no unit lost.
func TestRebalanceSpreadsTheLastUnits(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 4, 40, 6, 3)
	for _, b := range []int16{0, 0, 1, 1} {
		r := tb.reservationFor(t, 4, 40, 3, func(got int16) bool { return got == b })
		if err := tb.buy(tb.ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	tb.rebalance(t, 4, 40)
	var avail []int32
	for b := range int16(3) {
		bk, err := tb.store.GetBucket(tb.ctx, tb.pool, 4, 40, b)
		if err != nil {
			t.Fatal(err)
		}
		avail = append(avail, bk.Available)
	}
	if avail[0]+avail[1]+avail[2] != 2 || avail[0] > 1 || avail[1] > 1 || avail[2] > 1 {
		t.Fatalf("available after the rebalance %v; want 2 units spread one per bucket", avail)
	}
	tb.auditClean(t, 4, 40)
}
