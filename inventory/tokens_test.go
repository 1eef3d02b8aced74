package inventory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inventory"
)

// tokenModes runs fn with the stock provisioned as inventory tokens, with
// the default statements ("tokens") and those of Config.Citus
// ("tokens_citus"), each on a schema of its own.
func tokenModes(t *testing.T, fn func(t *testing.T, tb testBundle)) {
	t.Helper()
	for _, citus := range []bool{false, true} {
		name := "tokens"
		if citus {
			name = "tokens_citus"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tb := setupMode(t, citus)
			tb.tokens = true
			fn(t, tb)
		})
	}
}

// tokensHeld counts the tokens of the SKU that reservation id holds (a
// nil id: the free ones).
func (tb testBundle) tokensHeld(t *testing.T, activity, sku int64, id *uuid.UUID) int64 {
	t.Helper()
	return tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_token")+`
		WHERE activity_id = $1 AND sku_id = $2 AND reservation_id IS NOT DISTINCT FROM $3`, activity, sku, id)
}

// laneReservation is a fresh reservation of one unit whose token claim
// starts at token_no first on a SKU of 4 tokens: the lane of
// allocate.sql, abs(hashtext(id)) % 64, scaled to the stock (lane × 4 / 64).
func (tb testBundle) laneReservation(t *testing.T, activity, sku int64, first int) inventory.NewReservation {
	t.Helper()
	for range 256 {
		r := tb.newReservation(activity, sku, 0)
		var start int
		if err := tb.pool.QueryRow(tb.ctx, `SELECT (abs(hashtext($1::uuid::text)::int8) % 64) * 4 / 64`, r.ReservationID).Scan(&start); err != nil {
			t.Fatal(err)
		}
		if start == first {
			return r
		}
	}
	t.Fatalf("no reservation id in 256 whose claim starts at token %d", first)
	return inventory.NewReservation{}
}

// allocateIn records r, allocates it and marks it ORDERED in a
// transaction of its own.
func (tb testBundle) allocateIn(t *testing.T, r inventory.NewReservation) (inventory.Allocated, error) {
	t.Helper()
	var out inventory.Allocated
	err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		acq, err := tb.store.AcquireReservation(tb.ctx, tx, r)
		if err != nil {
			return err
		}
		order := tb.ids.Add(1)
		if out, err = tb.store.AllocateBucket(tb.ctx, tx, acq.Reservation.Allocation(order, uuid.Nil)); err != nil {
			return err
		}
		_, err = tb.store.TransitionReservation(tb.ctx, tx, inventory.Transition{ReservationID: r.ReservationID, To: inventory.StatusOrdered, OrderID: order})
		return err
	})
	return out, err
}

// releaseIn releases reservation id in a transaction of its own.
func (tb testBundle) releaseIn(id uuid.UUID) (inventory.Allocated, error) {
	var out inventory.Allocated
	err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		var err error
		out, err = tb.store.ReleaseStock(tb.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: id}})
		return err
	})
	return out, err
}

// A token SKU from provisioning to sell-out and back: one free token row
// per unit and no bucket row; each allocation claims one token and writes
// its ALLOCATE row, the next one after the last is sold out, a duplicate
// allocation or release is already applied, a release frees exactly the
// reservation's token; Stock and GetBucket show bucket 0 with the token
// counts; both audits stay clean.
func TestTokensAllocateAndRelease(t *testing.T) {
	t.Parallel()
	tokenModes(t, func(t *testing.T, tb testBundle) {
		const act, sku, stock = 7, 8, 3
		p, err := tb.store.Provision(tb.ctx, tb.pool, inventory.SKU{ActivityID: act, SKUID: sku, Stock: stock, Buckets: 1, Tokens: true})
		if err != nil || !p.Created || p.Buckets != 0 {
			t.Fatalf("Provision = %+v, %v; want created, no bucket rows", p, err)
		}
		if n := tb.tokensHeld(t, act, sku, nil); n != stock {
			t.Fatalf("%d free tokens, want %d", n, stock)
		}
		if n := tb.count(t, `SELECT count(*) FROM `+tb.table("sku_inventory")+` WHERE activity_id = $1`, act); n != 0 {
			t.Fatalf("%d bucket rows, want none", n)
		}
		var bought []inventory.NewReservation
		for i := range stock {
			r := tb.newReservation(act, sku, 0)
			a, err := tb.allocateIn(t, r)
			if err != nil {
				t.Fatalf("allocation %d: %v", i, err)
			}
			if a.LedgerID == 0 || a.Quantity != 1 || a.BeforeAvailable != 1 || a.AfterAvailable != 0 || a.AfterAllocated != 1 {
				t.Fatalf("allocation %d = %+v; want the claimed token's counters", i, a)
			}
			if n := tb.tokensHeld(t, act, sku, &r.ReservationID); n != 1 {
				t.Fatalf("reservation holds %d tokens, want 1", n)
			}
			bought = append(bought, r)
		}
		_, err = tb.allocateIn(t, tb.newReservation(act, sku, 0))
		var so *inventory.Error
		if !errors.As(err, &so) || !errors.Is(err, inventory.ErrSoldOut) || so.Available != 0 {
			t.Fatalf("allocation past the stock: %v; want sold out with 0 available", err)
		}
		// A duplicate of a committed allocation is already applied.
		err = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(bought[0]))
			return err
		})
		if !errors.Is(err, inventory.ErrAlreadyApplied) {
			t.Fatalf("duplicate allocation: %v; want ErrAlreadyApplied", err)
		}
		st := tb.totals(t, act, sku)
		if st.BucketCount != 1 || len(st.Buckets) != 1 || st.Total != stock || st.Available != 0 || st.Allocated != stock || st.SoldOutBuckets != 1 {
			t.Fatalf("Stock = %+v; want bucket 0 with %d allocated tokens", st, stock)
		}
		rel, err := tb.releaseIn(bought[1].ReservationID)
		if err != nil || rel.Bucket != 0 || rel.Quantity != 1 || rel.AfterAvailable != 1 || rel.BeforeAllocated != 1 {
			t.Fatalf("release = %+v, %v", rel, err)
		}
		if n := tb.tokensHeld(t, act, sku, &bought[1].ReservationID); n != 0 {
			t.Fatalf("released reservation holds %d tokens, want 0", n)
		}
		if _, err := tb.releaseIn(bought[1].ReservationID); !errors.Is(err, inventory.ErrAlreadyApplied) {
			t.Fatalf("duplicate release: %v; want ErrAlreadyApplied", err)
		}
		if _, err := tb.releaseIn(uuid.New()); !errors.Is(err, inventory.ErrNotAllocated) {
			t.Fatalf("release of nothing: %v; want ErrNotAllocated", err)
		}
		b, err := tb.store.GetBucket(tb.ctx, tb.pool, act, sku, 0)
		if err != nil || b.Total != stock || b.Available != 1 || b.Allocated != stock-1 || b.Version != stock+1 {
			t.Fatalf("GetBucket = %+v, %v; want 1 free token of %d, version %d", b, err, stock, stock+1)
		}
		if _, err := tb.store.GetBucket(tb.ctx, tb.pool, act, sku, 1); !errors.Is(err, inventory.ErrUnknownBucket) {
			t.Fatalf("GetBucket(1) = %v; want ErrUnknownBucket", err)
		}
		// The freed token is claimed again.
		if _, err := tb.allocateIn(t, tb.newReservation(act, sku, 0)); err != nil {
			t.Fatalf("allocation of the released unit: %v", err)
		}
		if !tb.citus { // Checkpoint refuses Config.Citus
			if _, err := tb.store.Checkpoint(tb.ctx, tb.pool); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tb.releaseIn(bought[2].ReservationID); err != nil {
			t.Fatal(err)
		}
		full, incr := tb.bothAudits(t, tb.ctx, act, sku)
		for _, f := range append(full, incr...) {
			t.Errorf("audit: %+v", f)
		}
	})
}

// Bucket 1 of a token SKU does not exist: the allocation is refused as an
// unknown bucket (the reservation names bucket 1), nothing written.
func TestTokensUnknownBucket(t *testing.T) {
	t.Parallel()
	tokenModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 1, 2, 5, 1)
		_, err := tb.allocateIn(t, tb.newReservation(1, 2, 1))
		if !errors.Is(err, inventory.ErrUnknownBucket) {
			t.Fatalf("allocation from bucket 1: %v; want ErrUnknownBucket", err)
		}
		if n := tb.tokensHeld(t, 1, 2, nil); n != 5 {
			t.Fatalf("%d free tokens, want 5", n)
		}
	})
}

// The sale's status and window guard a token allocation as they guard a
// bucket's: paused, ended, not yet started or past its end, the
// allocation is refused with ErrNotOnSale and no token is claimed.
func TestTokensRefusedOutsideTheSale(t *testing.T) {
	t.Parallel()
	tokenModes(t, func(t *testing.T, tb testBundle) {
		now := time.Now()
		changes := []inventory.SaleChange{
			{To: inventory.SalePaused},
			{To: inventory.SaleOnSale, StartsAt: now.Add(time.Hour)},
			{To: inventory.SaleOnSale, EndsAt: now.Add(-time.Hour)},
			{To: inventory.SaleEnded},
		}
		for i, c := range changes {
			act, sku := tb.ids.Add(1), tb.ids.Add(1)
			tb.provision(t, act, sku, 2, 1)
			c.ActivityID, c.SKUID, c.Operator, c.Reason = act, sku, "test", "tokens outside the sale"
			if _, err := tb.setSale(t, c); err != nil {
				t.Fatal(err)
			}
			_, err := tb.allocateIn(t, tb.newReservation(act, sku, 0))
			var e *inventory.Error
			if !errors.As(err, &e) || !errors.Is(err, inventory.ErrNotOnSale) {
				t.Fatalf("change %d (%+v): %v; want ErrNotOnSale", i, c, err)
			}
			if n := tb.tokensHeld(t, act, sku, nil); n != 2 {
				t.Fatalf("change %d: %d free tokens, want 2", i, n)
			}
			if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")+` WHERE activity_id = $1 AND ledger_type = 10`, act); n != 0 {
				t.Fatalf("change %d: %d ALLOCATE rows, want none", i, n)
			}
		}
	})
}

// Provisioning tokens: the same SKU again is not created; with buckets
// instead (or the other way round) it is a conflict naming the mode; bad
// input (tokens in more than one bucket, a stock beyond the token limit)
// is refused with a typed error and writes nothing.
func TestTokensProvision(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	k := inventory.SKU{ActivityID: 3, SKUID: 4, Stock: 10, Buckets: 1, Tokens: true}
	if p, err := tb.store.Provision(tb.ctx, tb.pool, k); err != nil || !p.Created {
		t.Fatalf("Provision = %+v, %v", p, err)
	}
	if p, err := tb.store.Provision(tb.ctx, tb.pool, k); err != nil || p.Created {
		t.Fatalf("repeated Provision = %+v, %v; want not created", p, err)
	}
	buckets := k
	buckets.Tokens = false
	_, err := tb.store.Provision(tb.ctx, tb.pool, buckets)
	var e *inventory.Error
	if !errors.As(err, &e) || !errors.Is(err, inventory.ErrProvisionConflict) || e.Field != "token_stock" || e.Found != "tokens" || e.Asked != "buckets" {
		t.Fatalf("Provision with buckets = %v; want a conflict on the mode", err)
	}
	tb.provision(t, 3, 5, 10, 1)
	tokens := inventory.SKU{ActivityID: 3, SKUID: 5, Stock: 10, Buckets: 1, Tokens: true}
	if _, err := tb.store.Provision(tb.ctx, tb.pool, tokens); !errors.As(err, &e) || e.Found != "buckets" || e.Asked != "tokens" {
		t.Fatalf("Provision with tokens over buckets = %v; want a conflict on the mode", err)
	}
	for _, bad := range []inventory.SKU{
		{ActivityID: 3, SKUID: 6, Stock: 10, Buckets: 2, Tokens: true},
		{ActivityID: 3, SKUID: 6, Stock: 10_000_001, Buckets: 1, Tokens: true},
	} {
		if _, err := tb.store.Provision(tb.ctx, tb.pool, bad); !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Fatalf("Provision(%+v) = %v; want ErrInvalidArgument", bad, err)
		}
	}
	if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_sku")+` WHERE sku_id = 6`); n != 0 {
		t.Fatalf("%d SKU rows written by bad input", n)
	}
	if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_token")); n != 10 {
		t.Fatalf("%d token rows, want 10", n)
	}
	tb.auditClean(t, 3, 0)
}

// The audit sees a token row that contradicts the ledger: a free token
// marked as held by a reservation with no allocation (the replay's
// available count and token_claim), a held token moved to another
// reservation (token_claim for both), a token deleted (the SKU total).
func TestTokensAuditFindsCorruptTokens(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.tokens = true
	tb.provision(t, 9, 1, 4, 1)
	r := tb.newReservation(9, 1, 0)
	if _, err := tb.allocateIn(t, r); err != nil {
		t.Fatal(err)
	}
	tb.auditClean(t, 9, 1)
	stranger := uuid.New()
	kinds := func(want ...string) {
		t.Helper()
		fs, err := tb.store.Audit(tb.ctx, tb.pool, 9, 1)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, f := range fs {
			got[f.Kind]++
		}
		for _, k := range want {
			if got[k] == 0 {
				t.Errorf("audit %+v: no %s finding", fs, k)
			}
		}
	}
	tb.exec(t, `UPDATE `+tb.table("inventory_token")+` SET reservation_id = $1
		WHERE activity_id = 9 AND sku_id = 1 AND token_no = (SELECT min(token_no) FROM `+tb.table("inventory_token")+` WHERE reservation_id IS NULL)`, stranger)
	kinds(inventory.FindingReplayAvailable, inventory.FindingReplayAllocated, inventory.FindingTokenClaim)
	tb.exec(t, `UPDATE `+tb.table("inventory_token")+` SET reservation_id = NULL WHERE reservation_id = $1`, stranger)
	tb.auditClean(t, 9, 1)
	tb.exec(t, `UPDATE `+tb.table("inventory_token")+` SET reservation_id = $1 WHERE reservation_id = $2`, stranger, r.ReservationID)
	fs, err := tb.store.Audit(tb.ctx, tb.pool, 9, 1)
	if err != nil {
		t.Fatal(err)
	}
	var claims []inventory.Finding
	for _, f := range fs {
		if f.Kind != inventory.FindingTokenClaim {
			t.Errorf("audit: unexpected %+v (the counts are unchanged)", f)
		}
		claims = append(claims, f)
	}
	if len(claims) != 2 {
		t.Fatalf("token_claim findings %+v; want the holder without its token and the stranger with one", claims)
	}
	tb.exec(t, `UPDATE `+tb.table("inventory_token")+` SET reservation_id = $1 WHERE reservation_id = $2`, r.ReservationID, stranger)
	tb.auditClean(t, 9, 1)
	tb.exec(t, `DELETE FROM `+tb.table("inventory_token")+` WHERE activity_id = 9 AND sku_id = 1 AND reservation_id IS NULL
		AND token_no = (SELECT max(token_no) FROM `+tb.table("inventory_token")+` WHERE reservation_id IS NULL)`)
	if n := tb.tokensHeld(t, 9, 1, nil); n != 2 {
		t.Fatalf("%d free tokens after deleting one, want 2", n)
	}
	kinds(inventory.FindingSKUTotal, inventory.FindingReplayAvailable, inventory.FindingReplayTotal)
}

// Rebalance and AdjustStock act on bucket rows; a token SKU has none: they
// refuse it and write nothing.
func TestTokensNotRebalancedOrAdjusted(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.tokens = true
	tb.provision(t, 4, 4, 6, 1)
	err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		_, err := tb.store.Rebalance(tb.ctx, tx, inventory.RebalanceRequest{ActivityID: 4, SKUID: 4})
		return err
	})
	if !errors.Is(err, inventory.ErrUnknownSKU) {
		t.Fatalf("Rebalance = %v; want ErrUnknownSKU (no bucket rows)", err)
	}
	for _, delta := range []int32{3, -3} {
		err = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.AdjustStock(tb.ctx, tx, inventory.Adjustment{ActivityID: 4, SKUID: 4, Bucket: 0, Delta: delta,
				Operator: "ops", ApprovalRef: "CR-1", Reason: "tokens"})
			return err
		})
		if !errors.Is(err, inventory.ErrUnknownBucket) {
			t.Fatalf("AdjustStock(%d) = %v; want ErrUnknownBucket", delta, err)
		}
	}
	if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")+` WHERE ledger_type <> 40`); n != 0 {
		t.Fatalf("%d ledger rows written", n)
	}
	tb.auditClean(t, 4, 4)
}

// The one-batch forms (pgtx.Abort) on a token SKU: the fresh path's batch
// claims a token, the one-batch release frees it with the RELEASE row's
// counters those of the unit freed, a second release aborts its batch on
// the RELEASE key and writes nothing; the audit stays clean.
func TestTokensOneBatchAllocateAndRelease(t *testing.T) {
	t.Parallel()
	tokenModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 12, 121, 3, 1)
		r := tb.newReservation(12, 121, 0)
		a := allocationOf(r, 901)
		var got inventory.Allocated
		if err := tb.buyOrAbort(t, r, 901, a, &got); err != nil {
			t.Fatal(err)
		}
		if got.BeforeAvailable != 1 || got.AfterAvailable != 0 || got.AfterAllocated != 1 {
			t.Fatalf("allocated %+v; want the claimed unit's counters", got)
		}
		if n := tb.tokensHeld(t, 12, 121, &r.ReservationID); n != 1 {
			t.Fatalf("reservation holds %d tokens, want 1", n)
		}
		var rel inventory.Allocated
		if err := tb.releaseOrAbort(t, a, &rel); err != nil {
			t.Fatalf("release: %v", err)
		}
		if rel.LedgerID == 0 || rel.BeforeAvailable != 0 || rel.AfterAvailable != 1 || rel.BeforeAllocated != 1 || rel.AfterAllocated != 0 {
			t.Fatalf("released %+v; want the freed unit's counters", rel)
		}
		if n := tb.tokensHeld(t, 12, 121, nil); n != 3 {
			t.Fatalf("%d free tokens after the release, want 3", n)
		}
		if err := tb.releaseOrAbort(t, a, nil); !errors.Is(err, inventory.ErrAlreadyApplied) {
			t.Fatalf("second release: %v; want ErrAlreadyApplied", err)
		}
		if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")+` WHERE ledger_type = 20`); n != 1 {
			t.Fatalf("%d RELEASE rows, want 1", n)
		}
		tb.auditClean(t, 12, 121)
	})
}
