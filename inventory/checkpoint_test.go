package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inventory"
)

// holdAllocation allocates r in a transaction it leaves open (its ledger
// row taken, not committed) and returns the transaction and the row's
// ledger id.
func (tb testBundle) holdAllocation(t *testing.T, r inventory.NewReservation) (pgx.Tx, int64) {
	t.Helper()
	tx, err := tb.pool.Begin(tb.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(tb.ctx)) })
	acq, err := tb.store.AcquireReservation(tb.ctx, tx, r)
	if err != nil {
		t.Fatal(err)
	}
	a, err := tb.store.AllocateBucket(tb.ctx, tx, acq.Reservation.Allocation(tb.ids.Add(1), uuid.Nil))
	if err != nil {
		t.Fatal(err)
	}
	return tx, a.LedgerID
}

// ledgerID is the ledger id of r's ALLOCATE row.
func (tb testBundle) ledgerID(t *testing.T, r inventory.NewReservation) int64 {
	t.Helper()
	return tb.count(t, `SELECT ledger_id FROM `+tb.table("inventory_ledger")+` WHERE idempotency_key = 'ALLOCATE:' || $1::text`, r.ReservationID)
}

// bothAudits runs Audit and AuditIncremental in one read-only Repeatable
// Read transaction (one snapshot) and returns their findings.
func (tb testBundle) bothAudits(t *testing.T, ctx context.Context, activity, sku int64) (full, incr []inventory.Finding) {
	t.Helper()
	err := pgx.BeginTxFunc(ctx, tb.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if full, err = tb.store.Audit(ctx, tx, activity, sku); err != nil {
			return err
		}
		incr, err = tb.store.AuditIncremental(ctx, tx, activity, sku)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return full, incr
}

// checkpointMatchesLedger fails unless the checkpoint's sums are the sums
// of the ledger rows at or below its watermark.
func (tb testBundle) checkpointMatchesLedger(t *testing.T) {
	t.Helper()
	diff := tb.count(t, `SELECT count(*) FROM (
		SELECT activity_id, sku_id, inventory_bucket AS bucket_no, sum(available_delta) AS available, sum(allocated_delta) AS allocated, sum(total_delta) AS total
		  FROM `+tb.table("inventory_ledger")+`
		 WHERE ledger_id <= (SELECT through_ledger_id FROM `+tb.table("inventory_audit_watermark")+`)
		 GROUP BY 1, 2, 3
		EXCEPT
		SELECT activity_id, sku_id, bucket_no, available, allocated, total FROM `+tb.table("inventory_audit_checkpoint")+`) d`)
	if diff != 0 {
		t.Errorf("%d buckets' checkpoint sums differ from the ledger's up to the watermark", diff)
	}
}

// A ledger row taken below the would-be watermark but not yet committed
// (a concurrent allocation) must hold the checkpoint back until it is
// decided: committed, it is in the sums; rolled back, it is not.
// Otherwise the incremental replay would lose it for good and report the
// bucket as broken (or hide a real break).
func TestCheckpointWaitsForUndecidedLedgerRows(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		name := map[bool]string{true: "commit", false: "rollback"}[commit]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			tb.provision(t, 1, 1, 10, 2)
			before, err := tb.store.Checkpoint(tb.ctx, tb.pool)
			if err != nil {
				t.Fatal(err)
			}
			held := tb.newReservation(1, 1, 0)
			tx, heldID := tb.holdAllocation(t, held)
			later := tb.newReservation(1, 1, 1)
			if err := tb.buy(tb.ctx, later); err != nil {
				t.Fatal(err)
			}
			laterID := tb.ledgerID(t, later)
			if heldID >= laterID {
				t.Fatalf("held ledger id %d, committed one %d: want the held one below", heldID, laterID)
			}

			// While the lower row is undecided, Checkpoint cannot move.
			short, cancel := context.WithTimeout(tb.ctx, 300*time.Millisecond)
			w, err := tb.store.Checkpoint(short, tb.pool)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || w != before {
				t.Fatalf("Checkpoint with ledger row %d undecided = %d, %v; want %d and the context's deadline", heldID, w, err, before)
			}
			if got := tb.count(t, `SELECT through_ledger_id FROM `+tb.table("inventory_audit_watermark")); got != before {
				t.Fatalf("watermark %d moved while ledger row %d was undecided (from %d)", got, heldID, before)
			}

			// A Checkpoint started now waits for it, then moves past both.
			type result struct {
				w   int64
				err error
			}
			done := make(chan result, 1)
			go func() {
				w, err := tb.store.Checkpoint(tb.ctx, tb.pool)
				done <- result{w, err}
			}()
			wait := time.NewTimer(30 * time.Second)
			defer wait.Stop()
			// It must still be waiting (the shorter call above showed it
			// cannot have moved).
			select {
			case r := <-done:
				t.Fatalf("Checkpoint returned %d, %v while ledger row %d was undecided", r.w, r.err, heldID)
			default:
			}
			if commit {
				if _, err := tb.store.TransitionReservation(tb.ctx, tx, inventory.Transition{ReservationID: held.ReservationID, To: inventory.StatusOrdered, OrderID: tb.ids.Add(1)}); err != nil {
					t.Fatal(err)
				}
				err = tx.Commit(tb.ctx)
			} else {
				err = tx.Rollback(tb.ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-done:
				if r.err != nil || r.w < laterID {
					t.Fatalf("Checkpoint after the %s = %d, %v; want at least %d", name, r.w, r.err, laterID)
				}
			case <-wait.C:
				t.Fatalf("Checkpoint did not return within 30s after the held transaction's %s", name)
			}
			tb.checkpointMatchesLedger(t)
			full, incr := tb.bothAudits(t, tb.ctx, 1, 1)
			if len(full) != 0 || !slices.Equal(full, incr) {
				t.Fatalf("after the %s: Audit %+v, AuditIncremental %+v; want both clean", name, full, incr)
			}
			if want := map[bool]int64{true: 2, false: 1}[commit]; tb.totals(t, 1, 1).Allocated != want {
				t.Fatalf("allocated %d, want %d", tb.totals(t, 1, 1).Allocated, want)
			}
		})
	}
}

// Damage written after the checkpoint is found by AuditIncremental as by
// Audit. Damage from before it: a counter the ledger does not reproduce
// is still found (the replay is exact), a reservation untouched since is
// found only by Audit, at rest, as documented.
func TestAuditIncrementalFindsDamage(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	led, inv, res := tb.table("inventory_ledger"), tb.table("sku_inventory"), tb.table("inventory_reservation")
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := tb.pool.Exec(tb.ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	checkpoint := func() {
		t.Helper()
		if _, err := tb.store.Checkpoint(tb.ctx, tb.pool); err != nil {
			t.Fatal(err)
		}
	}
	kinds := func(fs []inventory.Finding) []string {
		var out []string
		for _, f := range fs {
			out = append(out, fmt.Sprintf("%s/%d", f.Kind, f.SKUID))
		}
		slices.Sort(out)
		return out
	}
	bought := func(sku int64) inventory.NewReservation {
		t.Helper()
		r := tb.newReservation(1, sku, 1)
		if err := tb.buy(tb.ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	for sku := int64(1); sku <= 3; sku++ {
		tb.provision(t, 1, sku, 10, 2)
	}
	early := bought(2)
	bought(3)
	// Before the checkpoint: SKU 2's reservation is marked REJECTED while
	// it holds stock (no ledger row), SKU 3's bucket loses a unit behind
	// the ledger.
	exec(`UPDATE `+res+` SET status = 20, order_id = NULL WHERE reservation_id = $1`, early.ReservationID)
	exec(`UPDATE ` + inv + ` SET available_stock = available_stock - 1, total_stock = total_stock - 1 WHERE sku_id = 3 AND bucket_no = 0`)
	checkpoint()
	// After it: SKU 1 gets a second ALLOCATE row for one reservation.
	r := bought(1)
	exec(`INSERT INTO `+led+` (idempotency_key, reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket,
	        ledger_type, available_delta, allocated_delta, before_available, after_available, before_allocated, after_allocated, reason)
	      SELECT 'ALLOCATE-AGAIN', reservation_id, source_message_id, activity_id, sku_id, user_id, inventory_bucket,
	        10, available_delta, allocated_delta, before_available, after_available, before_allocated, after_allocated, reason
	        FROM `+led+` WHERE reservation_id = $1`, r.ReservationID)

	full, incr := tb.bothAudits(t, tb.ctx, 0, 0)
	wantFull := []string{"duplicate_allocate/1", "leaked_allocation/2", "ledger_replay_allocated/1", "ledger_replay_available/1",
		"ledger_replay_available/3", "ledger_replay_total/3", "sku_total/3"}
	wantIncr := slices.DeleteFunc(slices.Clone(wantFull), func(k string) bool { return k == "leaked_allocation/2" })
	if got := kinds(full); !slices.Equal(got, wantFull) {
		t.Errorf("Audit: %v, want %v", got, wantFull)
	}
	if got := kinds(incr); !slices.Equal(got, wantIncr) {
		t.Errorf("AuditIncremental: %v, want %v (the leak from before the checkpoint is at rest only)", got, wantIncr)
	}
	checkpoint()
	tb.checkpointMatchesLedger(t)
	// SKU 1's duplicate is now below the watermark too: its reservation
	// has no newer row, so only Audit names it; the replay still differs.
	if _, incr := tb.bothAudits(t, tb.ctx, 0, 0); !slices.Equal(kinds(incr), wantIncr[1:]) {
		t.Errorf("AuditIncremental after a second checkpoint: %v, want %v", kinds(incr), wantIncr[1:])
	}
}

// During a sale (allocations and releases on every bucket, checkpoints
// moving), AuditIncremental agrees with Audit in every snapshot.
func TestAuditIncrementalAgreesDuringSale(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10000, 4)
	ctx, cancel := context.WithTimeout(tb.ctx, time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				r := tb.newReservation(1, 1, int16(w))
				if err := tb.buy(ctx, r); err != nil {
					errs <- err
					return
				}
				if i%3 == 0 {
					if err := inTx(ctx, tb.pool, func(tx pgx.Tx) error {
						_, err := tb.store.ReleaseStock(ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}})
						return err
					}); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	sale := make(chan struct{})
	go func() { wg.Wait(); close(sale) }()
	audits := 0
	for running := true; running; audits++ {
		select {
		case <-sale:
			running = false
		case err := <-errs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal("the sale did not end within a minute")
		default:
		}
		if _, err := tb.store.Checkpoint(ctx, tb.pool); err != nil {
			t.Fatal(err)
		}
		full, incr := tb.bothAudits(t, ctx, 1, 1)
		if len(full) != 0 || !slices.Equal(full, incr) {
			t.Fatalf("audit %d: Audit %+v, AuditIncremental %+v", audits, full, incr)
		}
	}
	tb.checkpointMatchesLedger(t)
	if tb.totals(t, 1, 1).Allocated != 4*40 {
		t.Fatalf("allocated %d, want %d", tb.totals(t, 1, 1).Allocated, 4*40)
	}
	t.Logf("%d audits during the sale", audits)
}

// Checkpoint refuses what would make its rule unsafe: a ledger_id
// sequence that caches ids per session (they are then handed out of
// order), a Repeatable Read transaction (one snapshot for the wait and
// the sums), and Config.Citus (the coordinator's pg_locks does not show
// the writers). The watermark does not move.
func TestCheckpointRefusesUnsafeSetups(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 2)
	if _, err := tb.pool.Exec(tb.ctx, `ALTER TABLE `+tb.table("inventory_ledger")+` ALTER COLUMN ledger_id SET CACHE 20`); err != nil {
		t.Fatal(err)
	}
	if w, err := tb.store.Checkpoint(tb.ctx, tb.pool); err == nil {
		t.Fatalf("Checkpoint with a sequence cache of 20 = %d, nil; want a refusal", w)
	}
	if _, err := tb.pool.Exec(tb.ctx, `ALTER TABLE `+tb.table("inventory_ledger")+` ALTER COLUMN ledger_id SET CACHE 1`); err != nil {
		t.Fatal(err)
	}
	err := pgx.BeginTxFunc(tb.ctx, tb.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		_, err := tb.store.Checkpoint(tb.ctx, tx)
		return err
	})
	if err == nil {
		t.Fatal("Checkpoint in a Repeatable Read transaction succeeded; want a refusal")
	}
	citus, err := inventory.New(inventory.Config{Schema: tb.schema, Citus: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := citus.Checkpoint(tb.ctx, tb.pool); err == nil {
		t.Fatal("Checkpoint with Config.Citus succeeded; want a refusal")
	}
	if got := tb.count(t, `SELECT through_ledger_id FROM `+tb.table("inventory_audit_watermark")); got != 0 {
		t.Fatalf("watermark %d after refusals, want 0", got)
	}
	if w, err := tb.store.Checkpoint(tb.ctx, tb.pool); err != nil || w == 0 {
		t.Fatalf("Checkpoint once the cache is 1 again = %d, %v", w, err)
	}
}

// A vacuum or an analyze of the ledger (SHARE UPDATE EXCLUSIVE, held here
// by an open transaction) inserts nothing: Checkpoint does not wait for it.
func TestCheckpointDoesNotWaitForVacuum(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 2)
	tx, err := tb.pool.Begin(tb.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(tb.ctx)) }()
	if _, err := tx.Exec(tb.ctx, `LOCK TABLE `+tb.table("inventory_ledger")+` IN SHARE UPDATE EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	if w, err := tb.store.Checkpoint(ctx, tb.pool); err != nil || w == 0 {
		t.Fatalf("Checkpoint while the ledger is held in SHARE UPDATE EXCLUSIVE mode = %d, %v; want it to move within 30s", w, err)
	}
}
