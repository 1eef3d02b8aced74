package inventory_test

// The inventory's conformance table and scenarios, run by
// internal/conformance: nil handles, invalid and hostile input, every pgx
// exec mode, and the fuzz targets.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/conformance"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// hostile are strings an attacker would try through a text parameter.
var hostile = conformance.Hostile("inventory_ledger", "sku_inventory CASCADE")

// invalid is the inventory's refusal of invalid input; nilHandle its
// refusal of a nil transaction or connection.
var (
	invalid   = conformance.Typed(inventory.ErrInvalidArgument, func(e *inventory.Error) string { return e.Field })
	nilHandle = conformance.Typed(inventory.ErrInvalidArgument, func(e *inventory.Error) string { return e.Field }, "tx", "db", "q")
)

// exempt lists the exported methods of *inventory.Store with nothing to
// conform to, with the reason; every other method has a row in
// inventoryEntries (TestConformanceTableCoversStore checks both).
var exempt = map[string]string{}

// TestConformanceTableCoversStore: every exported method of
// *inventory.Store is in the conformance table or exempt.
func TestConformanceTableCoversStore(t *testing.T) {
	t.Parallel()
	conformance.Covered(t, &inventory.Store{}, inventoryEntries(testBundle{}), exempt)
}

// validReservation is a reservation validation accepts (for the queued
// forms' nil-dst check; it is never sent).
func validReservation() inventory.NewReservation {
	now := time.Now()
	return inventory.NewReservation{
		Request:    seckill.Request{ReservationID: uuid.New(), RequestID: uuid.New(), MessageID: uuid.New(), ActivityID: 1, SKUID: 1, UserID: 1, Quantity: 1},
		ReservedAt: now, ExpiresAt: now.Add(15 * time.Minute),
	}
}

// inventoryEntries is the conformance table. The invalid cases cover what
// TestInvalidInputWritesNothing (validate_test.go) does not: nil batches
// on every queued helper (they panicked before), and reasons and failure
// codes that are not storable text (NUL, invalid UTF-8, too long). Covered
// elsewhere: New (TestNewRejectsBadSchema), Provision, AcquireReservation,
// AllocateBucket, Release, TransitionReservation, Rebalance, Audit and
// their Queue forms with invalid fields and nil dst
// (TestInvalidInputWritesNothing).
func inventoryEntries(tb testBundle) []conformance.Entry {
	s := func() *inventory.Store { return tb.store }
	id := uuid.Must(uuid.NewV7())
	req := seckill.Request{ReservationID: id, ActivityID: 1, SKUID: 1, Quantity: 1, UserID: 1, MessageID: id}
	codes := []string{"a\x00b", "\xff", strings.Repeat("x", inventory.MaxCodeLength+1)}
	var allocs, releases, transitions, rebalances []conformance.Case
	for _, code := range codes {
		allocs = append(allocs, conformance.Case{Name: "reason", Do: func(_ context.Context, _ pgx.Tx, b *pgx.Batch) error {
			return s().QueueAllocateBucket(b, inventory.Allocation{Request: req, Reason: code}, new(inventory.Allocated), pgtx.Return)
		}})
		releases = append(releases, conformance.Case{Name: "reason", Do: func(_ context.Context, _ pgx.Tx, b *pgx.Batch) error {
			return s().QueueReleaseStock(b, inventory.StockRelease{Request: seckill.Request{ReservationID: id}, Reason: code}, new(inventory.Allocated), pgtx.Return)
		}})
		transitions = append(transitions, conformance.Case{Name: "failure code", Do: func(_ context.Context, _ pgx.Tx, b *pgx.Batch) error {
			return s().QueueTransitionReservation(b, inventory.Transition{ReservationID: id, To: inventory.StatusRejected, FailureCode: code}, new(inventory.Reservation), pgtx.Return)
		}})
		rebalances = append(rebalances, conformance.Case{Name: "reason", Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
			_, err := s().Rebalance(ctx, tx, inventory.RebalanceRequest{ActivityID: 1, SKUID: 1, Reason: code})
			return err
		}})
	}
	nilBatch := func(call func() error) []conformance.Case {
		return []conformance.Case{{Name: "nil batch", Do: func(context.Context, pgx.Tx, *pgx.Batch) error { return call() }}}
	}
	nilCall := func(name string, call func(ctx context.Context) error) []conformance.Call {
		return []conformance.Call{{Name: name, Do: call}}
	}
	return []conformance.Entry{
		{Method: "AllocateBucket", Nil: nilCall("zero", func(ctx context.Context) error {
			_, err := s().AllocateBucket(ctx, nil, inventory.Allocation{})
			return err
		})},
		{Method: "QueueAllocateBucket", Invalid: append(nilBatch(func() error {
			return s().QueueAllocateBucket(nil, inventory.Allocation{Request: req}, new(inventory.Allocated), pgtx.Return)
		}), allocs...),
			Queue: func(b *pgx.Batch) error {
				return s().QueueAllocateBucket(b, inventory.Allocation{Request: req}, nil, pgtx.Return)
			}},
		{Method: "QueueCheckSoldOut", Queue: func(b *pgx.Batch) error {
			return s().QueueCheckSoldOut(b, inventory.Allocation{Request: req}, pgtx.Return)
		}},
		{Method: "ReleaseStock", Nil: nilCall("zero", func(ctx context.Context) error {
			_, err := s().ReleaseStock(ctx, nil, inventory.StockRelease{})
			return err
		})},
		{Method: "QueueReleaseStock", Invalid: append(nilBatch(func() error {
			return s().QueueReleaseStock(nil, inventory.StockRelease{Request: seckill.Request{ReservationID: id}}, new(inventory.Allocated), pgtx.Return)
		}), releases...),
			Queue: func(b *pgx.Batch) error {
				return s().QueueReleaseStock(b, inventory.StockRelease{Request: seckill.Request{ReservationID: id}}, nil, pgtx.Return)
			}},
		{Method: "AcquireReservation", Nil: nilCall("zero", func(ctx context.Context) error {
			_, err := s().AcquireReservation(ctx, nil, inventory.NewReservation{})
			return err
		})},
		{Method: "QueueAcquireReservation", Invalid: nilBatch(func() error {
			return s().QueueAcquireReservation(nil, validReservation(), new(inventory.Acquired), pgtx.Return)
		}),
			Queue: func(b *pgx.Batch) error { return s().QueueAcquireReservation(b, validReservation(), nil, pgtx.Return) }},
		{Method: "TransitionReservation", Nil: nilCall("zero", func(ctx context.Context) error {
			_, err := s().TransitionReservation(ctx, nil, inventory.Transition{})
			return err
		})},
		{Method: "QueueTransitionReservation", Invalid: append(nilBatch(func() error {
			return s().QueueTransitionReservation(nil, inventory.Transition{ReservationID: id, To: inventory.StatusRejected}, new(inventory.Reservation), pgtx.Return)
		}), transitions...),
			Queue: func(b *pgx.Batch) error {
				return s().QueueTransitionReservation(b, inventory.Transition{ReservationID: id, To: inventory.StatusRejected}, nil, pgtx.Return)
			}},
		{Method: "Rebalance", Invalid: rebalances, Nil: nilCall("zero", func(ctx context.Context) error {
			_, err := s().Rebalance(ctx, nil, inventory.RebalanceRequest{})
			return err
		})},
		{Method: "Check", Nil: []conformance.Call{{Name: "catalog", Do: func(ctx context.Context) error { return s().Check(ctx, nil) }}}},
		{Method: "Audit", Nil: []conformance.Call{
			{Name: "one SKU", Do: func(ctx context.Context) error { _, err := s().Audit(ctx, nil, 1, 1); return err }},
			{Name: "all", Do: func(ctx context.Context) error { _, err := s().Audit(ctx, nil, 0, 0); return err }},
		}},
		{Method: "AuditIncremental", Nil: []conformance.Call{
			{Name: "one SKU", Do: func(ctx context.Context) error { _, err := s().AuditIncremental(ctx, nil, 1, 1); return err }},
			{Name: "all", Do: func(ctx context.Context) error { _, err := s().AuditIncremental(ctx, nil, 0, 0); return err }},
		}},
		{Method: "Checkpoint", Nil: nilCall("db", func(ctx context.Context) error { _, err := s().Checkpoint(ctx, nil); return err })},
		{Method: "ReservationLedger", Nil: nilCall("id", func(ctx context.Context) error {
			_, err := s().ReservationLedger(ctx, nil, id)
			return err
		})},
		{Method: "GetBucket", Nil: []conformance.Call{
			{Name: "one", Do: func(ctx context.Context) error { _, err := s().GetBucket(ctx, nil, 1, 1, 0); return err }},
			{Name: "BucketsOf", Do: func(ctx context.Context) error { _, err := inventory.BucketsOf(s(), ctx, nil, 1, 1); return err }},
		}},
		{Method: "Stock", Nil: nilCall("sku", func(ctx context.Context) error { _, err := s().Stock(ctx, nil, 1, 1); return err })},
		{Method: "Provision", Nil: nilCall("zero", func(ctx context.Context) error { _, err := s().Provision(ctx, nil, inventory.SKU{}); return err })},
		{Method: "GetReservation", Nil: nilCall("id", func(ctx context.Context) error { _, err := s().GetReservation(ctx, nil, id); return err })},
		{Method: "SetSaleStatus", Nil: nilCall("zero", func(ctx context.Context) error {
			_, err := s().SetSaleStatus(ctx, nil, inventory.SaleChange{})
			return err
		})},
		{Method: "SaleLog", Nil: nilCall("sku", func(ctx context.Context) error { _, err := s().SaleLog(ctx, nil, 1, 1); return err })},
		{Method: "ExpireReservations", Nil: nilCall("1", func(ctx context.Context) error { _, err := s().ExpireReservations(ctx, nil, 1); return err })},
		{Method: "RecordCompensationFailure", Nil: nilCall("zero", func(ctx context.Context) error {
			_, err := s().RecordCompensationFailure(ctx, nil, inventory.CompensationFailure{})
			return err
		})},
		{Method: "AdjustStock", Nil: nilCall("zero", func(ctx context.Context) error {
			_, err := s().AdjustStock(ctx, nil, inventory.Adjustment{})
			return err
		})},
		{Method: "Adjustments", Nil: nilCall("sku", func(ctx context.Context) error { _, err := s().Adjustments(ctx, nil, 1, 1); return err })},
		{Method: "LedgerByType", Nil: nilCall("sku", func(ctx context.Context) error { _, err := s().LedgerByType(ctx, nil, 1, 1); return err })},
	}
}

// TestNilHandleIsATypedError: every method that takes a transaction or
// connection rejects a nil one with a typed error instead of panicking.
func TestNilHandleIsATypedError(t *testing.T) {
	t.Parallel()
	s, err := inventory.New(inventory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	conformance.NilHandles(t, inventoryEntries(testBundle{store: s}), nilHandle)
}

// TestEveryEntryPointRejectsInvalidInput runs the table's invalid cases
// (each refused with an *inventory.Error matching ErrInvalidArgument,
// nothing queued, nothing written: the ledger, the reservations and the
// buckets' versions are counted before and after). It also covers
// PickBucket's count, and the reads, which answer an invalid id with
// their documented not-found sentinel (or nothing) after one harmless
// SELECT.
func TestEveryEntryPointRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 2)
	rows := func() int64 {
		return tb.count(t, `SELECT (SELECT count(*) FROM `+tb.table("inventory_ledger")+`) + (SELECT count(*) FROM `+
			tb.table("inventory_reservation")+`) + (SELECT sum(version) FROM `+tb.table("sku_inventory")+`)`)
	}
	before := rows()
	conformance.Refusals(t, tb.ctx, tb.pool, inventoryEntries(tb), invalid, rows)
	for _, n := range []int{0, -1, inventory.MaxBuckets + 1} {
		if _, err := inventory.PickBucket("k", n); invalid(err) != nil {
			t.Errorf("PickBucket(k, %d): %v", n, invalid(err))
		}
	}

	// Reads: an invalid id finds nothing and says so with the sentinel.
	if _, err := tb.store.GetBucket(tb.ctx, tb.pool, 0, 1, 0); !errors.Is(err, inventory.ErrUnknownBucket) {
		t.Errorf("GetBucket(activity 0): %v, want ErrUnknownBucket", err)
	}
	if _, err := tb.store.GetBucket(tb.ctx, tb.pool, 1, 1, -1); !errors.Is(err, inventory.ErrUnknownBucket) {
		t.Errorf("GetBucket(bucket -1): %v, want ErrUnknownBucket", err)
	}
	if _, err := tb.store.Stock(tb.ctx, tb.pool, -1, 0); !errors.Is(err, inventory.ErrUnknownSKU) {
		t.Errorf("SKUTotals(-1, 0): %v, want ErrUnknownSKU", err)
	}
	if _, err := tb.store.GetReservation(tb.ctx, tb.pool, uuid.Nil); !errors.Is(err, inventory.ErrReservationNotFound) {
		t.Errorf("GetReservation(nil): %v, want ErrReservationNotFound", err)
	}
	if bs, err := inventory.BucketsOf(tb.store, tb.ctx, tb.pool, 0, 0); err != nil || len(bs) != 0 {
		t.Errorf("Buckets(0, 0) = %v, %v; want none", bs, err)
	}
	if l, err := tb.store.ReservationLedger(tb.ctx, tb.pool, uuid.Nil); err != nil || len(l) != 0 {
		t.Errorf("ReservationLedger(nil) = %v, %v; want none", l, err)
	}
	if after := rows(); after != before {
		t.Errorf("invalid calls changed the tables: %d → %d", before, after)
	}
}

// TestNoSQLInjection sends hostile strings through every string-taking
// entry point — the ledger reason of AllocateBucket, Release and Rebalance,
// the failure code of TransitionReservation, and PickBucket's key — and
// checks that each is stored and read back verbatim (or rejected with a
// *ValidationError when too long), and that the schema's tables are intact.
func TestNoSQLInjection(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, int32(4*len(hostile)), 4)
	for _, h := range append(hostile, strings.Repeat("'", inventory.MaxCodeLength+1)) {
		if _, err := inventory.PickBucket(h, 4); err != nil {
			t.Fatalf("PickBucket(%q): %v", h, err)
		}
		tooLong := len([]rune(h)) > inventory.MaxCodeLength
		r := tb.newReservation(1, 1, 0)
		r2 := tb.newReservation(1, 1, 1)
		err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			var acq inventory.Acquired
			for _, res := range []inventory.NewReservation{r2, r} {
				var err error
				if acq, err = tb.store.AcquireReservation(tb.ctx, tx, res); err != nil {
					return err
				}
			}
			a := acq.Reservation.Allocation(tb.ids.Add(1), uuid.Nil)
			a.Reason = h
			if _, err := tb.store.AllocateBucket(tb.ctx, tx, a); err != nil {
				return err
			}
			if _, err := tb.store.ReleaseStock(tb.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}, Reason: h}); err != nil {
				return err
			}
			if _, err := tb.store.TransitionReservation(tb.ctx, tx, inventory.Transition{ReservationID: r2.ReservationID,
				To: inventory.StatusRejected, FailureCode: h}); err != nil {
				return err
			}
			_, err := tb.store.Rebalance(tb.ctx, tx, inventory.RebalanceRequest{ActivityID: 1, SKUID: 1, Reason: h})
			return err
		})
		if tooLong {
			if !errors.Is(err, inventory.ErrInvalidArgument) {
				t.Errorf("%q: %v, want ErrInvalidArgument", h, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", h, err)
		}
		ledger, err := tb.store.ReservationLedger(tb.ctx, tb.pool, r.ReservationID)
		if err != nil || len(ledger) != 2 {
			t.Fatalf("%q: ledger %v, %v", h, ledger, err)
		}
		for _, e := range ledger {
			if e.Reason != h {
				t.Errorf("ledger reason %q, want %q", e.Reason, h)
			}
		}
		got, err := tb.store.GetReservation(tb.ctx, tb.pool, r2.ReservationID)
		if err != nil || got.FailureCode != h {
			t.Errorf("failure code %q (%v), want %q", got.FailureCode, err, h)
		}
	}
	tablesIntact(t, tb, "inventory_sku", "sku_inventory", "inventory_reservation", "inventory_ledger", "inventory_sale_log",
		"inventory_audit_watermark", "inventory_audit_checkpoint", "inventory_token")
	tb.auditClean(t, 1, 1)
}

func tablesIntact(t *testing.T, tb testBundle, tables ...string) {
	t.Helper()
	for _, name := range tables {
		if n := tb.count(t, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2`, tb.schema, name); n != 1 {
			t.Errorf("table %s.%s is gone", tb.schema, name)
		}
	}
	if n := tb.count(t, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, tb.schema); n != int64(len(tables))+1 {
		t.Errorf("%d tables in the schema, want %d (+ migrations)", n, len(tables))
	}
}

// TestQueryExecModes runs every statement of the package through pools in
// the query exec modes where pgx does not learn parameter types from the
// server (exec, simple_protocol: what PgBouncer in transaction mode needs)
// or encodes from a cached description (cache_describe).
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	conformance.ExecModes(t, func(t *testing.T, pool *pgxpool.Pool) {
		tb := setup(t)
		tb.pool = pool
		ctx, store, pool := tb.ctx, tb.store, tb.pool
		inTx := func(fn func(tx pgx.Tx) error) error { return pgx.BeginFunc(ctx, pool, fn) }

		sku := inventory.SKU{ActivityID: 1, SKUID: 100, Stock: 4, Buckets: 2}
		if p, err := store.Provision(ctx, pool, sku); err != nil || !p.Created || p.Buckets != 2 {
			t.Fatalf("Provision = %+v, %v", p, err)
		}
		if p, err := store.Provision(ctx, pool, sku); err != nil || p.Created {
			t.Fatalf("repeated Provision = %+v, %v; want not created", p, err)
		}

		// A sub-microsecond time checks that times survive the text
		// encoding (within a microsecond).
		at := time.Now().Add(1234 * time.Nanosecond)
		res := func(user int64, bucket, qty int16) inventory.NewReservation {
			return inventory.NewReservation{
				Request:    seckill.Request{ReservationID: uuid.New(), RequestID: uuid.New(), MessageID: uuid.New(), ActivityID: 1, SKUID: 100, UserID: user, Bucket: bucket, Quantity: qty},
				ReservedAt: at,
				ExpiresAt:  at.Add(15 * time.Minute),
			}
		}
		r1, r2, r3 := res(1, 0, 1), res(2, 0, 1), res(3, 1, 3)
		var a1, a2, a3, again inventory.Acquired
		err := inTx(func(tx pgx.Tx) error {
			var err error
			if a1, err = store.AcquireReservation(ctx, tx, r1); err != nil {
				return err
			}
			batch := &pgx.Batch{}
			if err := store.QueueAcquireReservation(batch, r2, &a2, pgtx.Return); err != nil {
				return err
			}
			if err := store.QueueAcquireReservation(batch, r3, &a3, pgtx.Return); err != nil {
				return err
			}
			if err := tx.SendBatch(ctx, batch).Close(); err != nil {
				return err
			}
			again, err = store.AcquireReservation(ctx, tx, r1)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if !a1.Created || !a2.Created || !a3.Created || again.Created || again.Reservation.ReservationID != r1.ReservationID ||
			a1.Reservation.ReservedAt.Sub(at).Abs() > time.Microsecond || a1.Reservation.Status != inventory.StatusPendingDB {
			t.Fatalf("acquired = %+v, %+v, %+v, again %+v", a1, a2, a3, again)
		}

		var al1, al2 inventory.Allocated
		err = inTx(func(tx pgx.Tx) error {
			var err error
			if al1, err = store.AllocateBucket(ctx, tx, a1.Reservation.Allocation(11, uuid.New())); err != nil {
				return err
			}
			batch := &pgx.Batch{}
			if err := store.QueueAllocateBucket(batch, a2.Reservation.Allocation(0, uuid.New()), &al2, pgtx.Return); err != nil {
				return err
			}
			return tx.SendBatch(ctx, batch).Close()
		})
		if err != nil {
			t.Fatal(err)
		}
		if al1.AfterAvailable != 1 || al2.BeforeAvailable != 1 || al2.AfterAvailable != 0 || al2.AfterAllocated != 2 {
			t.Fatalf("allocations = %+v, %+v", al1, al2)
		}
		err = inTx(func(tx pgx.Tx) error {
			_, err := store.AllocateBucket(ctx, tx, a3.Reservation.Allocation(0, uuid.New()))
			return err
		})
		var so *inventory.Error
		if !errors.As(err, &so) || so.Available != 2 || so.Requested != 3 {
			t.Fatalf("allocation beyond the stock = %v, want SoldOutError", err)
		}

		var rb inventory.Rebalanced
		err = inTx(func(tx pgx.Tx) error {
			var err error
			rb, err = store.Rebalance(ctx, tx, inventory.RebalanceRequest{ActivityID: 1, SKUID: 100, Reason: "EVEN'OUT"})
			return err
		})
		if err != nil || rb.Available != 2 || rb.Moved != 1 || len(rb.Moves) != 2 || rb.Moves[0].AvailableDelta != 1 {
			t.Fatalf("Rebalance = %+v, %v", rb, err)
		}

		got, err := store.TransitionReservation(ctx, pool, inventory.Transition{ReservationID: r1.ReservationID, To: inventory.StatusOrdered, OrderID: 11})
		if err != nil || got.Status != inventory.StatusOrdered || got.OrderID != 11 || got.OrderedAt.IsZero() {
			t.Fatalf("TransitionReservation = %+v, %v", got, err)
		}
		var rejected inventory.Reservation
		var released inventory.Allocated
		err = inTx(func(tx pgx.Tx) error {
			batch := &pgx.Batch{}
			tr := inventory.Transition{ReservationID: r3.ReservationID, To: inventory.StatusRejected, FailureCode: "SOLD'OUT"}
			if err := store.QueueTransitionReservation(batch, tr, &rejected, pgtx.Return); err != nil {
				return err
			}
			if err := store.QueueReleaseStock(batch, inventory.StockRelease{Request: seckill.Request{ReservationID: r2.ReservationID}, Reason: "CANCEL"}, &released, pgtx.Return); err != nil {
				return err
			}
			return tx.SendBatch(ctx, batch).Close()
		})
		if err != nil || rejected.Status != inventory.StatusRejected || rejected.FailureCode != "SOLD'OUT" ||
			released.Bucket != 0 || released.AfterAvailable != released.BeforeAvailable+1 {
			t.Fatalf("queued transition and release = %+v, %+v, %v", rejected, released, err)
		}
		err = inTx(func(tx pgx.Tx) error {
			_, err := store.ReleaseStock(ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r2.ReservationID}})
			return err
		})
		if !errors.Is(err, inventory.ErrAlreadyApplied) {
			t.Fatalf("second Release = %v, want ErrAlreadyApplied", err)
		}

		// Reads.
		if r, err := store.GetReservation(ctx, pool, r3.ReservationID); err != nil || r.Status != inventory.StatusRejected {
			t.Fatalf("GetReservation = %+v, %v", r, err)
		}
		if bk, err := store.GetBucket(ctx, pool, 1, 100, 0); err != nil || bk.Available != 2 || bk.Allocated != 1 {
			t.Fatalf("GetBucket = %+v, %v", bk, err)
		}
		if bs, err := inventory.BucketsOf(store, ctx, pool, 1, 100); err != nil || len(bs) != 2 {
			t.Fatalf("Buckets = %+v, %v", bs, err)
		}
		if tot, err := store.Stock(ctx, pool, 1, 100); err != nil || tot.Available != 3 || tot.Allocated != 1 || tot.Total != 4 {
			t.Fatalf("SKUTotals = %+v, %v", tot, err)
		}
		led, err := store.ReservationLedger(ctx, pool, r2.ReservationID)
		if err != nil || len(led) != 2 || led[1].Reason != "CANCEL" || led[0].ReservationID != r2.ReservationID {
			t.Fatalf("ReservationLedger = %+v, %v", led, err)
		}
		if f, err := store.Audit(ctx, pool, 1, 100); err != nil || len(f) != 0 {
			t.Fatalf("Audit = %v, %v", f, err)
		}
		if f, err := store.Audit(ctx, pool, 0, 0); err != nil || len(f) != 0 {
			t.Fatalf("AuditAll = %v, %v", f, err)
		}
		if w, err := store.Checkpoint(ctx, pool); err != nil || w != tb.count(t, `SELECT max(ledger_id) FROM `+tb.table("inventory_ledger")) {
			t.Fatalf("Checkpoint = %d, %v", w, err)
		}
		if f, err := store.AuditIncremental(ctx, pool, 1, 100); err != nil || len(f) != 0 {
			t.Fatalf("AuditIncremental = %v, %v", f, err)
		}
	})
}

// FuzzPickBucket: for any key and count, PickBucket returns a bucket in
// [0, count) equal to FNV-1a(key) mod count (so it is deterministic and
// portable), or a *ValidationError when count is outside 1..MaxBuckets.
func FuzzPickBucket(f *testing.F) {
	f.Add("", 1)
	f.Add("user-42", 64)
	f.Add("01a22cc9-ca32-70dd-b7de-57e6197b048b", inventory.MaxBuckets)
	f.Add("'; DROP TABLE sku_inventory; --\x00\xff", 7)
	f.Add("k", 0)
	f.Add("k", -1)
	f.Add("k", inventory.MaxBuckets+1)
	f.Fuzz(func(t *testing.T, key string, n int) {
		got, err := inventory.PickBucket(key, n)
		if n < 1 || n > inventory.MaxBuckets {
			if invalid(err) != nil || got != 0 {
				t.Fatalf("PickBucket(%q, %d) = %d, %v; want a *ValidationError", key, n, got, err)
			}
			return
		}
		h := fnv.New64a()
		h.Write([]byte(key))
		if err != nil || got < 0 || int(got) >= n || uint64(got) != h.Sum64()%uint64(n) {
			t.Fatalf("PickBucket(%q, %d) = %d, %v", key, n, got, err)
		}
		if again, _ := inventory.PickBucket(key, n); again != got {
			t.Fatal("not deterministic")
		}
	})
}

// FuzzBucketStock: the split of any non-negative stock over 1..MaxBuckets
// buckets gives every bucket stock/n or stock/n+1 and sums to stock.
func FuzzBucketStock(f *testing.F) {
	f.Add(int32(10000), int16(64))
	f.Add(int32(0), int16(1))
	f.Add(int32(1<<31-1), int16(inventory.MaxBuckets))
	f.Add(int32(3), int16(7))
	f.Add(int32(5), int16(0))
	f.Add(int32(-1), int16(4))
	f.Fuzz(func(t *testing.T, stock int32, n int16) {
		if stock < 0 || n < 1 || n > inventory.MaxBuckets {
			// Rejected with a typed error, like Provision rejects it.
			if _, err := inventory.BucketStock(stock, n, 0); !errors.Is(err, inventory.ErrInvalidArgument) {
				t.Fatalf("BucketStock(%d, %d, 0): %v", stock, n, err)
			}
			return
		}
		if _, err := inventory.BucketStock(stock, n, n); !errors.Is(err, inventory.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), fmt.Sprintf("between 0 and %d", n-1)) {
			t.Fatalf("BucketStock(%d, %d, %d): %v, want the range 0 to %d in the message", stock, n, n, err, n-1)
		}
		var sum int64
		for b := int16(0); b < n; b++ {
			s, err := inventory.BucketStock(stock, n, b)
			if err != nil {
				t.Fatal(err)
			}
			if s != stock/int32(n) && s != stock/int32(n)+1 {
				t.Fatalf("BucketStock(%d, %d, %d) = %d", stock, n, b, s)
			}
			sum += int64(s)
		}
		if sum != int64(stock) {
			t.Fatalf("BucketStock(%d, %d, ·) sums to %d", stock, n, sum)
		}
	})
}

// FuzzCodeValidation feeds arbitrary ledger reasons, failure codes,
// quantities and buckets to the write helpers. Validation never panics
// and never touches the database (noDB fails the test if it is used); what
// it accepts is storable: valid UTF-8 without NUL, at most MaxCodeLength
// characters, a bucket in range and a positive quantity.
func FuzzCodeValidation(f *testing.F) {
	f.Add("ORDER_CREATED", int16(1), int16(0))
	f.Add("'; DROP TABLE inventory_ledger; --", int16(1), int16(255))
	f.Add("a\x00b", int16(1), int16(0))
	f.Add("\xff", int16(1), int16(0))
	f.Add(strings.Repeat("é", inventory.MaxCodeLength), int16(1), int16(0))
	f.Add("ok", int16(-1), int16(256))
	f.Fuzz(func(t *testing.T, code string, qty, bucket int16) {
		s, err := inventory.New(inventory.Config{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		db := noDB{t: t}
		id := uuid.Must(uuid.NewV7())
		storable := utf8.ValidString(code) && strings.IndexByte(code, 0) < 0 && utf8.RuneCountInString(code) <= inventory.MaxCodeLength
		alloc := inventory.Allocation{
			Request: seckill.Request{ReservationID: id, ActivityID: 1, SKUID: 1, Bucket: bucket, Quantity: qty, UserID: 1, MessageID: id},
			Reason:  code,
		}
		var b pgx.Batch
		errs := map[string]error{
			"allocate":   s.QueueAllocateBucket(&b, alloc, new(inventory.Allocated), pgtx.Return),
			"release":    s.QueueReleaseStock(&b, inventory.StockRelease{Request: seckill.Request{ReservationID: id}, Reason: code}, new(inventory.Allocated), pgtx.Return),
			"transition": s.QueueTransitionReservation(&b, inventory.Transition{ReservationID: id, To: inventory.StatusRejected, FailureCode: code}, new(inventory.Reservation), pgtx.Return),
		}
		if !storable { // (a valid request would go on to the database)
			_, errs["rebalance"] = s.Rebalance(ctx, db, inventory.RebalanceRequest{ActivityID: 1, SKUID: 1, Reason: code})
		}
		queued := 0
		for name, err := range errs {
			valid := storable && (name != "allocate" || qty >= 1 && bucket >= 0 && bucket < inventory.MaxBuckets)
			if valid && err != nil || !valid && !errors.Is(err, inventory.ErrInvalidArgument) {
				t.Fatalf("%s(code %q, qty %d, bucket %d) = %v (storable %v)", name, code, qty, bucket, err, valid)
			}
			if err == nil {
				queued++
			}
		}
		if b.Len() != queued {
			t.Fatalf("%d statements queued for %d accepted calls", b.Len(), queued)
		}
	})
}
