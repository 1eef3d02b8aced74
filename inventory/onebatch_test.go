package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// buyOrAbort sends, as one batch, the insert of r as ORDERED for orderID
// and the allocation a.
func (tb testBundle) buyOrAbort(t *testing.T, r inventory.NewReservation, orderID int64, a inventory.Allocation, dst *inventory.Allocated) error {
	t.Helper()
	r.OrderID, r.Ordered = orderID, true
	var b pgx.Batch
	if err := tb.store.QueueAcquireReservation(&b, r, nil, pgtx.Abort); err != nil {
		t.Fatal(err)
	}
	if err := tb.store.QueueAllocateBucket(&b, a, dst, pgtx.Abort); err != nil {
		t.Fatal(err)
	}
	return pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{}, &b)
}

func allocationOf(r inventory.NewReservation, orderID int64) inventory.Allocation {
	return inventory.Allocation{
		Request: seckill.Request{ReservationID: r.ReservationID, ActivityID: r.ActivityID, SKUID: r.SKUID, Bucket: r.Bucket, Quantity: r.Quantity, UserID: r.UserID, OrderID: orderID, MessageID: r.MessageID},
	}
}

// allocationOrder returns the index, among QueueAllocateBucketOrAbort's
// two statements, of the decrement and of the ledger insert: the
// decrement first on plain PostgreSQL, the ledger row first with
// Config.Citus.
func (tb testBundle) allocationOrder() (decrement, ledger int) {
	if tb.citus {
		return 1, 0
	}
	return 0, 1
}

// abortedAt checks that err is statement i's abort and that nothing
// committed.
func abortedAt(t *testing.T, what string, err error, i int) {
	t.Helper()
	var se *pgtx.StatementError
	if !errors.As(err, &se) || se.Index != i || !pgtx.Classify(err).NotCommitted {
		t.Fatalf("%s: err = %v, want statement %d to abort the batch", what, err, i)
	}
}

// abortedBy checks that err is the abort of a call of helper (a method
// name, e.g. "QueueAllocateBucket"), that it matches sentinel
// with errors.Is, that the server's error carries the SQLSTATE code, and
// that nothing committed.
func abortedBy(t *testing.T, what string, err error, helper string, sentinel error, code string) {
	t.Helper()
	var se *pgtx.StatementError
	var pgErr *pgconn.PgError
	if !errors.As(err, &se) || !strings.HasPrefix(se.Call, "inventory.Store."+helper+"(") || !pgtx.Classify(err).NotCommitted {
		t.Fatalf("%s: err = %v, want a call of %s to abort the batch", what, err, helper)
	}
	if !errors.Is(err, sentinel) || !errors.As(err, &pgErr) || pgErr.Code != code {
		t.Fatalf("%s: err = %v, want %v (SQLSTATE %s)", what, err, sentinel, code)
	}
	if !strings.Contains(err.Error(), se.Call) || strings.Contains(err.Error(), "invalid input syntax") {
		t.Fatalf("%s: %q does not name the call %q and the condition", what, err, se.Call)
	}
}

func TestQueueOrAbortFreshPath(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		dec, _ := tb.allocationOrder()
		tb.provision(t, 1, 10, 2, 1)
		r := tb.newReservation(1, 10, 0)

		var got inventory.Allocated
		if err := tb.buyOrAbort(t, r, 500, allocationOf(r, 500), &got); err != nil {
			t.Fatalf("fresh: %v", err)
		}
		res, err := tb.store.GetReservation(tb.ctx, tb.pool, r.ReservationID)
		if err != nil || res.Status != inventory.StatusOrdered || res.OrderID != 500 {
			t.Fatalf("reservation = %+v, %v; want ORDERED for 500", res, err)
		}
		bk, err := tb.store.GetBucket(tb.ctx, tb.pool, 1, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		// A token SKU's counters are the claimed unit's: 1→0 available.
		before := int32(2)
		if tb.tokens {
			before = 1
		}
		if got.LedgerID == 0 || got.BeforeAvailable != before || got.AfterAvailable != before-1 || got.BeforeAllocated != 0 ||
			got.AfterAllocated != 1 || got.Version != bk.Version || bk.Available != 1 || bk.Allocated != 1 {
			t.Fatalf("allocated %+v, bucket %+v; want %d→%d available, 0→1 allocated", got, bk, before, before-1)
		}
		ledger, err := tb.store.ReservationLedger(tb.ctx, tb.pool, r.ReservationID)
		if err != nil || len(ledger) != 1 || ledger[0].LedgerID != got.LedgerID || ledger[0].BeforeAvailable != before || ledger[0].AfterAvailable != before-1 ||
			ledger[0].BeforeAllocated != 0 || ledger[0].AfterAllocated != 1 {
			t.Fatalf("ledger = %+v, %v", ledger, err)
		}

		// The same reservation again, its request id, its order id: the insert
		// raises (statement 0), nothing is written.
		again := r
		again.MessageID = uuid.Must(uuid.NewV7())
		sameRequest := tb.newReservation(1, 10, 0)
		sameRequest.RequestID = r.RequestID
		sameOrder := tb.newReservation(1, 10, 0)
		for name, c := range map[string]struct {
			r          inventory.NewReservation
			constraint string
		}{
			"same reservation": {again, "inventory_reservation_pkey"},
			"same request":     {sameRequest, "uq_reservation_request"},
			"same order id":    {sameOrder, "uq_reservation_order"},
		} {
			err := tb.buyOrAbort(t, c.r, 500, allocationOf(c.r, 500), nil)
			abortedAt(t, name, err, 0)
			abortedBy(t, name, err, "QueueAcquireReservation", inventory.ErrReservationConflict, "23505")
			if got, ok := pgtx.UniqueViolationOf(err); !ok || got != c.constraint {
				t.Fatalf("%s: violated %q, want %q", name, got, c.constraint)
			}
		}

		// Sold out: the decrement raises (after the reservation, and before
		// or after the ledger row).
		last := tb.newReservation(1, 10, 0)
		if err := tb.buyOrAbort(t, last, 501, allocationOf(last, 501), nil); err != nil {
			t.Fatalf("last unit: %v", err)
		}
		soldOut := tb.newReservation(1, 10, 0)
		err = tb.buyOrAbort(t, soldOut, 502, allocationOf(soldOut, 502), nil)
		abortedAt(t, "sold out", err, 1+dec)
		abortedBy(t, "sold out", err, "QueueAllocateBucket", inventory.ErrSoldOut, "SK001")
		if errors.Is(err, inventory.ErrNotOnSale) || errors.Is(err, inventory.ErrAllocationMismatch) {
			t.Fatalf("sold out: %v also matches another condition", err)
		}
		if _, err := tb.store.GetReservation(tb.ctx, tb.pool, soldOut.ReservationID); !errors.Is(err, inventory.ErrReservationNotFound) {
			t.Fatalf("sold out reservation: %v, want none (rolled back)", err)
		}
		bk, err = tb.store.GetBucket(tb.ctx, tb.pool, 1, 10, 0)
		if err != nil || bk.Available != 0 || bk.Allocated != 2 {
			t.Fatalf("bucket after the refusal = %+v, %v; want 0 available, 2 allocated", bk, err)
		}
	})
}

func TestQueueAllocateBucketOrAbortRefusals(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		dec, led := tb.allocationOrder()
		tb.provision(t, 2, 20, 10, 2)
		refused := func(name string, r inventory.NewReservation, a inventory.Allocation, sentinel error, code string) {
			t.Helper()
			err := tb.buyOrAbort(t, r, tb.ids.Add(1), a, nil)
			abortedAt(t, name, err, 1+dec) // the decrement, after the reservation
			abortedBy(t, name, err, "QueueAllocateBucket", sentinel, code)
		}
		r := tb.newReservation(2, 20, 0)
		other := r
		other.Bucket = 1
		refused("another bucket than the reservation's", r, allocationOf(other, 1), inventory.ErrAllocationMismatch, "SK005")
		r = tb.newReservation(2, 20, 0)
		a := allocationOf(r, 1)
		a.UserID++
		refused("another buyer", r, a, inventory.ErrAllocationMismatch, "SK005")
		r = tb.newReservation(2, 20, 0)
		a = allocationOf(r, 1)
		a.ReservationID = uuid.Must(uuid.NewV7())
		refused("no such reservation", r, a, inventory.ErrReservationNotFound, "SK009")
		r = tb.newReservation(2, 20, 1)
		a = allocationOf(r, 1)
		a.SKUID = 21
		refused("unknown SKU", r, a, inventory.ErrUnknownSKU, "SK004")
		r = tb.newReservation(2, 20, 5) // the SKU has buckets 0 and 1
		refused("unknown bucket", r, allocationOf(r, 1), inventory.ErrUnknownBucket, "SK003")

		// Already allocated: a second allocation of a committed reservation.
		done := tb.newReservation(2, 20, 0)
		if err := tb.buyOrAbort(t, done, 700, allocationOf(done, 700), nil); err != nil {
			t.Fatal(err)
		}
		var b pgx.Batch
		if err := tb.store.QueueAllocateBucket(&b, allocationOf(done, 700), nil, pgtx.Abort); err != nil {
			t.Fatal(err)
		}
		err := pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{}, &b)
		abortedAt(t, "allocated twice", err, led)
		abortedBy(t, "allocated twice", err, "QueueAllocateBucket", inventory.ErrAlreadyApplied, "23505")
		if c, ok := pgtx.UniqueViolationOf(err); !ok || c != "uq_inventory_ledger_idempotency" {
			t.Fatalf("allocated twice: %v, want a unique violation of uq_inventory_ledger_idempotency", err)
		}

		// The sale paused.
		err = pgx.BeginFunc(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.SetSaleStatus(tb.ctx, tx, inventory.SaleChange{ActivityID: 2, SKUID: 20, To: inventory.SalePaused, Operator: "test", Reason: "pause"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		r = tb.newReservation(2, 20, 0)
		refused("sale paused", r, allocationOf(r, 1), inventory.ErrNotOnSale, "SK002")

		tot, err := tb.store.Stock(tb.ctx, tb.pool, 2, 20)
		if err != nil || tot.Allocated != 1 {
			t.Fatalf("totals = %+v, %v; want 1 allocated (the refusals wrote nothing)", tot, err)
		}

		// Bad input queues nothing.
		b = pgx.Batch{}
		bad := allocationOf(r, 1)
		bad.Quantity = 0
		if err := tb.store.QueueAllocateBucket(&b, bad, nil, pgtx.Abort); !errors.Is(err, inventory.ErrInvalidArgument) || b.Len() != 0 {
			t.Fatalf("bad allocation: %v, %d queued", err, b.Len())
		}
		badR := tb.newReservation(2, 20, 0)
		badR.Bucket = -1
		if err := tb.store.QueueAcquireReservation(&b, badR, nil, pgtx.Abort); !errors.Is(err, inventory.ErrInvalidArgument) || b.Len() != 0 {
			t.Fatalf("bad reservation: %v, %d queued", err, b.Len())
		}
		if err := tb.store.QueueAcquireReservation(nil, tb.newReservation(2, 20, 0), nil, pgtx.Abort); !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Fatalf("nil batch: %v", err)
		}
	})
}

// TestQueueOrAbortObserved: the one-batch allocation reports to the
// Observer like the Queue form — a success, a refusal the decrement
// raised — with or without a destination, and reports nothing when an
// earlier statement of the batch aborted it.
func TestQueueOrAbortObserved(t *testing.T) {
	t.Parallel()
	for _, citus := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "citus"}[citus], func(t *testing.T) {
			t.Parallel()
			queueOrAbortObserved(t, citus)
		})
	}
}

func queueOrAbortObserved(t *testing.T, citus bool) {
	tb, rec := observedMode(t, citus, 3, 30, 1, 1)
	dec, _ := tb.allocationOrder()

	first := tb.newReservation(3, 30, 0)
	if err := tb.buyOrAbort(t, first, 700, allocationOf(first, 700), nil); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	again := first
	again.MessageID = uuid.Must(uuid.NewV7())
	abortedAt(t, "same reservation", tb.buyOrAbort(t, again, 701, allocationOf(again, 701), nil), 0)
	soldOut := tb.newReservation(3, 30, 0)
	var got inventory.Allocated
	err := tb.buyOrAbort(t, soldOut, 702, allocationOf(soldOut, 702), &got)
	abortedAt(t, "sold out", err, 1+dec)
	abortedBy(t, "sold out", err, "QueueAllocateBucket", inventory.ErrSoldOut, "SK001")
	if got != (inventory.Allocated{}) {
		t.Fatalf("refused allocation filled dst: %+v", got)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) != 2 {
		t.Fatalf("observed %+v, want the success and the refusal", rec.events)
	}
	ok, refused := rec.events[0], rec.events[1]
	if ok.Op != "allocate" || ok.Err != nil || !ok.Batch || ok.ActivityID != 3 || ok.SKUID != 30 || ok.Quantity != 1 {
		t.Fatalf("success observed as %+v", ok)
	}
	if refused.Op != "allocate" || !errors.Is(refused.Err, inventory.ErrSoldOut) || !refused.Batch {
		t.Fatalf("refusal observed as %+v", refused)
	}
}

// TestQueueOrAbortConcurrentDuplicateObserved: two transactions send the
// same one-batch allocation at once. The second waits for the first: on
// plain PostgreSQL its decrement waits for the bucket row, takes a unit
// once the first commits, and its ledger insert then raises
// unique_violation; with Config.Citus its ledger insert, sent first, waits
// for the first's uncommitted row with the same key and raises once the
// first commits, before the bucket. Either way the abort undoes the
// second, the Observer hears ErrAlreadyApplied, the stock is taken once
// and the ledger has one row.
// It runs with and without a destination for the result (the ledger insert
// is sent with and without RETURNING).
func TestQueueOrAbortConcurrentDuplicateObserved(t *testing.T) {
	t.Parallel()
	for _, citus := range []bool{false, true} {
		for _, withDst := range []bool{false, true} {
			t.Run(fmt.Sprintf("citus=%v/dst=%v", citus, withDst), func(t *testing.T) {
				t.Parallel()
				activity, sku := int64(4), int64(40)
				if withDst {
					activity, sku = 5, 50
				}
				concurrentDuplicateObserved(t, citus, activity, sku, withDst)
			})
		}
	}
}

func concurrentDuplicateObserved(t *testing.T, citus bool, activity, sku int64, withDst bool) {
	tb, rec := observedMode(t, citus, activity, sku, 2, 1)
	_, led := tb.allocationOrder()
	r := tb.reserved(t, activity, sku, 0, 1)
	a := allocationOf(r, 800)
	var got inventory.Allocated
	batch := func() *pgx.Batch {
		var b pgx.Batch
		var dst *inventory.Allocated
		if withDst {
			dst = &got
		}
		if err := tb.store.QueueAllocateBucket(&b, a, dst, pgtx.Abort); err != nil {
			t.Fatal(err)
		}
		return &b
	}

	first, err := tb.pool.BeginTx(tb.ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(context.WithoutCancel(tb.ctx))
	if err := first.SendBatch(tb.ctx, batch()).Close(); err != nil {
		t.Fatalf("first: %v", err)
	}
	second := make(chan error, 1)
	go func() {
		second <- pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{IsoLevel: pgx.ReadCommitted}, batch())
	}()
	tb.waitLockWaiters(t, 1)
	if err := first.Commit(tb.ctx); err != nil {
		t.Fatal(err)
	}
	err = testwait.Recv(t, second, "the second transaction to return")
	abortedAt(t, "concurrent duplicate", err, led)
	if c, ok := pgtx.UniqueViolationOf(err); !ok || c != "uq_inventory_ledger_idempotency" {
		t.Fatalf("concurrent duplicate: %v, want a unique violation of uq_inventory_ledger_idempotency", err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) != 2 {
		t.Fatalf("observed %+v, want the success and the duplicate", rec.events)
	}
	ok, dup := rec.events[0], rec.events[1]
	if ok.Op != "allocate" || ok.Err != nil || !ok.Batch || ok.ActivityID != activity || ok.SKUID != sku || ok.Quantity != 1 {
		t.Fatalf("success observed as %+v", ok)
	}
	if dup.Op != "allocate" || !errors.Is(dup.Err, inventory.ErrAlreadyApplied) || !dup.Batch ||
		dup.ActivityID != activity || dup.SKUID != sku || dup.Quantity != 1 {
		t.Fatalf("duplicate observed as %+v, want an error matching ErrAlreadyApplied", dup)
	}
	if tot := tb.totals(t, activity, sku); tot.Allocated != 1 || tot.Available != 1 {
		t.Errorf("totals %+v, want 1 allocated and 1 available", tot)
	}
	if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")+` WHERE ledger_type = 10`); n != 1 {
		t.Errorf("%d ALLOCATE ledger rows, want 1", n)
	}
	if withDst && (got.LedgerID == 0 || got.AfterAllocated != 1 || got.BeforeAvailable != 2 || got.AfterAvailable != 1) {
		t.Errorf("the first transaction's result %+v, want its ledger row (2 → 1 available, 1 allocated)", got)
	}
}
