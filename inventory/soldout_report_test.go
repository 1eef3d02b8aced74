package inventory_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// TestSoldOutReportsItsOwnFreeStock: an allocation of more units than its
// SKU has free is refused as sold out with the free stock of its own
// bucket (on tokens, its SKU's free tokens), on buckets and tokens, with
// the plain and the Citus statements, the direct and the queued forms:
// not another SKU's of the activity, nor the same SKU id's of another
// activity, which have more free, and not counting the units other buyers
// hold.
func TestSoldOutReportsItsOwnFreeStock(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 2, 20, 5, 1)
		tb.provision(t, 2, 21, 7, 1)
		tb.provision(t, 3, 20, 9, 1)
		for range 2 { // two units of SKU 20 held by other buyers
			if _, err := tb.allocateIn(t, tb.newReservation(2, 20, 0)); err != nil {
				t.Fatal(err)
			}
		}
		for _, form := range []string{"AllocateBucket", "QueueAllocateBucket/Return"} {
			r := tb.newReservation(2, 20, 0)
			r.Quantity = 4
			var err error
			if form == "AllocateBucket" {
				_, err = tb.allocateIn(t, r)
			} else {
				tb.insertReservations(t, []inventory.NewReservation{r})
				err = tb.allocateOnly(allocationOf(r, tb.ids.Add(1)))
			}
			var e *inventory.Error
			if !errors.As(err, &e) || !errors.Is(err, inventory.ErrSoldOut) || e.Available != 3 || e.Requested != 4 {
				t.Fatalf("%s: 4 units of a SKU with 3 free: %v (%+v), want sold out with 3 available", form, err, e)
			}
		}
		if tot := tb.totals(t, 2, 20); tot.Allocated != 2 || tot.Available != 3 {
			t.Fatalf("SKU 2/20 after the refusals: %+v", tot)
		}
	})
}

// TestCheckSoldOutReadsItsOwnBucket: QueueCheckSoldOut, with pgtx.Return
// and pgtx.Abort, on buckets and tokens, plain and Citus, answers for its
// own bucket (on tokens, its SKU's free tokens) only: SKU 2/20 with 1
// unit free is sold out for 2 units and not for 1, while another SKU of
// the activity and the same SKU id in two other activities (their sales
// paused), with the same bucket numbers, have plenty; its bucket 1,
// which on buckets the others have, is unknown.
func TestCheckSoldOutReadsItsOwnBucket(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		// Other activities' SKU 20 first, one of a lower id: a read that
		// lost its activity filter would meet one of their rows first,
		// whether it read them in the table's or in the key's order.
		tb.provision(t, 3, 20, 9, 2-btoi(tb.tokens))
		tb.provision(t, 1, 20, 9, 2-btoi(tb.tokens))
		// Their sales are paused (before this activity's rows are written,
		// so theirs stay first): their sale is not this one's.
		for _, act := range []int64{1, 3} {
			if _, err := tb.setSale(t, inventory.SaleChange{ActivityID: act, SKUID: 20, To: inventory.SalePaused, Operator: "test", Reason: "other activity"}); err != nil {
				t.Fatal(err)
			}
		}
		tb.provision(t, 2, 20, 3, 1)
		tb.provision(t, 2, 21, 9, 2-btoi(tb.tokens))
		for range 2 {
			if _, err := tb.allocateIn(t, tb.newReservation(2, 20, 0)); err != nil {
				t.Fatal(err)
			}
		}
		check := func(on pgtx.OnRefusal, bucket int16, qty int16) error {
			t.Helper()
			r := tb.newReservation(2, 20, bucket)
			r.Quantity = qty
			var b pgx.Batch
			if err := tb.store.QueueCheckSoldOut(&b, allocationOf(r, 1), on); err != nil {
				t.Fatal(err)
			}
			if on == pgtx.Abort {
				return pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{}, &b)
			}
			return tb.pool.SendBatch(tb.ctx, &b).Close()
		}
		for _, on := range []pgtx.OnRefusal{pgtx.Return, pgtx.Abort} {
			if err := check(on, 0, 2); err != nil {
				t.Fatalf("%v: 2 units with 1 free: %v, want sold out", on, err)
			}
			if err := check(on, 0, 1); !errors.Is(err, inventory.ErrNotSoldOut) {
				t.Fatalf("%v: 1 unit with 1 free: %v, want ErrNotSoldOut", on, err)
			}
			if err := check(on, 1, 1); !errors.Is(err, inventory.ErrUnknownBucket) {
				t.Fatalf("%v: bucket 1 of a SKU of one bucket: %v, want ErrUnknownBucket", on, err)
			}
		}
	})
}

func btoi(b bool) int16 {
	if b {
		return 1
	}
	return 0
}

// TestCitusSoldOutReportsTheStockAfterItsWait: with Config.Citus the
// free stock of a sold-out refusal comes from a statement of its own
// (available_now), after the allocation. It reads the bucket of a bucket
// SKU and the free tokens of a token SKU, by the SKU's own kind: a bucket
// SKU beside token SKUs of the same activity and SKU id (written first,
// so that a read that lost a filter meets them first), and a token SKU
// beside bucket SKUs. And it reads the stock as it is after the
// allocation waited: an allocation of 2 tokens waits for the lock on its
// reservation, meanwhile another buyer takes one of the 2 free tokens and
// commits, and the refusal reports the 1 left, not the 2 its statement's
// snapshot saw.
func TestCitusSoldOutReportsTheStockAfterItsWait(t *testing.T) {
	t.Parallel()
	tb := setupMode(t, true)
	kinds := func(tokens bool) testBundle { k := tb; k.tokens = tokens; return k }
	for _, target := range []bool{false, true} {
		act := int64(2)
		if target {
			act = 4
		}
		kinds(!target).provision(t, act+1, 20, 9, 1)
		kinds(!target).provision(t, act, 21, 7, 1)
		k := kinds(target)
		k.provision(t, act, 20, 5, 1)
		for range 2 {
			if _, err := k.allocateIn(t, k.newReservation(act, 20, 0)); err != nil {
				t.Fatal(err)
			}
		}
		r := k.newReservation(act, 20, 0)
		r.Quantity = 4
		k.insertReservations(t, []inventory.NewReservation{r})
		err := k.allocateOnly(allocationOf(r, k.ids.Add(1)))
		var e *inventory.Error
		if !errors.As(err, &e) || !errors.Is(err, inventory.ErrSoldOut) || e.Available != 3 || e.Requested != 4 {
			t.Fatalf("tokens %v: 4 units of a SKU with 3 free beside SKUs of the other kind: %v (%+v), want sold out with 3 available", target, err, e)
		}
	}

	k := kinds(true)
	k.provision(t, 6, 20, 3, 1)
	k.provision(t, 7, 20, 9, 1) // free tokens of other SKUs, which the count must leave out
	k.provision(t, 6, 21, 9, 1)
	if _, err := k.allocateIn(t, k.newReservation(6, 20, 0)); err != nil {
		t.Fatal(err)
	}
	r := k.newReservation(6, 20, 0)
	r.Quantity = 2
	k.insertReservations(t, []inventory.NewReservation{r})
	holder, err := k.pool.Begin(k.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.WithoutCancel(k.ctx)) }()
	if _, err := holder.Exec(k.ctx, `SELECT 1 FROM `+k.table("inventory_reservation")+` WHERE reservation_id = $1 FOR UPDATE`, r.ReservationID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- k.allocateOnly(allocationOf(r, k.ids.Add(1))) }()
	k.waitLockWaiters(t, 1)
	if _, err := k.allocateIn(t, k.newReservation(6, 20, 0)); err != nil {
		t.Fatal(err)
	}
	if err := holder.Rollback(k.ctx); err != nil {
		t.Fatal(err)
	}
	err = testwait.Recv(t, done, "the allocation that waited for its reservation")
	var e *inventory.Error
	if !errors.As(err, &e) || !errors.Is(err, inventory.ErrSoldOut) || e.Available != 1 || e.Requested != 2 {
		t.Fatalf("2 tokens after another buyer took 1 of the 2 free during the wait: %v (%+v), want sold out with 1 available", err, e)
	}
	if n := k.tokensHeld(t, 6, 20, nil); n != 1 {
		t.Fatalf("%d free tokens after the refusal, want 1", n)
	}
}
