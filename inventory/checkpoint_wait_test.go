package inventory_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/inventory"
)

// conn opens a connection of its own, closed at the end of the test: its
// backend's pid tells what that connection is doing.
func (tb testBundle) conn(t *testing.T) *pgx.Conn {
	t.Helper()
	c, err := pgx.ConnectConfig(tb.ctx, tb.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.WithoutCancel(tb.ctx)) })
	return c
}

// waitCheckpointWaiting blocks until the backend of c has run
// checkpoint_pending: Checkpoint on c has read its candidate and waits for
// the ledger writers it listed.
func (tb testBundle) waitCheckpointWaiting(t *testing.T, c *pgx.Conn) {
	t.Helper()
	ctx := testwait.Context(t, tb.ctx, testwait.Step)
	for {
		var query string
		if err := tb.pool.QueryRow(tb.ctx, `SELECT query FROM pg_stat_activity WHERE pid = $1`, c.PgConn().PID()).Scan(&query); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(query, "virtualtransaction = ANY") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Checkpoint never waited for the ledger's writers (its last statement: %q): %v", query, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ledgerOnlyWriter begins a transaction that inserts one ADJUST row into
// the ledger of SKU 1/1 by hand, and nothing else: its only table lock is
// ROW EXCLUSIVE on the ledger (and its indexes). It returns the open
// transaction and the row's ledger id.
func (tb testBundle) ledgerOnlyWriter(t *testing.T, key string) (pgx.Tx, int64) {
	t.Helper()
	tx, err := tb.pool.Begin(tb.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(tb.ctx)) })
	var id int64
	if err := tx.QueryRow(tb.ctx, `INSERT INTO `+tb.table("inventory_ledger")+` (idempotency_key, activity_id, sku_id, inventory_bucket,
		    ledger_type, total_delta, available_delta, allocated_delta, before_available, after_available, before_allocated, after_allocated,
		    reason, operator, approval_ref)
		VALUES ($1, 1, 1, 0, 30, 1, 1, 0, 5, 6, 0, 0, 'RECOUNT', 'ops', $1) RETURNING ledger_id`, key).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return tx, id
}

type checkpointResult struct {
	w   int64
	err error
}

// startCheckpoint runs Checkpoint on c in a goroutine, with a deadline of
// testwait.Step.
func (tb testBundle) startCheckpoint(t *testing.T, c *pgx.Conn) <-chan checkpointResult {
	t.Helper()
	ctx := testwait.Context(t, tb.ctx, testwait.Step)
	done := make(chan checkpointResult, 1)
	go func() {
		w, err := tb.store.Checkpoint(ctx, c)
		done <- checkpointResult{w, err}
	}()
	return done
}

// Checkpoint waits for exactly the transactions that may hold an
// undecided ledger id below its candidate: those holding ROW EXCLUSIVE on
// the ledger when it read the candidate. It waits for one that wrote only
// a ledger row (no other table), and not for a reader of the ledger, a
// writer of another table, or a ledger writer that began after the
// candidate (its id is above it), all left open for the whole test.
func TestCheckpointWaitsOnlyForTheLedgersWriters(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 2)
	reader, err := tb.pool.Begin(tb.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Rollback(context.WithoutCancel(tb.ctx)) }()
	if _, err := reader.Exec(tb.ctx, `SELECT count(*) FROM `+tb.table("inventory_ledger")); err != nil {
		t.Fatal(err)
	}
	other, err := tb.pool.Begin(tb.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(context.WithoutCancel(tb.ctx)) }()
	if _, err := other.Exec(tb.ctx, `LOCK TABLE `+tb.table("inventory_reservation")+` IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	held, heldID := tb.ledgerOnlyWriter(t, "HAND-HELD")
	later := tb.newReservation(1, 1, 1)
	if err := tb.buy(tb.ctx, later); err != nil {
		t.Fatal(err)
	}
	laterID := tb.ledgerID(t, later)
	if heldID >= laterID {
		t.Fatalf("held ledger id %d, committed one %d: want the held one below", heldID, laterID)
	}
	c := tb.conn(t)
	done := tb.startCheckpoint(t, c)
	tb.waitCheckpointWaiting(t, c)
	_, newID := tb.ledgerOnlyWriter(t, "HAND-NEW") // begun after the candidate: left open
	if newID <= laterID {
		t.Fatalf("new ledger id %d not above the candidate %d", newID, laterID)
	}
	select {
	case r := <-done:
		t.Fatalf("Checkpoint returned %d, %v while ledger row %d was undecided", r.w, r.err, heldID)
	case <-time.After(100 * time.Millisecond):
	}
	if err := held.Commit(tb.ctx); err != nil {
		t.Fatal(err)
	}
	r := testwait.Recv(t, done, "Checkpoint after the ledger writer it waited for committed")
	if r.err != nil || r.w != laterID {
		t.Fatalf("Checkpoint = %d, %v; want %d, the candidate, without waiting for the reader, the other table's writer or the new writer", r.w, r.err, laterID)
	}
	tb.checkpointMatchesLedger(t)
}

// Two Checkpoints that read the same watermark and candidate (both wait
// for the same undecided ledger row) add the rows between them to the sums
// once: the first moves the watermark, the second finds it moved and
// changes nothing, returning the watermark it read.
func TestConcurrentCheckpointsCountEachRowOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 2)
	from, err := tb.store.Checkpoint(tb.ctx, tb.pool)
	if err != nil {
		t.Fatal(err)
	}
	held := tb.newReservation(1, 1, 0)
	tx, _ := tb.holdAllocation(t, held)
	later := tb.newReservation(1, 1, 1)
	if err := tb.buy(tb.ctx, later); err != nil {
		t.Fatal(err)
	}
	laterID := tb.ledgerID(t, later)
	c1, c2 := tb.conn(t), tb.conn(t)
	done1 := tb.startCheckpoint(t, c1)
	done2 := tb.startCheckpoint(t, c2)
	tb.waitCheckpointWaiting(t, c1)
	tb.waitCheckpointWaiting(t, c2)
	if _, err := tb.store.TransitionReservation(tb.ctx, tx, inventory.Transition{ReservationID: held.ReservationID, To: inventory.StatusOrdered, OrderID: tb.ids.Add(1)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(tb.ctx); err != nil {
		t.Fatal(err)
	}
	r1 := testwait.Recv(t, done1, "the first Checkpoint")
	r2 := testwait.Recv(t, done2, "the second Checkpoint")
	got := []int64{r1.w, r2.w}
	slices.Sort(got)
	if r1.err != nil || r2.err != nil || !slices.Equal(got, []int64{from, laterID}) {
		t.Fatalf("Checkpoints = (%d, %v), (%d, %v); want one to move from %d to %d and the other to find it moved", r1.w, r1.err, r2.w, r2.err, from, laterID)
	}
	tb.checkpointMatchesLedger(t)
	if full, incr := tb.bothAudits(t, tb.ctx, 0, 0); len(full) != 0 || len(incr) != 0 {
		t.Fatalf("Audit %+v, AuditIncremental %+v; want both clean", full, incr)
	}
}

// Checkpoint run inside a Read Committed transaction that has written the
// ledger itself does not wait for its own transaction: its own rows are
// decided with it, and the sums it adds commit (or roll back) with them.
func TestCheckpointInsideAWritingTransaction(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 2)
	r := tb.newReservation(1, 1, 0)
	tx, id := tb.holdAllocation(t, r)
	ctx := testwait.Context(t, tb.ctx, testwait.Step)
	w, err := tb.store.Checkpoint(ctx, tx)
	if err != nil || w != id {
		t.Fatalf("Checkpoint in the transaction that wrote ledger row %d = %d, %v; want %d at once", id, w, err, id)
	}
	if _, err := tb.store.TransitionReservation(tb.ctx, tx, inventory.Transition{ReservationID: r.ReservationID, To: inventory.StatusOrdered, OrderID: tb.ids.Add(1)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(tb.ctx); err != nil {
		t.Fatal(err)
	}
	tb.checkpointMatchesLedger(t)
	if got := tb.count(t, `SELECT through_ledger_id FROM `+tb.table("inventory_audit_watermark")); got != id {
		t.Fatalf("watermark %d after the commit, want %d", got, id)
	}
	if full, incr := tb.bothAudits(t, tb.ctx, 1, 1); len(full) != 0 || len(incr) != 0 {
		t.Fatalf("Audit %+v, AuditIncremental %+v; want both clean", full, incr)
	}
}
