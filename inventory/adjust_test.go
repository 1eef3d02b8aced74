package inventory_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inventory"
)

// A manual adjustment is evidence: it carries operator, approval reference
// and reason, is refused without them (by the package and by the
// database), applies once per approval and bucket, keeps the SKU's planned
// stock equal to its buckets, and is listed with its evidence. An ADJUST
// row without evidence (as written before migration 005) is reported by
// the audit.
func TestAdjustStockIsEvidence(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 2)
	adjust := tb.adjust
	good := inventory.Adjustment{ActivityID: 1, SKUID: 1, Bucket: 1, Delta: -2, Operator: "ops:carol", ApprovalRef: "TICKET-42", Reason: "DAMAGED"}
	for field, change := range map[string]func(*inventory.Adjustment){
		"Operator":    func(a *inventory.Adjustment) { a.Operator = "" },
		"ApprovalRef": func(a *inventory.Adjustment) { a.ApprovalRef = "" },
		"Reason":      func(a *inventory.Adjustment) { a.Reason = "" },
		"Delta":       func(a *inventory.Adjustment) { a.Delta = 0 },
	} {
		a := good
		change(&a)
		var ve *inventory.Error
		if _, err := adjust(a); !errors.As(err, &ve) || ve.Field != field {
			t.Errorf("without %s: %v", field, err)
		}
	}
	got, err := adjust(good)
	if err != nil || got.BeforeAvailable != 5 || got.AfterAvailable != 3 || tb.totals(t, 1, 1).PlannedStock != 8 {
		t.Fatalf("adjust: %+v, %v", got, err)
	}
	if _, err := adjust(good); !errors.Is(err, inventory.ErrAlreadyApplied) {
		t.Fatalf("same approval again: %v", err)
	}
	more := good
	more.ApprovalRef, more.Delta = "TICKET-43", -4
	var soldOut *inventory.Error
	if _, err := adjust(more); !errors.Is(err, inventory.ErrSoldOut) || !errors.As(err, &soldOut) ||
		soldOut.Requested != 4 || soldOut.Available != 3 || soldOut.Bucket != 1 {
		t.Fatalf("taking 4 when 3 are available: %v (%+v), want sold out, 4 requested, 3 available", err, soldOut)
	}
	more.Delta = -40000 // Requested is an int16: a larger take reports its largest value
	if _, err := adjust(more); !errors.As(err, &soldOut) || soldOut.Requested != 32767 || soldOut.Available != 3 {
		t.Fatalf("taking 40,000 when 3 are available: %v (%+v), want 32767 requested", err, soldOut)
	}
	more.Delta = -32767
	if _, err := adjust(more); !errors.As(err, &soldOut) || soldOut.Requested != 32767 {
		t.Fatalf("taking 32,767 when 3 are available: %v (%+v), want 32767 requested", err, soldOut)
	}
	more.Delta, more.Bucket = 7, 0
	if got, err := adjust(more); err != nil || tb.totals(t, 1, 1).PlannedStock != 15 {
		t.Fatalf("a delivery: %+v, %v", got, err)
	}
	if tot := tb.totals(t, 1, 1); tot.Total != 15 || tot.Available != 15 {
		t.Fatalf("totals %+v", tot)
	}
	list, err := tb.store.Adjustments(tb.ctx, tb.pool, 1, 1)
	if err != nil || len(list) != 2 || list[0].Operator != "ops:carol" || list[0].ApprovalRef != "TICKET-42" ||
		list[0].Reason != "DAMAGED" || list[0].AvailableDelta != -2 || list[1].AvailableDelta != 7 {
		t.Fatalf("adjustments %+v, %v", list, err)
	}
	tb.auditClean(t, 1, 1)

	// The database refuses an ADJUST row without evidence, whoever writes it.
	_, err = tb.pool.Exec(tb.ctx, `INSERT INTO `+tb.table("inventory_ledger")+` (idempotency_key, activity_id, sku_id,
		inventory_bucket, ledger_type, total_delta, available_delta, allocated_delta, before_available, after_available,
		before_allocated, after_allocated, reason) VALUES ('ADJUST:x', 1, 1, 0, 30, 0, 1, 0, 0, 1, 0, 0, 'X')`)
	if err == nil || !strings.Contains(err.Error(), "ck_ledger_adjust_evidence") {
		t.Fatalf("ADJUST row without evidence: %v", err)
	}
	// A row from before the constraint (simulated by lifting it) is reported.
	tb.exec(t, `ALTER TABLE `+tb.table("inventory_ledger")+` DROP CONSTRAINT ck_ledger_adjust_evidence`)
	tb.exec(t, `UPDATE `+tb.table("inventory_ledger")+` SET operator = NULL WHERE idempotency_key = $1`, inventory.AdjustKey(good))
	findings, err := tb.store.Audit(tb.ctx, tb.pool, 1, 1)
	if err != nil || len(findings) != 1 || findings[0].Kind != inventory.FindingAdjustWithoutEvidence || findings[0].Bucket != 1 {
		t.Fatalf("audit findings %v, %v", findings, err)
	}
}

// TestAdjustKeyNamesTheSKU: one approval may adjust the same bucket of two
// SKUs (of one activity, or of two): each applies once, under a key that
// names its activity and SKU. A row written before inventory migration 013,
// under the key without the SKU, is the same adjustment for its own SKU
// only: retried after the upgrade it is refused as already applied, with
// that row's id, and changes nothing; the same approval on another SKU is
// refused for its own reasons (sold out) and otherwise applies.
func TestAdjustKeyNamesTheSKU(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 2)
	tb.provision(t, 1, 2, 10, 2)
	tb.provision(t, 2, 1, 10, 2)
	tb.provision(t, 2, 2, 10, 2)
	adjust := tb.adjust
	a := inventory.Adjustment{ActivityID: 1, SKUID: 1, Bucket: 1, Delta: -1, Operator: "ops:dan", ApprovalRef: "CR-7:all damaged", Reason: "DAMAGED"}
	for _, sku := range []struct{ activity, sku int64 }{{1, 1}, {1, 2}, {2, 1}} {
		a.ActivityID, a.SKUID = sku.activity, sku.sku
		got, err := adjust(a)
		if err != nil || got.IdempotencyKey != fmt.Sprintf("ADJUST:MANUAL:%d:%d:CR-7:all damaged:1", sku.activity, sku.sku) {
			t.Fatalf("approval CR-7 on activity %d SKU %d: %+v, %v", sku.activity, sku.sku, got, err)
		}
		if got := tb.totals(t, sku.activity, sku.sku); got.Available != 9 || got.PlannedStock != 9 {
			t.Fatalf("activity %d SKU %d after the adjustment: %+v", sku.activity, sku.sku, got)
		}
		if _, err := adjust(a); !errors.Is(err, inventory.ErrAlreadyApplied) {
			t.Fatalf("approval CR-7 again on activity %d SKU %d: %v", sku.activity, sku.sku, err)
		}
	}
	// Activity 1's SKU 2 row as AdjustStock wrote it before migration 013: the key without the SKU.
	a.ActivityID, a.SKUID = 1, 2
	old := a
	old.ApprovalRef = "CR-6"
	first, err := adjust(old)
	if err != nil {
		t.Fatal(err)
	}
	tb.exec(t, `UPDATE `+tb.table("inventory_ledger")+` SET idempotency_key = $1 WHERE ledger_id = $2`,
		inventory.LegacyAdjustKey(old), first.LedgerID)
	var ae *inventory.Error
	if _, err := adjust(old); !errors.Is(err, inventory.ErrAlreadyApplied) || !errors.As(err, &ae) || ae.LedgerID != first.LedgerID {
		t.Fatalf("CR-6 retried after the upgrade: %v, want already applied as ledger row %d", err, first.LedgerID)
	}
	if got := tb.totals(t, 1, 2); got.Available != 8 {
		t.Fatalf("the retried adjustment changed the stock: %+v", got)
	}
	// The old key names no SKU: for another SKU, of the same activity or of
	// another, it is not the same adjustment, neither when the adjustment
	// is refused (sold out, not already applied) nor when it applies.
	for _, sku := range []struct{ activity, sku int64 }{{1, 1}, {2, 2}} {
		other := old
		other.ActivityID, other.SKUID = sku.activity, sku.sku
		other.Delta = -1000
		if _, err := adjust(other); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("CR-6 taking 1,000 on activity %d SKU %d, beside activity 1 SKU 2's old-key row: %v, want sold out",
				sku.activity, sku.sku, err)
		}
		other.Delta = -1
		before := tb.totals(t, sku.activity, sku.sku).Available
		if got, err := adjust(other); err != nil || tb.totals(t, sku.activity, sku.sku).Available != before-1 {
			t.Fatalf("CR-6 on activity %d SKU %d, beside activity 1 SKU 2's old-key row: %+v, %v", sku.activity, sku.sku, got, err)
		}
	}
	tb.auditClean(t, 1, 1)
	tb.auditClean(t, 1, 2)
	tb.auditClean(t, 2, 1)
	tb.auditClean(t, 2, 2)
}

// adjust runs AdjustStock in a transaction of its own.
func (tb testBundle) adjust(a inventory.Adjustment) (inventory.LedgerEntry, error) {
	var out inventory.LedgerEntry
	err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		var err error
		out, err = tb.store.AdjustStock(tb.ctx, tx, a)
		return err
	})
	return out, err
}

func (tb testBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := tb.pool.Exec(tb.ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

// TestAdjustTouchesOnlyItsBucket: an adjustment changes its own bucket and
// its SKU's planned stock, and nothing of the SKU's other bucket, of
// another SKU's bucket of the same number, or of the same SKU id and
// bucket in another activity. The same approval again is refused as
// already applied, writes nothing, and leaves the caller's transaction
// usable: it goes on and commits. A bucket the SKU does not have is
// refused, and writes nothing. An adjustment may take every available
// unit of a bucket. A SKU's list of adjustments holds its own only.
func TestAdjustTouchesOnlyItsBucket(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 2)
	tb.provision(t, 1, 2, 10, 2)
	tb.provision(t, 2, 1, 10, 2)
	// others is every bucket's counters and every SKU's planned stock but
	// those of bucket 1 of SKU 1/1 and its planned stock; all is
	// everything, the ledger included.
	snapshot := func(all bool) string {
		t.Helper()
		var s string
		if err := tb.pool.QueryRow(tb.ctx, `SELECT
				(SELECT string_agg(format('%s/%s/%s:%s/%s/%s/%s', activity_id, sku_id, bucket_no, total_stock, available_stock, allocated_stock, version), ' '
					ORDER BY activity_id, sku_id, bucket_no) FROM `+tb.table("sku_inventory")+`
					WHERE $1 OR NOT (activity_id = 1 AND sku_id = 1 AND bucket_no = 1))
				|| ' | ' || (SELECT string_agg(format('%s/%s:%s', activity_id, sku_id, planned_stock), ' ' ORDER BY activity_id, sku_id)
					FROM `+tb.table("inventory_sku")+` WHERE $1 OR NOT (activity_id = 1 AND sku_id = 1))
				|| ' | ' || CASE WHEN $1 THEN (SELECT count(*)::text FROM `+tb.table("inventory_ledger")+`) ELSE '' END`, all).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := inventory.Adjustment{ActivityID: 1, SKUID: 1, Bucket: 1, Delta: 3, Operator: "ops:dan", ApprovalRef: "TICKET-7", Reason: "DELIVERY"}
	// The other SKUs have adjustments of their own, which SKU 1/1's list
	// must not show.
	// (The key is the approval and the bucket: one approval per bucket
	// number.)
	for _, o := range []inventory.Adjustment{{ActivityID: 1, SKUID: 2, ApprovalRef: "TICKET-5"}, {ActivityID: 2, SKUID: 1, ApprovalRef: "TICKET-6"}} {
		o.Bucket, o.Delta, o.Operator, o.Reason = 1, 1, "ops:dan", "DELIVERY"
		if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.AdjustStock(tb.ctx, tx, o)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(false)
	err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		_, err := tb.store.AdjustStock(tb.ctx, tx, a)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if after := snapshot(false); after != before {
		t.Fatalf("the adjustment changed other stock:\n before %s\n after  %s", before, after)
	}
	if bk, err := tb.store.GetBucket(tb.ctx, tb.pool, 1, 1, 1); err != nil || bk.Total != 8 || bk.Available != 8 {
		t.Fatalf("bucket 1/1/1 = %+v, %v; want 8 total, 8 available", bk, err)
	}
	if p := tb.totals(t, 1, 1).PlannedStock; p != 13 {
		t.Fatalf("planned stock %d, want 13", p)
	}

	// Again, in a transaction that goes on and commits; then a bucket the
	// SKU does not have.
	before = snapshot(true)
	err = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		if _, err := tb.store.AdjustStock(tb.ctx, tx, a); !errors.Is(err, inventory.ErrAlreadyApplied) {
			t.Errorf("the same approval again: %v, want ErrAlreadyApplied", err)
		}
		var one int
		if err := tx.QueryRow(tb.ctx, `SELECT 1`).Scan(&one); err != nil {
			t.Errorf("the transaction after the refused duplicate: %v", err)
		}
		missing := a
		missing.Bucket, missing.ApprovalRef = 5, "TICKET-8"
		if _, err := tb.store.AdjustStock(tb.ctx, tx, missing); !errors.Is(err, inventory.ErrUnknownBucket) {
			t.Errorf("bucket 5 of a SKU of 2: %v, want ErrUnknownBucket", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("commit after the refusals: %v", err)
	}
	if after := snapshot(true); after != before {
		t.Fatalf("a refused adjustment wrote:\n before %s\n after  %s", before, after)
	}

	// The edge: an adjustment that takes every available unit of a bucket
	// goes through, and leaves it at 0.
	edge := inventory.Adjustment{ActivityID: 1, SKUID: 1, Bucket: 0, Delta: -5, Operator: "ops:dan", ApprovalRef: "TICKET-9", Reason: "DAMAGED"}
	err = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		_, err := tb.store.AdjustStock(tb.ctx, tx, edge)
		return err
	})
	if bk, gerr := tb.store.GetBucket(tb.ctx, tb.pool, 1, 1, 0); err != nil || gerr != nil || bk.Available != 0 || bk.Total != 0 {
		t.Fatalf("taking all 5 available units: %v; bucket %+v, %v", err, bk, gerr)
	}
	list, err := tb.store.Adjustments(tb.ctx, tb.pool, 1, 1)
	if err != nil || len(list) != 2 || list[0].ApprovalRef != "TICKET-7" || list[1].ApprovalRef != "TICKET-9" {
		t.Fatalf("SKU 1/1's adjustments %+v, %v; want TICKET-7 and TICKET-9 only", list, err)
	}
	tb.auditClean(t, 1, 1)
	tb.auditClean(t, 1, 2)
	tb.auditClean(t, 2, 1)
}
