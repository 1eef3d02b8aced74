package inventory_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// The last unit: stock 1, 1,000 buyers, each in its own
// transaction (reservation insert and lock, AllocateBucket, reservation
// ORDERED or REJECTED, commit): exactly one gets it. With the stock as
// one bucket and as inventory tokens.
func TestAllocateStockOneThousandBuyers(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 1, 1, 1, 1)
		// A pool of its own: 1,000 goroutines queue for its 32 connections
		// instead of starving the other tests of the shared pool.
		tb.pool = pgtest.NewPool(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 32 })

		const buyers = 1000
		var (
			wg              sync.WaitGroup
			ok, soldOut     atomic.Int64
			otherMu         sync.Mutex
			other           []error
			reservationsIDs = make([]inventory.NewReservation, buyers)
		)
		for i := range buyers {
			reservationsIDs[i] = tb.newReservation(1, 1, 0)
		}
		for i := range buyers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch err := tb.buyPipelined(reservationsIDs[i]); {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, inventory.ErrSoldOut):
					soldOut.Add(1)
				default:
					otherMu.Lock()
					other = append(other, err)
					otherMu.Unlock()
				}
			}()
		}
		testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
		if len(other) > 0 {
			t.Fatalf("%d unexpected errors, first: %v", len(other), other[0])
		}
		if ok.Load() != 1 || soldOut.Load() != buyers-1 {
			t.Fatalf("ok %d, sold out %d; want 1 and %d", ok.Load(), soldOut.Load(), buyers-1)
		}
		if n := tb.count(t, `SELECT sum(allocated_stock) FROM `+tb.table("inventory_stock_row")+` WHERE activity_id = 1 AND sku_id = 1`); n != 1 {
			t.Fatalf("allocated sum %d, want 1", n)
		}
		if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")+` WHERE ledger_type = 10`); n != 1 {
			t.Fatalf("%d ALLOCATE rows, want 1", n)
		}
		if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_reservation")+` WHERE status = 20 AND failure_code = 'POSTGRES_SOLD_OUT'`); n != buyers-1 {
			t.Fatalf("%d rejected reservations, want %d", n, buyers-1)
		}
		tb.auditClean(t, 1, 1)
	})
}

// A bucketed sale: 64 buckets, 10,000 stock, 20,000 buyers through
// a bounded worker pool; each buyer's bucket comes from PickBucket. Each
// buyer is one transaction whose BEGIN and AllocateBucket travel in one
// batch, then COMMIT (the reservation steps are exercised by the other
// tests; here the 20,000 transactions must fit the suite's time budget on
// a small machine).
func TestAllocate64BucketsTwentyThousandBuyers(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const (
		buckets = 64
		workers = 48
	)
	stock, buyers := int32(10_000), 20_000
	if testing.Short() { // the mutation tools' runs: the same race, a tenth of the transactions
		stock, buyers = 1_000, 2_000
	}
	// The largest test of the package: a budget of its own, so that a
	// machine busy with the rest of the suite does not cut it short.
	tb.ctx = pgtest.Context(t, 6*time.Minute)
	tb.provision(t, 2, 3, stock, buckets)
	// A pool of its own, one connection per worker. Commits skip the WAL
	// flush wait (synchronous_commit off): durability is not under test
	// here, concurrency is, and visibility rules are the same.
	tb.pool = pgtest.NewPool(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = workers
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	})

	all := make([]inventory.NewReservation, buyers)
	for i := range all {
		all[i] = tb.newReservation(2, 3, 0)
		all[i].Bucket, _ = inventory.PickBucket(all[i].ReservationID.String(), buckets)
	}
	tb.insertReservations(t, all)
	jobs := make(chan int)
	var (
		wg          sync.WaitGroup
		ok, soldOut atomic.Int64
		errMu       sync.Mutex
		firstErr    error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				err := tb.allocateOnly(r2ToAlloc(all[i]))
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, inventory.ErrSoldOut):
					soldOut.Add(1)
				default:
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
				}
			}
		}()
	}
	for i := range buyers {
		jobs <- i
	}
	close(jobs)
	testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	tot := tb.totals(t, 2, 3)
	t.Logf("ok %d, sold out %d, sold-out buckets %d, available left %d", ok.Load(), soldOut.Load(), tot.SoldOutBuckets, tot.Available)
	if ok.Load()+soldOut.Load() != int64(buyers) {
		t.Fatalf("ok %d + sold out %d != %d", ok.Load(), soldOut.Load(), buyers)
	}
	if tot.Allocated > int64(stock) || tot.Allocated != ok.Load() {
		t.Fatalf("allocated %d, successes %d, stock %d", tot.Allocated, ok.Load(), stock)
	}
	if tot.Total != int64(stock) || tot.Available+tot.Allocated != int64(stock) {
		t.Fatalf("totals %+v", tot)
	}
	bs, err := inventory.BucketsOf(tb.store, tb.ctx, tb.pool, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if want, _ := inventory.BucketStock(stock, buckets, b.BucketNo); b.Total != want || b.Available+b.Allocated != b.Total || b.Available < 0 {
			t.Errorf("bucket %+v, provisioned %d", b, want)
		}
	}
	if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")+` WHERE ledger_type = 10`); n != ok.Load() {
		t.Fatalf("%d ALLOCATE rows, %d successes", n, ok.Load())
	}
	tb.orderAllocated(t)
	tb.auditClean(t, 2, 3)
}

// allocateOnly allocates in a transaction of its own: BEGIN and the
// allocation in one batch, then COMMIT (ROLLBACK when sold out).
func (tb testBundle) allocateOnly(a inventory.Allocation) error {
	var (
		b   pgx.Batch
		got inventory.Allocated
	)
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err := tb.store.QueueAllocateBucket(&b, a, &got, pgtx.Return); err != nil {
		return err
	}
	br := tb.pool.SendBatch(tb.ctx, &b)
	err := br.Close()
	tx := br.Tx()
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(tb.ctx))
		return err
	}
	if got.LedgerID == 0 || got.AfterAvailable != got.BeforeAvailable-1 {
		_ = tx.Rollback(context.WithoutCancel(tb.ctx))
		return errors.New("batch result not filled in")
	}
	return tx.Commit(tb.ctx)
}

// buyPipelined is buy with BEGIN, the reservation acquisition and the
// allocation sent in one batch (one round trip), then the transition and
// COMMIT.
func (tb testBundle) buyPipelined(r inventory.NewReservation) (err error) {
	ctx := tb.ctx
	var (
		b     pgx.Batch
		acq   inventory.Acquired
		alloc inventory.Allocated
	)
	orderID := tb.ids.Add(1)
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err := tb.store.QueueAcquireReservation(&b, r, &acq, pgtx.Return); err != nil {
		return err
	}
	a := inventory.Allocation{
		Request: seckill.Request{ReservationID: r.ReservationID, ActivityID: r.ActivityID, SKUID: r.SKUID, Bucket: r.Bucket, Quantity: r.Quantity, UserID: r.UserID, OrderID: orderID, MessageID: r.MessageID},
	}
	if err := tb.store.QueueAllocateBucket(&b, a, &alloc, pgtx.Return); err != nil {
		return err
	}
	br := tb.pool.SendBatch(ctx, &b)
	batchErr := br.Close()
	tx := br.Tx()
	defer func() {
		if err != nil && !errors.Is(err, inventory.ErrSoldOut) {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	to := inventory.Transition{ReservationID: r.ReservationID, To: inventory.StatusOrdered, OrderID: orderID}
	switch {
	case errors.Is(batchErr, inventory.ErrSoldOut):
		to = inventory.Transition{ReservationID: r.ReservationID, To: inventory.StatusRejected, FailureCode: "POSTGRES_SOLD_OUT"}
	case batchErr != nil:
		return batchErr
	case !acq.Created || alloc.LedgerID == 0 || alloc.AfterAvailable != alloc.BeforeAvailable-1:
		return errors.New("batch results not filled in")
	}
	if _, err := tb.store.TransitionReservation(ctx, tx, to); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if to.To == inventory.StatusRejected {
		return batchErr
	}
	return nil
}

func TestAllocateOutcomes(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 1, 1, 3, 2) // bucket 0: 2, bucket 1: 1

		alloc := func(a inventory.Allocation) (inventory.Allocated, error) {
			var out inventory.Allocated
			err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
				var err error
				out, err = tb.store.AllocateBucket(tb.ctx, tx, a)
				return err
			})
			return out, err
		}
		r := tb.reserved(t, 1, 1, 0, 2)
		a := inventory.Allocation{
			Request: seckill.Request{ReservationID: r.ReservationID, ActivityID: 1, SKUID: 1, Bucket: 0, Quantity: 2, UserID: r.UserID, OrderID: 99, MessageID: r.MessageID},
		}
		got, err := alloc(a)
		if err != nil {
			t.Fatal(err)
		}
		if got.LedgerID == 0 || got.BeforeAvailable != 2 || got.AfterAvailable != 0 || got.BeforeAllocated != 0 ||
			got.AfterAllocated != 2 || got.Quantity != 2 || got.Version != 1 {
			t.Fatalf("allocated %+v", got)
		}
		ledger, err := tb.store.ReservationLedger(tb.ctx, tb.pool, r.ReservationID)
		if err != nil || len(ledger) != 1 {
			t.Fatalf("ledger %+v, %v", ledger, err)
		}
		if e := ledger[0]; e.LedgerID != got.LedgerID || e.Type != inventory.LedgerAllocate || e.IdempotencyKey != inventory.AllocateKey(r.ReservationID) ||
			e.AvailableDelta != -2 || e.AllocatedDelta != 2 || e.OrderID != 99 || e.UserID != r.UserID || e.Reason != inventory.DefaultAllocateReason ||
			e.ReservationID != r.ReservationID || e.SourceMessageID != r.MessageID || e.ActivityID != 1 || e.SKUID != 1 || e.Bucket != 0 {
			t.Fatalf("ledger row %+v", e)
		}

		// Replay: already applied, nothing decremented.
		_, err = alloc(a)
		var ae *inventory.Error
		if !errors.Is(err, inventory.ErrAlreadyApplied) || !errors.As(err, &ae) || ae.LedgerID != got.LedgerID || ae.TxAborted {
			t.Fatalf("replay: %v", err)
		}
		// Replay on another bucket with stock: still already applied.
		a2 := a
		a2.Bucket, a2.Quantity = 1, 1
		if _, err := alloc(a2); !errors.Is(err, inventory.ErrAlreadyApplied) {
			t.Fatalf("replay on bucket 1: %v", err)
		}

		// Sold out: bucket 0 is empty although bucket 1 has stock.
		r2 := tb.reserved(t, 1, 1, 0, 1)
		_, err = alloc(r2ToAlloc(r2))
		var so *inventory.Error
		if !errors.Is(err, inventory.ErrSoldOut) || !errors.As(err, &so) || so.Available != 0 || so.Requested != 1 || so.Bucket != 0 {
			t.Fatalf("sold out: %v", err)
		}
		// Asking for more than a bucket holds.
		big := r2ToAlloc(tb.reserved(t, 1, 1, 1, 2))
		if _, err := alloc(big); !errors.As(err, &so) || so.Available != 1 || so.Requested != 2 {
			t.Fatalf("too many: %v", err)
		}
		// Unknown bucket and unknown SKU.
		for _, a := range []inventory.Allocation{r2ToAlloc(tb.reserved(t, 1, 1, 2, 1)), r2ToAlloc(tb.reserved(t, 1, 42, 0, 1)), r2ToAlloc(tb.reserved(t, 42, 1, 0, 1))} {
			if _, err := alloc(a); !errors.Is(err, inventory.ErrUnknownBucket) {
				t.Fatalf("bucket %d/%d/%d: %v", a.ActivityID, a.SKUID, a.Bucket, err)
			}
		}
		// Sold out leaves the transaction usable: the next statement works.
		err = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			if _, err := tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(tb.reserved(t, 1, 1, 0, 1))); !errors.Is(err, inventory.ErrSoldOut) {
				t.Errorf("want sold out, got %v", err)
			}
			_, err := tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(tb.reserved(t, 1, 1, 1, 1)))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		tot := tb.totals(t, 1, 1)
		if tot.Allocated != 3 || tot.Available != 0 || tot.SoldOutBuckets != 2 {
			t.Fatalf("totals %+v", tot)
		}
		// Every refusal wrote nothing: two ALLOCATE rows, no placeholder
		// (Config.Citus inserts one before the decrement and deletes it
		// when the decrement is refused).
		var allocs, placeholders int
		if err := tb.pool.QueryRow(tb.ctx, `SELECT count(*) FILTER (WHERE ledger_type = 10),
			count(*) FILTER (WHERE reason LIKE 'SECKILL_PLACEHOLDER%')
			FROM `+pgx.Identifier{tb.schema, "inventory_ledger"}.Sanitize()).Scan(&allocs, &placeholders); err != nil {
			t.Fatal(err)
		}
		if allocs != 2 || placeholders != 0 {
			t.Fatalf("%d ALLOCATE rows and %d placeholders, want 2 and 0", allocs, placeholders)
		}
	})
}

func r2ToAlloc(r inventory.NewReservation) inventory.Allocation {
	return inventory.Allocation{
		Request: seckill.Request{ReservationID: r.ReservationID, ActivityID: r.ActivityID, SKUID: r.SKUID, Bucket: r.Bucket, Quantity: r.Quantity, UserID: r.UserID, MessageID: r.MessageID},
	}
}

// A redelivered allocation or release, sequential or concurrent, applies
// once. The concurrent attempts deliberately skip the reservation lock that
// would serialise them in the real flow, so the statements race on the
// bucket and the ledger's unique key.
func TestRedeliveryAppliesOnce(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 1, 1, 100, 4)

		r := tb.reserved(t, 1, 1, 3, 1)
		a := r2ToAlloc(r)
		run := func(fn func(tx pgx.Tx) error) error { return inTx(tb.ctx, tb.pool, fn) }

		// Sequential, separate transactions and within one transaction.
		if err := run(func(tx pgx.Tx) error { _, err := tb.store.AllocateBucket(tb.ctx, tx, a); return err }); err != nil {
			t.Fatal(err)
		}
		if err := run(func(tx pgx.Tx) error { _, err := tb.store.AllocateBucket(tb.ctx, tx, a); return err }); !errors.Is(err, inventory.ErrAlreadyApplied) {
			t.Fatalf("second allocation: %v", err)
		}
		r2 := tb.reserved(t, 1, 1, 3, 1)
		err := run(func(tx pgx.Tx) error {
			if _, err := tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(r2)); err != nil {
				return err
			}
			_, err := tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(r2))
			if !errors.Is(err, inventory.ErrAlreadyApplied) {
				t.Errorf("same-tx replay: %v", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		checkBucket := func(wantAllocated int32) {
			t.Helper()
			b, err := tb.store.GetBucket(tb.ctx, tb.pool, 1, 1, 3)
			if err != nil {
				t.Fatal(err)
			}
			if b.Allocated != wantAllocated || b.Available != 25-wantAllocated {
				t.Fatalf("bucket 3 %+v, want allocated %d", b, wantAllocated)
			}
		}
		checkBucket(2)

		// Release, sequentially: once.
		rel := inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}}
		var released inventory.Allocated
		if err := run(func(tx pgx.Tx) error {
			var err error
			released, err = tb.store.ReleaseStock(tb.ctx, tx, rel)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if released.Bucket != 3 || released.Quantity != 1 || released.BeforeAllocated != 2 || released.AfterAllocated != 1 {
			t.Fatalf("released %+v", released)
		}
		if err := run(func(tx pgx.Tx) error { _, err := tb.store.ReleaseStock(tb.ctx, tx, rel); return err }); !errors.Is(err, inventory.ErrAlreadyApplied) {
			t.Fatalf("second release: %v", err)
		}
		checkBucket(1)
		// Release without allocation.
		if err := run(func(tx pgx.Tx) error {
			_, err := tb.store.ReleaseStock(tb.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: uuid.Must(uuid.NewV7())}})
			return err
		}); !errors.Is(err, inventory.ErrNotAllocated) {
			t.Fatalf("release of nothing: %v", err)
		}

		// Concurrent: 16 deliveries of one allocation, then of its release.
		const deliveries = 16
		r3 := tb.reserved(t, 1, 1, 3, 1)
		concurrently := func(fn func(tx pgx.Tx) error) (applied, duplicates int) {
			var (
				wg sync.WaitGroup
				mu sync.Mutex
			)
			for range deliveries {
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := run(fn)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						applied++
					case errors.Is(err, inventory.ErrAlreadyApplied):
						duplicates++
					default:
						t.Errorf("delivery: %v", err)
					}
				}()
			}
			testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
			return applied, duplicates
		}
		if ok, dup := concurrently(func(tx pgx.Tx) error { _, err := tb.store.AllocateBucket(tb.ctx, tx, r2ToAlloc(r3)); return err }); ok != 1 || dup != deliveries-1 {
			t.Fatalf("concurrent allocations: %d applied, %d duplicates", ok, dup)
		}
		checkBucket(2)
		if ok, dup := concurrently(func(tx pgx.Tx) error {
			_, err := tb.store.ReleaseStock(tb.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r3.ReservationID}, Reason: "PAY_TIMEOUT"})
			return err
		}); ok != 1 || dup != deliveries-1 {
			t.Fatalf("concurrent releases: %d applied, %d duplicates", ok, dup)
		}
		checkBucket(1)
		for _, id := range []uuid.UUID{r.ReservationID, r3.ReservationID} {
			ledger, err := tb.store.ReservationLedger(tb.ctx, tb.pool, id)
			if err != nil || len(ledger) != 2 || ledger[0].Type != inventory.LedgerAllocate || ledger[1].Type != inventory.LedgerRelease {
				t.Fatalf("ledger of %s: %+v, %v", id, ledger, err)
			}
		}
		tb.orderAllocated(t)
		tb.auditClean(t, 1, 1)
	})
}

// stockEvent is what recorder keeps of either hook.
type stockEvent struct {
	Op                string
	ActivityID, SKUID int64
	Bucket, Quantity  int16
	Batch             bool
	Err               error
}

// recorder keeps the events of the inventory.Observer its observer
// method returns.
type recorder struct {
	mu     sync.Mutex
	events []stockEvent
}

func (r *recorder) AllocateEnd(ctx context.Context, e inventory.StockEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, stockEvent{"allocate", e.ActivityID, e.SKUID, e.Bucket, e.Quantity, e.Batch, e.Err})
}

func (r *recorder) ReleaseEnd(ctx context.Context, e inventory.StockEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, stockEvent{"release", e.ActivityID, e.SKUID, e.Bucket, e.Quantity, e.Batch, e.Err})
}

// observer is the inventory.Observer of r's hooks.
func (r *recorder) observer() inventory.Observer {
	return inventory.Observer{AllocateEnd: r.AllocateEnd, ReleaseEnd: r.ReleaseEnd}
}

func (r *recorder) count(op string, ok bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Op == op && (e.Err == nil) == ok {
			n++
		}
	}
	return n
}

func TestQueueAllocateAndRelease(t *testing.T) {
	t.Parallel()
	for _, citus := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "citus"}[citus], func(t *testing.T) {
			t.Parallel()
			tb, rec := observedMode(t, citus, 5, 6, 2, 1)

			rs := []inventory.NewReservation{tb.reserved(t, 5, 6, 0, 1), tb.reserved(t, 5, 6, 0, 1), tb.reserved(t, 5, 6, 0, 1)}
			got := make([]inventory.Allocated, len(rs))
			err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
				var b pgx.Batch
				for i, r := range rs {
					if err := tb.store.QueueAllocateBucket(&b, r2ToAlloc(r), &got[i], pgtx.Return); err != nil {
						return err
					}
				}
				err := tx.SendBatch(tb.ctx, &b).Close()
				if !errors.Is(err, inventory.ErrSoldOut) {
					t.Errorf("third allocation: %v, want sold out", err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got[0].AfterAvailable != 1 || got[1].AfterAvailable != 0 || got[2].LedgerID != 0 {
				t.Fatalf("batch results %+v", got)
			}
			var rel [2]inventory.Allocated
			err = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
				var b pgx.Batch
				for i := range 2 {
					if err := tb.store.QueueReleaseStock(&b, inventory.StockRelease{Request: seckill.Request{ReservationID: rs[i].ReservationID}}, &rel[i], pgtx.Return); err != nil {
						return err
					}
				}
				return tx.SendBatch(tb.ctx, &b).Close()
			})
			if err != nil {
				t.Fatal(err)
			}
			if rel[0].AfterAvailable != 1 || rel[1].AfterAvailable != 2 || rel[1].AfterAllocated != 0 {
				t.Fatalf("release results %+v", rel)
			}
			if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_ledger")+` WHERE ledger_type IN (10, 20)`); n != 4 {
				t.Fatalf("%d ledger rows, want 4", n)
			}
			tb.auditClean(t, 5, 6)

			var summary []string
			for _, e := range rec.events {
				outcome := "ok"
				if errors.Is(e.Err, inventory.ErrSoldOut) {
					outcome = "sold out"
				} else if e.Err != nil {
					outcome = e.Err.Error()
				}
				if e.ActivityID != 5 || e.SKUID != 6 || e.Bucket != 0 || e.Quantity != 1 || !e.Batch {
					t.Errorf("event %+v", e)
				}
				summary = append(summary, e.Op+" "+outcome)
			}
			if want := []string{"allocate ok", "allocate ok", "allocate sold out", "release ok", "release ok"}; !slices.Equal(summary, want) {
				t.Fatalf("observed %v, want %v", summary, want)
			}
		})
	}
}

// A release whose bucket holds less allocated stock than the ALLOCATE row
// (an invariant broken outside the library) is refused with
// ErrInconsistent and changes nothing.
func TestReleaseRefusesBucketShortOfAllocatedStock(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 5, 1)
	r := tb.newReservation(1, 1, 0)
	if err := tb.buy(tb.ctx, r); err != nil {
		t.Fatal(err)
	}
	tb.exec(t, `UPDATE `+tb.table("sku_inventory")+` SET available_stock = total_stock, allocated_stock = 0
 WHERE activity_id = 1 AND sku_id = 1 AND bucket_no = 0`)
	before, err := tb.store.GetBucket(tb.ctx, tb.pool, 1, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		_, err := tb.store.ReleaseStock(tb.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}})
		return err
	})
	if !errors.Is(err, inventory.ErrInconsistent) {
		t.Fatalf("release from a bucket without the allocated stock: %v, want ErrInconsistent", err)
	}
	if after, err := tb.store.GetBucket(tb.ctx, tb.pool, 1, 1, 0); err != nil || after.Available != before.Available ||
		after.Allocated != before.Allocated || after.Version != before.Version {
		t.Fatalf("bucket %+v, %v after the refused release, want %+v", after, err, before)
	}
	if ledger, err := tb.store.ReservationLedger(tb.ctx, tb.pool, r.ReservationID); err != nil || len(ledger) != 1 {
		t.Fatalf("ledger %+v, %v; want the ALLOCATE row only", ledger, err)
	}
}

// A release touches only its own bucket: the bucket of the same SKU id and
// bucket number in another activity keeps its stock.
func TestReleaseTouchesOnlyItsActivity(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var rs []inventory.NewReservation
	for _, act := range []int64{1, 2} {
		tb.provision(t, act, 1, 5, 1)
		r := tb.newReservation(act, 1, 0)
		if err := tb.buy(tb.ctx, r); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		_, err := tb.store.ReleaseStock(tb.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: rs[1].ReservationID}})
		return err
	})
	if err != nil {
		t.Fatalf("release in activity 2: %v", err)
	}
	for act, want := range map[int64]int32{1: 1, 2: 0} {
		if b, err := tb.store.GetBucket(tb.ctx, tb.pool, act, 1, 0); err != nil || b.Allocated != want {
			t.Errorf("activity %d: bucket %+v, %v; want %d allocated", act, b, err, want)
		}
	}
}

// A release delivered again in a later transaction finds the RELEASE row
// before it touches the bucket: ErrAlreadyApplied with that row's id, and
// the transaction still usable. Another buyer's allocation keeps the
// bucket's allocated stock above the quantity, so only the RELEASE row
// stops the increment.
func TestReleaseAgainKeepsTheTransaction(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 5, 1)
	r := tb.newReservation(1, 1, 0)
	for _, b := range []inventory.NewReservation{r, tb.newReservation(1, 1, 0)} {
		if err := tb.buy(tb.ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	rel := inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}}
	var first inventory.Allocated
	if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		var err error
		first, err = tb.store.ReleaseStock(tb.ctx, tx, rel)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		_, err := tb.store.ReleaseStock(tb.ctx, tx, rel)
		var e *inventory.Error
		if !errors.As(err, &e) || !errors.Is(err, inventory.ErrAlreadyApplied) || e.TxAborted || e.LedgerID != first.LedgerID {
			t.Errorf("second release: %v (%+v); want ErrAlreadyApplied naming ledger row %d, transaction not aborted", err, e, first.LedgerID)
		}
		var one int
		return tx.QueryRow(tb.ctx, `SELECT 1`).Scan(&one)
	})
	if err != nil {
		t.Fatalf("the transaction after the duplicate release: %v", err)
	}
}
