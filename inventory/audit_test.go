package inventory_test

import (
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inventory"
)

// Each case damages one SKU the way a bug or a manual fix could (the
// CHECK constraints rule out the rest) and expects exactly these finding
// kinds from Audit.
func TestAuditFindsBrokenInvariants(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	inv, led, res := tb.table("sku_inventory"), tb.table("inventory_ledger"), tb.table("inventory_reservation")
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := tb.pool.Exec(tb.ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// bought provisions SKU sku (10 units, 2 buckets) and sells one unit
	// through the normal flow; it returns that reservation.
	bought := func(sku int64) inventory.NewReservation {
		t.Helper()
		tb.provision(t, 9, sku, 10, 2)
		r := tb.newReservation(9, sku, 1)
		if err := tb.buy(tb.ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	release := func(r inventory.NewReservation) {
		t.Helper()
		if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.ReleaseStock(tb.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		damage func(sku int64)
		want   []string
	}{
		{"clean", func(sku int64) { bought(sku) }, nil},
		{"stock changed behind the ledger", func(sku int64) {
			bought(sku)
			exec(`UPDATE `+inv+` SET available_stock = available_stock - 1, total_stock = total_stock - 1 WHERE sku_id = $1 AND bucket_no = 0`, sku)
		}, []string{inventory.FindingReplayAvailable, inventory.FindingReplayTotal, inventory.FindingSKUTotal}},
		{"allocation without ledger", func(sku int64) {
			bought(sku)
			exec(`UPDATE `+inv+` SET available_stock = available_stock - 1, allocated_stock = allocated_stock + 1 WHERE sku_id = $1 AND bucket_no = 0`, sku)
		}, []string{inventory.FindingReplayAllocated, inventory.FindingReplayAvailable}},
		{"bucket lost", func(sku int64) {
			bought(sku)
			exec(`DELETE FROM `+inv+` WHERE sku_id = $1 AND bucket_no = 0`, sku)
		}, []string{inventory.FindingBucketCount, inventory.FindingReplayTotal, inventory.FindingSKUTotal}},
		{"planned stock changed", func(sku int64) {
			bought(sku)
			exec(`UPDATE `+tb.table("inventory_sku")+` SET planned_stock = 11 WHERE sku_id = $1`, sku)
		}, []string{inventory.FindingSKUTotal}},
		{"ordered without allocation", func(sku int64) {
			r := bought(sku)
			exec(`DELETE FROM `+led+` WHERE reservation_id = $1`, r.ReservationID)
			exec(`UPDATE `+inv+` SET available_stock = available_stock + 1, allocated_stock = allocated_stock - 1 WHERE sku_id = $1 AND bucket_no = 1`, sku)
		}, []string{inventory.FindingMissingAllocate}},
		{"released without release row", func(sku int64) {
			r := bought(sku)
			exec(`UPDATE `+res+` SET status = 40, released_at = now() WHERE reservation_id = $1`, r.ReservationID)
		}, []string{inventory.FindingMissingRelease}},
		{"rejected but holding stock", func(sku int64) {
			r := bought(sku)
			exec(`UPDATE `+res+` SET status = 20, order_id = NULL WHERE reservation_id = $1`, r.ReservationID)
		}, []string{inventory.FindingLeakedAllocation}},
		{"rejected and released is fine", func(sku int64) {
			r := bought(sku)
			release(r)
			exec(`UPDATE `+res+` SET status = 20, order_id = NULL WHERE reservation_id = $1`, r.ReservationID)
		}, nil},
		{"release without allocation", func(sku int64) {
			r := bought(sku)
			release(r)
			exec(`UPDATE `+led+` SET idempotency_key = 'X', reservation_id = $2 WHERE reservation_id = $1 AND ledger_type = 10`, r.ReservationID, uuid.Must(uuid.NewV7()))
		}, []string{inventory.FindingMissingAllocate, inventory.FindingOrphanRelease}},
		{"second allocation row", func(sku int64) {
			r := bought(sku)
			exec(`INSERT INTO `+led+` (idempotency_key, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket,
			        ledger_type, available_delta, allocated_delta, before_available, after_available, before_allocated, after_allocated, reason)
			      SELECT 'ALLOCATE-AGAIN', reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket,
			        10, available_delta, allocated_delta, before_available, after_available, before_allocated, after_allocated, reason
			        FROM `+led+` WHERE reservation_id = $1`, r.ReservationID)
		}, []string{inventory.FindingDuplicateAllocate, inventory.FindingReplayAllocated, inventory.FindingReplayAvailable}},
		{"release to another bucket", func(sku int64) {
			r := bought(sku)
			release(r)
			exec(`UPDATE `+led+` SET inventory_bucket = 0 WHERE reservation_id = $1 AND ledger_type = 20`, r.ReservationID)
		}, []string{inventory.FindingReleaseMismatch, inventory.FindingReplayAllocated, inventory.FindingReplayAllocated,
			inventory.FindingReplayAvailable, inventory.FindingReplayAvailable}},
	}
	all := 0
	for i, tc := range cases {
		sku := int64(100 + i)
		tc.damage(sku)
		findings, err := tb.store.Audit(tb.ctx, tb.pool, 9, sku)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, f := range findings {
			kinds = append(kinds, f.Kind)
			if f.ActivityID != 9 || f.SKUID != sku || f.Kind == "" {
				t.Errorf("%s: finding %+v", tc.name, f)
			}
		}
		slices.Sort(kinds)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		if !slices.Equal(kinds, want) {
			t.Errorf("%s: findings %v, want kinds %v", tc.name, findings, want)
		}
		all += len(findings)
	}
	findings, err := tb.store.Audit(tb.ctx, tb.pool, 0, 0)
	if err != nil || len(findings) != all {
		t.Fatalf("AuditAll: %d findings (%v), want %d", len(findings), err, all)
	}
}

func TestAuditFindingDetails(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 2)
	if _, err := tb.pool.Exec(tb.ctx, `UPDATE `+tb.table("sku_inventory")+` SET total_stock = 7, available_stock = 7 WHERE bucket_no = 1`); err != nil {
		t.Fatal(err)
	}
	findings, err := tb.store.Audit(tb.ctx, tb.pool, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []inventory.Finding{
		{Kind: inventory.FindingReplayAvailable, ActivityID: 1, SKUID: 1, Bucket: 1, Expected: 5, Actual: 7},
		{Kind: inventory.FindingReplayTotal, ActivityID: 1, SKUID: 1, Bucket: 1, Expected: 5, Actual: 7},
		{Kind: inventory.FindingSKUTotal, ActivityID: 1, SKUID: 1, Bucket: -1, Expected: 10, Actual: 12},
	}
	if !slices.Equal(findings, want) {
		t.Fatalf("findings %+v, want %+v", findings, want)
	}
}
