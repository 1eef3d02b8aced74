package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// txOutcomes counts what pgtx reports per attempt and per call.
type txOutcomes struct {
	attempts, retries, committed int
	retryErr                     error
}

// observer is the pgtx.Observer of o's hooks.
func (o *txOutcomes) observer() pgtx.Observer {
	return pgtx.Observer{AttemptEnd: o.AttemptEnd, TxEnd: o.TxEnd}
}

func (o *txOutcomes) AttemptEnd(_ context.Context, e pgtx.Event) {
	o.attempts++
	if e.Retry {
		o.retries++
		o.retryErr = e.Err
	}
}

func (o *txOutcomes) TxEnd(_ context.Context, e pgtx.Event) {
	if pgtx.Classify(e.Err).Committed {
		o.committed++
	}
}

// observed returns a test bundle whose store reports to a new recorder,
// and the recorder, after provisioning activity/sku with stock units in
// buckets buckets.
func observed(t *testing.T, activity, sku int64, stock int32, buckets int16) (testBundle, *recorder) {
	t.Helper()
	return observedMode(t, false, activity, sku, stock, buckets)
}

// observedMode is observed with Config.Citus set to citus.
func observedMode(t *testing.T, citus bool, activity, sku int64, stock int32, buckets int16) (testBundle, *recorder) {
	t.Helper()
	tb := setupMode(t, citus)
	rec := &recorder{}
	var err error
	if tb.store, err = inventory.New(inventory.Config{Schema: tb.schema, Observer: rec.observer(), Citus: citus}); err != nil {
		t.Fatal(err)
	}
	tb.provision(t, activity, sku, stock, buckets)
	return tb, rec
}

// TestObserverPerAttempt: the allocation hook fires once per execution —
// inside the open transaction, so a transaction that fails with a real
// serialization failure after its allocation and is retried reports two
// successful allocations — while pgtx reports one commit, and the ledger
// holds one allocation. This is the documented split: per attempt here,
// per commit in pgtx's TxEnd.
func TestObserverPerAttempt(t *testing.T) {
	t.Parallel()
	tb, rec := observed(t, 7, 8, 5, 1)
	probe := pgx.Identifier{tb.schema, "probe"}.Sanitize()
	if _, err := tb.pool.Exec(tb.ctx, `CREATE TABLE `+probe+` (id int PRIMARY KEY, v int NOT NULL); INSERT INTO `+probe+` VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	r := tb.newReservation(7, 8, 0)
	txo := &txOutcomes{}
	runs := 0
	err := pgtx.RunInTx(tb.ctx, tb.pool, pgtx.Options{Name: "buy", IsoLevel: pgx.RepeatableRead, Observer: txo.observer()}, func(tx pgx.Tx) error {
		runs++
		acq, err := tb.store.AcquireReservation(tb.ctx, tx, r)
		if err != nil {
			return err
		}
		if _, err := tb.store.AllocateBucket(tb.ctx, tx, acq.Reservation.Allocation(tb.ids.Add(1), uuid.Nil)); err != nil {
			return err
		}
		if runs == 1 {
			// Another session changes the row after this transaction's
			// snapshot: updating it now is a serialization failure.
			if _, err := tb.pool.Exec(tb.ctx, `UPDATE `+probe+` SET v = v + 1`); err != nil {
				return err
			}
		}
		_, err = tx.Exec(tb.ctx, `UPDATE `+probe+` SET v = v + 1`)
		return err
	})
	if err != nil || runs != 2 {
		t.Fatalf("RunInTx = %v after %d runs, want nil after 2", err, runs)
	}
	if !pgtx.Classify(txo.retryErr).SerializationFailure {
		t.Fatalf("the retry's cause is %v, want a serialization failure", txo.retryErr)
	}
	if got := rec.count("allocate", true); got != 2 {
		t.Errorf("allocation hook: %d successes, want 2 (one per attempt)", got)
	}
	if txo.attempts != 2 || txo.retries != 1 || txo.committed != 1 {
		t.Errorf("pgtx: %d attempts, %d retries, %d commits; want 2, 1, 1", txo.attempts, txo.retries, txo.committed)
	}
	if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")+` WHERE ledger_type = 10`); n != 1 {
		t.Errorf("%d ALLOCATE ledger rows, want 1", n)
	}
	if tot := tb.totals(t, 7, 8); tot.Allocated != 1 {
		t.Errorf("allocated %d, want 1", tot.Allocated)
	}
	for _, e := range rec.events {
		if e.Batch || e.ActivityID != 7 || e.SKUID != 8 || e.Quantity != 1 || e.Err != nil {
			t.Errorf("event %+v", e)
		}
	}
}

// TestObserverSomeHooks: a nil hook does nothing. A store whose Observer
// sets only one of the two hooks hears, from the direct and the one-batch
// forms (with [pgtx.Abort]), of what that hook reports and of nothing
// else; the calls run as they do unobserved.
func TestObserverSomeHooks(t *testing.T) {
	t.Parallel()
	for _, citus := range []bool{false, true} {
		for _, only := range []string{"allocate", "release"} {
			t.Run(fmt.Sprintf("citus=%v/%s", citus, only), func(t *testing.T) {
				t.Parallel()
				observeSomeHooks(t, citus, only)
			})
		}
	}
}

func observeSomeHooks(t *testing.T, citus bool, only string) {
	tb := setupMode(t, citus)
	rec := &recorder{}
	obs := inventory.Observer{AllocateEnd: rec.AllocateEnd}
	if only == "release" {
		obs = inventory.Observer{ReleaseEnd: rec.ReleaseEnd}
	}
	var err error
	if tb.store, err = inventory.New(inventory.Config{Schema: tb.schema, Observer: obs, Citus: citus}); err != nil {
		t.Fatal(err)
	}
	tb.provision(t, 12, 120, 4, 1)

	// One batch: allocate, then release.
	r := tb.newReservation(12, 120, 0)
	a := allocationOf(r, 920)
	if err := tb.buyOrAbort(t, r, 920, a, nil); err != nil {
		t.Fatalf("one-batch allocation: %v", err)
	}
	if err := tb.releaseOrAbort(t, a, nil); err != nil {
		t.Fatalf("one-batch release: %v", err)
	}
	// Direct forms.
	r2 := tb.newReservation(12, 120, 0)
	if err := tb.buy(tb.ctx, r2); err != nil {
		t.Fatalf("allocation: %v", err)
	}
	if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		_, err := tb.store.ReleaseStock(tb.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r2.ReservationID}})
		return err
	}); err != nil {
		t.Fatalf("release: %v", err)
	}

	wantAlloc, wantRel := 2, 0
	if only == "release" {
		wantAlloc, wantRel = 0, 2
	}
	if got, rel := rec.count("allocate", true), rec.count("release", true); got != wantAlloc || rel != wantRel {
		t.Fatalf("observed %d allocations, %d releases; want %d, %d (%+v)", got, rel, wantAlloc, wantRel, rec.events)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) != wantAlloc+wantRel {
		t.Fatalf("observed %+v, want %d events", rec.events, wantAlloc+wantRel)
	}
	for i, e := range rec.events {
		if e.Op != only || e.ActivityID != 12 || e.SKUID != 120 || e.Quantity != 1 || e.Bucket != 0 || e.Batch != (i == 0) {
			t.Errorf("event %d: %+v", i, e)
		}
	}
	if tot := tb.totals(t, 12, 120); tot.Allocated != 0 {
		t.Errorf("allocated %d after both releases, want 0", tot.Allocated)
	}
	tb.auditClean(t, 12, 120)
}

// A release that found no allocation is reported with its error and the
// allocation's fields zero, Bucket -1 (there was none to read them from),
// in the direct and the Citus forms.
func TestObserverRefusedRelease(t *testing.T) {
	t.Parallel()
	for _, citus := range []bool{false, true} {
		tb := setupMode(t, citus)
		rec := &recorder{}
		var err error
		if tb.store, err = inventory.New(inventory.Config{Schema: tb.schema, Observer: rec.observer(), Citus: citus}); err != nil {
			t.Fatal(err)
		}
		tb.provision(t, 13, 130, 4, 1)
		err = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.ReleaseStock(tb.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: uuid.Must(uuid.NewV7())}})
			return err
		})
		if !errors.Is(err, inventory.ErrNotAllocated) {
			t.Fatalf("citus %v: release of nothing: %v, want ErrNotAllocated", citus, err)
		}
		rec.mu.Lock()
		if len(rec.events) != 1 || rec.events[0].Op != "release" || !errors.Is(rec.events[0].Err, inventory.ErrNotAllocated) ||
			rec.events[0].ActivityID != 0 || rec.events[0].SKUID != 0 || rec.events[0].Bucket != -1 || rec.events[0].Quantity != 0 {
			t.Errorf("citus %v: observed %+v; want one refused release with bucket -1 and zero fields", citus, rec.events)
		}
		rec.mu.Unlock()
	}
}
