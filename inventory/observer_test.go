package inventory_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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
