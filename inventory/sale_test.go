package inventory_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
)

func (tb testBundle) setSale(t *testing.T, c inventory.SaleChange) (inventory.SaleChanged, error) {
	t.Helper()
	var out inventory.SaleChanged
	err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		var err error
		out, err = tb.store.SetSaleStatus(tb.ctx, tx, c)
		return err
	})
	return out, err
}

// The allocation statement itself refuses a SKU that is not selling: not
// ON_SALE, before its window opens, after it closes. The refusal is typed,
// writes nothing and leaves the transaction usable; ON_SALE inside the
// window sells again. Every change is logged with operator and reason; a
// change out of ENDED is refused.
func TestSaleStatusAndWindowRefuseAllocation(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 1, 1, 10, 1)
		now := time.Now()
		change := func(to inventory.SaleStatus, from, until time.Time) inventory.SaleChange {
			return inventory.SaleChange{ActivityID: 1, SKUID: 1, To: to, StartsAt: from, EndsAt: until, Operator: "ops:alice", Reason: "test " + to.String()}
		}
		allocate := func(batch bool) error {
			r := tb.reserved(t, 1, 1, 0, 1)
			var allocErr error
			err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
				if batch {
					var b pgx.Batch
					if err := tb.store.QueueAllocateBucket(&b, r2ToAlloc(r), new(inventory.Allocated), pgtx.Return); err != nil {
						return err
					}
					allocErr = tx.SendBatch(tb.ctx, &b).Close()
				} else {
					_, allocErr = tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(r))
				}
				_, err := tx.Exec(tb.ctx, "SELECT 1") // still usable
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return allocErr
		}
		steps := []struct {
			change            inventory.SaleChange
			notStarted, ended bool
			sells             bool
		}{
			{change: change(inventory.SalePaused, time.Time{}, time.Time{})},
			{change: change(inventory.SaleOnSale, now.Add(time.Hour), time.Time{}), notStarted: true},
			{change: change(inventory.SaleOnSale, now.Add(-2*time.Hour), now.Add(-time.Hour)), ended: true},
			{change: change(inventory.SaleOnSale, now.Add(-time.Hour), now.Add(time.Hour)), sells: true},
			{change: change(inventory.SaleEnded, time.Time{}, time.Time{}), ended: true},
		}
		var changed []inventory.SaleChanged
		for i, st := range steps {
			got, err := tb.setSale(t, st.change)
			if err != nil || got.To != st.change.To || got.LogID == 0 || got.Version != int64(i+1) {
				t.Fatalf("step %d: %+v, %v", i, got, err)
			}
			changed = append(changed, got)
			for _, batch := range []bool{false, true} {
				err := allocate(batch)
				if st.sells {
					if err != nil {
						t.Fatalf("step %d (batch %v): %v", i, batch, err)
					}
					continue
				}
				var ne *inventory.Error
				if !errors.Is(err, inventory.ErrNotOnSale) || !errors.As(err, &ne) || ne.Status != st.change.To ||
					saleNotStarted(ne) != st.notStarted || saleEnded(ne) != st.ended {
					t.Fatalf("step %d %s (batch %v): %v", i, st.change.To, batch, err)
				}
			}
		}
		if tot := tb.totals(t, 1, 1); tot.Allocated != 2 {
			t.Fatalf("only the on-sale step sells: %+v", tot)
		}
		if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")+` WHERE ledger_type = 10`); n != 2 {
			t.Fatalf("%d ALLOCATE rows, want 2", n)
		}

		// ENDED is final.
		_, err := tb.setSale(t, change(inventory.SaleOnSale, time.Time{}, time.Time{}))
		var ce *inventory.Error
		if !errors.Is(err, inventory.ErrIllegalTransition) || !errors.As(err, &ce) || ce.From != inventory.SaleEnded {
			t.Fatalf("ENDED -> ON_SALE: %v", err)
		}
		// Bad input and unknown SKUs.
		bad := change(inventory.SalePaused, time.Time{}, time.Time{})
		bad.Operator = ""
		if _, err := tb.setSale(t, bad); !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Fatalf("no operator: %v", err)
		}
		bad = change(inventory.SaleOnSale, now, now.Add(-time.Second))
		if _, err := tb.setSale(t, bad); !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Fatalf("inverted window: %v", err)
		}
		unknown := change(inventory.SalePaused, time.Time{}, time.Time{})
		unknown.SKUID = 99
		if _, err := tb.setSale(t, unknown); !errors.Is(err, inventory.ErrUnknownSKU) {
			t.Fatalf("unknown SKU: %v", err)
		}

		log, err := tb.store.SaleLog(tb.ctx, tb.pool, 1, 1)
		if err != nil || len(log) != len(steps) {
			t.Fatalf("sale log %+v, %v", log, err)
		}
		var path []inventory.SaleStatus
		for i, l := range log {
			path = append(path, l.To)
			if l.Operator != "ops:alice" || l.Reason != "test "+l.To.String() || l.ChangedAt.IsZero() {
				t.Errorf("log %d: %+v", i, l)
			}
			if i > 0 && l.From != log[i-1].To {
				t.Errorf("log %d from %s, previous to %s", i, l.From, log[i-1].To)
			}
			// The log row holds what SetSaleStatus returned, the version
			// included.
			if c := changed[i]; l.LogID != c.LogID || l.Version != c.Version || l.From != c.From || !l.ChangedAt.Equal(c.ChangedAt) {
				t.Errorf("log %d = %+v, SetSaleStatus returned %+v", i, l, c)
			}
		}
		if want := []inventory.SaleStatus{20, 10, 10, 10, 30}; !slices.Equal(path, want) {
			t.Fatalf("path %v, want %v", path, want)
		}
		if got := tb.checkValues(t, "ck_inventory_sku_sale_status"); !slices.Equal(got, []int{10, 20, 30}) {
			t.Fatalf("ck_inventory_sku_sale_status %v", got)
		}
	})
}

// TestSaleLogVersionBackfill: migration 006 gives every log row written
// before it the version SetSaleStatus returned with it (its position in
// its SKU's log), SKU by SKU.
func TestSaleLogVersionBackfill(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	ctx := pgtest.Context(t, time.Minute)
	before := fstest.MapFS{}
	files, err := filepath.Glob("migrations/00[1-5]_*.up.sql")
	if err != nil || len(files) != 5 {
		t.Fatalf("migrations 001-005: %v, %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		before[filepath.Base(f)] = &fstest.MapFile{Data: b}
	}
	if _, err := migrate.Apply(ctx, pool, schema, migrate.Component{Name: "inventory", FS: before}); err != nil {
		t.Fatal(err)
	}
	store, err := inventory.New(inventory.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	// The SKUs as written before 006 (Provision's statement needs 010).
	skus := pgx.Identifier{schema, "inventory_sku"}.Sanitize()
	for sku := int64(1); sku <= 2; sku++ {
		if _, err := pool.Exec(ctx, `INSERT INTO `+skus+` (activity_id, sku_id, planned_stock, bucket_count) VALUES (1, $1, 10, 1)`, sku); err != nil {
			t.Fatal(err)
		}
	}
	// Five changes, interleaved between the SKUs, as written before 006.
	log := pgx.Identifier{schema, "inventory_sale_log"}.Sanitize()
	for _, sku := range []int64{1, 2, 1, 2, 1} {
		if _, err := pool.Exec(ctx, `INSERT INTO `+log+` (activity_id, sku_id, from_status, to_status, operator, reason)
			VALUES (1, $1, 10, 10, 'ops', 'window')`, sku); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := migrate.Apply(ctx, pool, schema, inventory.Migrations); err != nil {
		t.Fatal(err)
	}
	for sku, want := range map[int64][]int64{1: {1, 2, 3}, 2: {1, 2}} {
		got, err := store.SaleLog(ctx, pool, 1, sku)
		if err != nil {
			t.Fatal(err)
		}
		var versions []int64
		for _, l := range got {
			versions = append(versions, l.Version)
		}
		if !slices.Equal(versions, want) {
			t.Errorf("SKU %d: log versions %v, want %v", sku, versions, want)
		}
	}
}

// saleNotStarted reports whether a not-on-sale refusal says the sale
// window has not opened yet: ON_SALE, tested before StartsAt.
func saleNotStarted(e *inventory.Error) bool {
	return e.Status == inventory.SaleOnSale && !e.StartsAt.IsZero() && e.At.Before(e.StartsAt)
}

// saleEnded reports whether a not-on-sale refusal says the sale is over:
// ENDED, or ON_SALE tested at or after EndsAt.
func saleEnded(e *inventory.Error) bool {
	return e.Status == inventory.SaleEnded ||
		(e.Status == inventory.SaleOnSale && !e.EndsAt.IsZero() && !e.At.Before(e.EndsAt))
}
