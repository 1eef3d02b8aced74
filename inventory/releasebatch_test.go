package inventory_test

import (
	"cmp"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// releaseOrAbort sends the one-batch release of a.
func (tb testBundle) releaseOrAbort(t *testing.T, a inventory.Allocation, dst *inventory.Allocated) error {
	t.Helper()
	var b pgx.Batch
	if err := tb.store.QueueReleaseStock(&b, inventory.StockRelease{Request: (a).Request, Reason: (a).Reason}, dst, pgtx.Abort); err != nil {
		t.Fatal(err)
	}
	return pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{}, &b)
}

// TestQueueReleaseStockOrAbort: the one-batch release gives back exactly
// the allocation, with the counters around it in the RELEASE row; a
// second release, a release that does not match the ALLOCATE row and a
// release of what was never allocated each abort their batch and write
// nothing; the observer hears each; the audit stays clean.
func TestQueueReleaseStockOrAbort(t *testing.T) {
	t.Parallel()
	tb, rec := observed(t, 11, 110, 3, 1)
	r := tb.newReservation(11, 110, 0)
	a := allocationOf(r, 900)
	if err := tb.buyOrAbort(t, r, 900, a, nil); err != nil {
		t.Fatal(err)
	}
	var got inventory.Allocated
	if err := tb.releaseOrAbort(t, a, &got); err != nil {
		t.Fatalf("release: %v", err)
	}
	bk, err := tb.store.GetBucket(tb.ctx, tb.pool, 11, 110, 0)
	if err != nil || bk.Available != 3 || bk.Allocated != 0 {
		t.Fatalf("bucket after the release = %+v, %v; want 3 available, 0 allocated", bk, err)
	}
	if got.LedgerID == 0 || got.BeforeAvailable != 2 || got.AfterAvailable != 3 || got.BeforeAllocated != 1 ||
		got.AfterAllocated != 0 || got.Version != bk.Version || got.Quantity != 1 || got.Bucket != 0 {
		t.Fatalf("released %+v, want 2→3 available, 1→0 allocated at version %d", got, bk.Version)
	}
	ledger, err := tb.store.ReservationLedger(tb.ctx, tb.pool, r.ReservationID)
	if err != nil || len(ledger) != 2 {
		t.Fatalf("ledger = %+v, %v; want ALLOCATE and RELEASE", ledger, err)
	}
	rel := ledger[1]
	if rel.LedgerID != got.LedgerID || rel.BeforeAvailable != 2 || rel.AfterAvailable != 3 ||
		rel.BeforeAllocated != 1 || rel.AfterAllocated != 0 || rel.OrderID != 900 {
		t.Fatalf("RELEASE row = %+v", rel)
	}

	// Twice: the RELEASE row raises (statement 0).
	err = tb.releaseOrAbort(t, a, nil)
	abortedAt(t, "released twice", err, 0)
	abortedBy(t, "released twice", err, "QueueReleaseStock", inventory.ErrAlreadyApplied, "23505")
	if c, ok := pgtx.UniqueViolationOf(err); !ok || c != "uq_inventory_ledger_idempotency" {
		t.Fatalf("released twice: %v", err)
	}

	// Not matching the ALLOCATE row, or never allocated: the increment
	// raises (statement 1).
	other := tb.newReservation(11, 110, 0)
	oa := allocationOf(other, 901)
	if err := tb.buyOrAbort(t, other, 901, oa, nil); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*inventory.Allocation){
		"another quantity": func(a *inventory.Allocation) { a.Quantity = 2 },
		"another buyer":    func(a *inventory.Allocation) { a.UserID++ },
		"another SKU":      func(a *inventory.Allocation) { a.SKUID = 111 },
	} {
		bad := oa
		mut(&bad)
		err := tb.releaseOrAbort(t, bad, nil)
		abortedAt(t, name, err, 1)
		abortedBy(t, name, err, "QueueReleaseStock", inventory.ErrAllocationMismatch, "SK005")
	}
	never := tb.newReservation(11, 110, 0)
	err = tb.releaseOrAbort(t, allocationOf(never, 902), nil)
	abortedAt(t, "never allocated", err, 1)
	abortedBy(t, "never allocated", err, "QueueReleaseStock", inventory.ErrNotAllocated, "SK006")
	if errors.Is(err, inventory.ErrSoldOut) || errors.Is(err, inventory.ErrAllocationMismatch) {
		t.Fatalf("never allocated: %v also matches another condition", err)
	}
	bk, err = tb.store.GetBucket(tb.ctx, tb.pool, 11, 110, 0)
	if err != nil || bk.Available != 2 || bk.Allocated != 1 {
		t.Fatalf("bucket after the refusals = %+v, %v; want 2 available, 1 allocated", bk, err)
	}
	tb.auditClean(t, 11, 110)

	// Bad input queues nothing.
	var b pgx.Batch
	bad := oa
	bad.Quantity = 0
	if err := tb.store.QueueReleaseStock(&b, inventory.StockRelease{Request: (bad).Request, Reason: (bad).Reason}, nil, pgtx.Abort); !errors.Is(err, inventory.ErrInvalidArgument) || b.Len() != 0 {
		t.Fatalf("bad release: %v, %d queued", err, b.Len())
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var releases []stockEvent
	for _, e := range rec.events {
		if e.Op == "release" {
			releases = append(releases, e)
		}
	}
	if len(releases) != 6 || releases[0].Err != nil || !releases[0].Batch || releases[0].Quantity != 1 ||
		!errors.Is(releases[1].Err, inventory.ErrAlreadyApplied) {
		t.Fatalf("observed releases %+v: want the release, the duplicate, then four refusals", releases)
	}
	for _, e := range releases[2:] {
		if !(errors.Is(e.Err, inventory.ErrAllocationMismatch) || errors.Is(e.Err, inventory.ErrNotAllocated)) || e.Bucket != -1 {
			t.Fatalf("refusal observed as %+v", e)
		}
	}
}

// TestQueueReleaseStockOrAbortConcurrent: 200 releases of 100
// allocations, two per allocation at once: each allocation comes back
// exactly once (one batch commits, the other meets its RELEASE row), and
// the bucket ends where it began.
func TestQueueReleaseStockOrAbortConcurrent(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const n = 100
	tb.provision(t, 12, 120, n, 1)
	allocs := make([]inventory.Allocation, n)
	for i := range allocs {
		r := tb.newReservation(12, 120, 0)
		allocs[i] = allocationOf(r, int64(1000+i))
		if err := tb.buyOrAbort(t, r, int64(1000+i), allocs[i], nil); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2*n)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b pgx.Batch
			if err := tb.store.QueueReleaseStock(&b, inventory.StockRelease{Request: (allocs[i/2]).Request, Reason: (allocs[i/2]).Reason}, nil, pgtx.Abort); err != nil {
				errs[i] = err
				return
			}
			errs[i] = pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{}, &b)
		}()
	}
	testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
	for i := 0; i < 2*n; i += 2 {
		a, b := errs[i], errs[i+1]
		if (a == nil) == (b == nil) {
			t.Fatalf("allocation %d: releases returned %v and %v, want exactly one success", i/2, a, b)
		}
		lost := a
		if lost == nil {
			lost = b
		}
		if c, ok := pgtx.UniqueViolationOf(lost); !ok || c != "uq_inventory_ledger_idempotency" {
			t.Fatalf("allocation %d: the losing release: %v", i/2, lost)
		}
	}
	bk, err := tb.store.GetBucket(tb.ctx, tb.pool, 12, 120, 0)
	if err != nil || bk.Available != n || bk.Allocated != 0 {
		t.Fatalf("bucket = %+v, %v; want everything back", bk, err)
	}
	tb.auditClean(t, 12, 120)
}

// TestReleaseRecordsItsEvidence: the RELEASE row carries the release's
// order id, message id and reason when it gives them, and otherwise the
// ALLOCATE row's order and message and the default reason
// (ORDER_CANCELLED), in the direct form; the one-batch form
// (pgtx.Abort) records its reason or the default too; with the plain
// and the Citus statements.
func TestReleaseRecordsItsEvidence(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 1, 1, 10, 1)
		bought := func(order int64) (inventory.NewReservation, inventory.Allocation) {
			t.Helper()
			r := tb.newReservation(1, 1, 0)
			a := allocationOf(r, order)
			if err := tb.buyOrAbort(t, r, order, a, nil); err != nil {
				t.Fatal(err)
			}
			return r, a
		}
		release := func(r inventory.NewReservation) inventory.LedgerEntry {
			t.Helper()
			ledger, err := tb.store.ReservationLedger(tb.ctx, tb.pool, r.ReservationID)
			if err != nil || len(ledger) != 2 || ledger[1].Type != inventory.LedgerRelease {
				t.Fatalf("ledger %+v, %v; want its ALLOCATE and RELEASE rows", ledger, err)
			}
			return ledger[1]
		}
		direct := func(rel inventory.StockRelease) {
			t.Helper()
			if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
				_, err := tb.store.ReleaseStock(tb.ctx, tx, rel)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}

		r, _ := bought(101)
		direct(inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}})
		if e := release(r); e.OrderID != 101 || e.SourceMessageID != r.MessageID || e.Reason != inventory.DefaultReleaseReason {
			t.Fatalf("release without order, message or reason: %+v; want the allocation's order 101 and message %v, reason %s", e, r.MessageID, inventory.DefaultReleaseReason)
		}
		r, _ = bought(102)
		cancel := uuid.Must(uuid.NewV7())
		direct(inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID, OrderID: 555, MessageID: cancel}, Reason: "PAYMENT_TIMEOUT"})
		if e := release(r); e.OrderID != 555 || e.SourceMessageID != cancel || e.Reason != "PAYMENT_TIMEOUT" {
			t.Fatalf("release with its own order, message and reason: %+v; want 555, %v, PAYMENT_TIMEOUT", e, cancel)
		}
		for _, reason := range []string{"", "PAYMENT_TIMEOUT"} {
			r, a := bought(tb.ids.Add(1) + 1000)
			a.Reason = reason
			if err := tb.releaseOrAbort(t, a, nil); err != nil {
				t.Fatal(err)
			}
			want := cmp.Or(reason, inventory.DefaultReleaseReason)
			if e := release(r); e.Reason != want {
				t.Fatalf("one-batch release with reason %q: %+v; want reason %s", reason, e, want)
			}
		}
	})
}
