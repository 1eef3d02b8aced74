package inventory_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/inventory"
)

// reservationFor returns a new reservation whose PickBucket(id, n) is one of
// the wanted buckets, as a front door hashing reservation ids would.
func (tb testBundle) reservationFor(t *testing.T, activity, sku int64, n int, wanted func(int16) bool) inventory.NewReservation {
	t.Helper()
	for {
		r := tb.newReservation(activity, sku, 0)
		b, err := inventory.PickBucket(r.ReservationID.String(), n)
		if err != nil {
			t.Fatal(err)
		}
		if wanted(b) {
			r.Bucket = b
			return r
		}
	}
}

func (tb testBundle) rebalance(t *testing.T, activity, sku int64) inventory.Rebalanced {
	t.Helper()
	var out inventory.Rebalanced
	err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		var err error
		out, err = tb.store.Rebalance(tb.ctx, tx, inventory.RebalanceRequest{ActivityID: activity, SKUID: sku})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Buyers whose bucket is sold out are refused while other buckets still
// hold stock; after a rebalance the same buyers succeed.
func TestRebalanceFreesStrandedStock(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 100, 4) // 25 per bucket
	zero := func(b int16) bool { return b == 0 }
	buyMany := func(n int) (ok int) {
		for range n {
			switch err := tb.buy(tb.ctx, tb.reservationFor(t, 1, 1, 4, zero)); {
			case err == nil:
				ok++
			case !errors.Is(err, inventory.ErrSoldOut):
				t.Fatal(err)
			}
		}
		return ok
	}
	if ok := buyMany(40); ok != 25 {
		t.Fatalf("phase 1: %d sold, want 25", ok)
	}
	if ok := buyMany(10); ok != 0 {
		t.Fatalf("stranded: %d sold, want 0 (bucket 0 is empty)", ok)
	}

	res := tb.rebalance(t, 1, 1)
	// 75 available over 4 buckets: 19, 19, 19 stay with the fuller buckets,
	// bucket 0 gets 18.
	if res.Available != 75 || res.Moved != 18 || len(res.Moves) != 4 || res.MoveID == uuid.Nil {
		t.Fatalf("rebalance %+v", res)
	}
	var sum int32
	for _, m := range res.Moves {
		sum += m.AvailableDelta
		want := int32(-6)
		if m.Bucket == 0 {
			want = 18
		}
		if m.AvailableDelta != want || m.AfterAvailable != m.BeforeAvailable+m.AvailableDelta || m.LedgerID == 0 {
			t.Errorf("move %+v", m)
		}
	}
	if sum != 0 {
		t.Fatalf("deltas sum to %d", sum)
	}
	if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")+` WHERE ledger_type = 30 AND total_delta = available_delta AND allocated_delta = 0`); n != 4 {
		t.Fatalf("%d ADJUST rows, want 4", n)
	}
	tot := tb.totals(t, 1, 1)
	if tot.Total != 100 || tot.Available != 75 || tot.Allocated != 25 {
		t.Fatalf("totals after rebalance %+v", tot)
	}
	bs, err := inventory.BucketsOf(tb.store, tb.ctx, tb.pool, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if bs[0].Total != 43 || bs[0].Allocated != 25 || bs[0].Available != 18 || bs[1].Total != 19 {
		t.Fatalf("buckets %+v", bs)
	}
	tb.auditClean(t, 1, 1)

	if ok := buyMany(30); ok != 18 {
		t.Fatalf("after rebalance: %d sold, want 18", ok)
	}
	// Even buckets: a second run on a fresh, even SKU moves nothing.
	tb.provision(t, 1, 2, 64, 8)
	if res := tb.rebalance(t, 1, 2); res.Moved != 0 || len(res.Moves) != 0 || res.Available != 64 {
		t.Fatalf("rebalance of even buckets %+v", res)
	}
	err = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		_, err := tb.store.Rebalance(tb.ctx, tx, inventory.RebalanceRequest{ActivityID: 1, SKUID: 99})
		return err
	})
	if !errors.Is(err, inventory.ErrUnknownSKU) {
		t.Fatalf("unknown SKU: %v", err)
	}
	tb.auditClean(t, 1, 1)
	tb.auditClean(t, 1, 2)
}

// Rebalancers race with buyers whose front door only uses half of the
// buckets: nothing is oversold, conservation and the ledger hold, there is
// no deadlock, and more is sold than the used buckets held.
func TestRebalanceRacingAllocations(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const (
		stock       = 400
		buckets     = 8
		buyers      = 800
		workers     = 16
		rebalancers = 2
	)
	tb.provision(t, 3, 4, stock, buckets)
	// A pool of its own, so that the shared pool's other tests do not
	// starve it (or it them).
	tb.pool = pgtest.NewPool(t, func(cfg *pgxpool.Config) { cfg.MaxConns = workers + rebalancers + 2 })
	lowHalf := func(b int16) bool { return b < buckets/2 }

	var (
		ok, soldOut, rebalances atomic.Int64
		errMu                   sync.Mutex
		firstErr                error
	)
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	// Buyers tick the rebalancers every few purchases, so rebalances
	// interleave with allocations all through the run without starving them.
	tick := make(chan struct{}, rebalancers)
	var rwg sync.WaitGroup
	for range rebalancers {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for range tick {
				err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
					res, err := tb.store.Rebalance(tb.ctx, tx, inventory.RebalanceRequest{ActivityID: 3, SKUID: 4, Reason: "TEST_RACE"})
					var sum int32
					for _, m := range res.Moves {
						sum += m.AvailableDelta
					}
					if err == nil && sum != 0 {
						err = errors.New("rebalance deltas do not sum to zero")
					}
					return err
				})
				if err != nil {
					fail(err)
					return
				}
				rebalances.Add(1)
			}
		}()
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if i%20 == 0 {
					select {
					case tick <- struct{}{}:
					default: // the rebalancers are busy
					}
				}
				switch err := tb.buy(tb.ctx, tb.reservationFor(t, 3, 4, buckets, lowHalf)); {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, inventory.ErrSoldOut):
					soldOut.Add(1)
				default:
					fail(err)
				}
			}
		}()
	}
	for i := range buyers {
		jobs <- i
	}
	close(jobs)
	testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
	close(tick)
	testwait.WaitWithin(t, &rwg, testwait.Long, "the concurrent transactions")
	if firstErr != nil {
		t.Fatal(firstErr)
	}

	// Whatever happened during the race, one more rebalance and another
	// round of buyers must be able to sell stock from the unused half.
	tb.rebalance(t, 3, 4)
	for range buyers / 4 {
		switch err := tb.buy(tb.ctx, tb.reservationFor(t, 3, 4, buckets, lowHalf)); {
		case err == nil:
			ok.Add(1)
		case !errors.Is(err, inventory.ErrSoldOut):
			t.Fatal(err)
		}
	}
	tot := tb.totals(t, 3, 4)
	t.Logf("rebalances %d, sold %d, sold out %d, totals %+v", rebalances.Load(), ok.Load(), soldOut.Load(), tot)
	if tot.Total != stock || tot.Allocated != ok.Load() || tot.Allocated > stock || tot.Available+tot.Allocated != stock {
		t.Fatalf("sold %d, totals %+v", ok.Load(), tot)
	}
	if ok.Load() <= stock/2 {
		t.Fatalf("sold %d: no more than the %d units the used buckets started with", ok.Load(), stock/2)
	}
	tb.auditClean(t, 3, 4)
}

// TestRebalanceTiesAndEvidence: the remainder of the even split goes to
// the buckets that hold the most, ties to the lower bucket number; the
// ADJUST rows carry the request's reason, operator and approval, or the
// defaults when it names none.
func TestRebalanceTiesAndEvidence(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for sku := int64(1); sku <= 2; sku++ {
		tb.provision(t, 1, sku, 8, 4) // 2 per bucket
		// Take 1 unit of bucket 2 and 2 of bucket 3: available 2, 2, 1, 0.
		for _, b := range []int16{2, 3, 3} {
			r := tb.newReservation(1, sku, b)
			if err := tb.buy(tb.ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 5 units over 4 buckets: 1 each and the one left to bucket 0, which
	// ties with bucket 1 for the most: 2, 1, 1, 1.
	check := func(sku int64, res inventory.Rebalanced, reason, operator, approval string) {
		t.Helper()
		if res.Available != 5 || res.Moved != 1 || len(res.Moves) != 2 {
			t.Fatalf("SKU %d: rebalanced %+v; want 5 available, 1 moved in 2 rows", sku, res)
		}
		for i, want := range []struct {
			bucket int16
			delta  int32
		}{{1, -1}, {3, 1}} {
			m := res.Moves[i]
			if m.Bucket != want.bucket || m.AvailableDelta != want.delta || m.Reason != reason || m.Operator != operator || m.ApprovalRef != approval {
				t.Fatalf("SKU %d: move %d: %+v; want bucket %d by %d, reason %q, operator %q, approval %q", sku, i, m, want.bucket, want.delta, reason, operator, approval)
			}
		}
		for b, want := range []int32{2, 1, 1, 1} {
			got, err := inventory.BucketsOf(tb.store, tb.ctx, tb.pool, 1, sku)
			if err != nil || got[b].Available != want {
				t.Fatalf("SKU %d: buckets %+v, %v; want bucket %d with %d available", sku, got, err, b, want)
			}
		}
	}
	res := tb.rebalance(t, 1, 1)
	check(1, res, inventory.DefaultRebalanceReason, inventory.DefaultRebalanceOperator, "rebalance:"+res.MoveID.String())
	if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		var err error
		res, err = tb.store.Rebalance(tb.ctx, tx, inventory.RebalanceRequest{ActivityID: 1, SKUID: 2, Reason: "STRANDED", Operator: "ops:dan", ApprovalRef: "TICKET-7"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	check(2, res, "STRANDED", "ops:dan", "TICKET-7")
}
