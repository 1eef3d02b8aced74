package inventory_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/pgval"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// reserved returns a new reservation of qty units, recorded (PENDING_DB).
func (tb testBundle) reserved(t *testing.T, activity, sku int64, bucket, qty int16) inventory.NewReservation {
	t.Helper()
	r := tb.newReservation(activity, sku, bucket)
	r.Quantity = qty
	tb.insertReservations(t, []inventory.NewReservation{r})
	return r
}

// orderAllocated moves every PENDING_DB reservation that holds stock to
// ORDERED (a fresh order id each), as the order transaction would have:
// tests that only allocate call it before the audit, which flags a
// PENDING_DB reservation holding stock.
func (tb testBundle) orderAllocated(t *testing.T) {
	t.Helper()
	res, led := tb.table("inventory_reservation"), tb.table("inventory_ledger")
	_, err := tb.pool.Exec(tb.ctx, `UPDATE `+res+` AS r SET status = 10, ordered_at = statement_timestamp(),
		order_id = 1000000000 + p.n
		FROM (SELECT reservation_id, row_number() OVER () AS n FROM `+res+` AS x
		       WHERE x.status = 0
		         AND EXISTS (SELECT 1 FROM `+led+` AS l WHERE l.reservation_id = x.reservation_id AND l.ledger_type = 10)
		         AND NOT EXISTS (SELECT 1 FROM `+led+` AS l WHERE l.reservation_id = x.reservation_id AND l.ledger_type = 20)) AS p
		WHERE r.reservation_id = p.reservation_id`)
	if err != nil {
		t.Fatal(err)
	}
}

// insertReservations records rs as PENDING_DB reservations in one COPY.
func (tb testBundle) insertReservations(t *testing.T, rs []inventory.NewReservation) {
	t.Helper()
	cols := []string{"reservation_id", "request_id", "first_message_id", "activity_id", "sku_id", "user_id",
		"inventory_bucket", "quantity", "redis_reserved_at", "expires_at"}
	_, err := tb.pool.CopyFrom(tb.ctx, pgx.Identifier{tb.schema, "inventory_reservation"}, cols,
		pgx.CopyFromSlice(len(rs), func(i int) ([]any, error) {
			r := rs[i]
			return []any{pgval.UUID(r.ReservationID), pgval.UUID(r.RequestID), pgval.UUID(r.MessageID),
				r.ActivityID, r.SKUID, r.UserID, r.Bucket, r.Quantity, r.ReservedAt, r.ExpiresAt}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
}

// waitLockWaiters blocks until n backends of this test's schema wait for a
// lock (their statement text names the schema).
func (tb testBundle) waitLockWaiters(t *testing.T, n int) {
	t.Helper()
	ctx := testwait.Context(t, tb.ctx, testwait.Step)
	for {
		var got int
		err := tb.pool.QueryRow(tb.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0`, tb.schema).Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d lock waiters: %v", got, n, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// raceDuplicates holds the first duplicate's transaction open after op,
// starts waiters more duplicates in transactions of their own, waits until
// all of them queue on a lock, commits the first and returns the waiters'
// errors.
func (tb testBundle) raceDuplicates(t *testing.T, waiters int, op func(pgx.Tx) error) []error {
	t.Helper()
	first, err := tb.pool.BeginTx(tb.ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(context.WithoutCancel(tb.ctx))
	if err := op(first); err != nil {
		t.Fatalf("first: %v", err)
	}
	errs := make([]error, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = inTx(tb.ctx, tb.pool, op)
		}()
	}
	tb.waitLockWaiters(t, waiters)
	if err := first.Commit(tb.ctx); err != nil {
		t.Fatal(err)
	}
	testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
	return errs
}

// allAlreadyApplied checks that every duplicate was already applied; with
// Config.Citus (citus) none of them aborted its transaction, as the
// ledger insert waits for the first and then inserts nothing.
func allAlreadyApplied(t *testing.T, what string, errs []error, citus bool) {
	t.Helper()
	for i, err := range errs {
		var ae *inventory.Error
		if !errors.Is(err, inventory.ErrAlreadyApplied) || !errors.As(err, &ae) {
			t.Errorf("%s: duplicate %d: %v, want ErrAlreadyApplied", what, i, err)
		} else if citus && ae.TxAborted {
			t.Errorf("%s: duplicate %d aborted its transaction with Config.Citus: %v", what, i, err)
		}
	}
}

// Twelve transactions allocate one reservation at once on a bucket with
// exactly one unit: the first takes it, and the eleven that waited for the
// bucket's row lock behind it are all already applied, none sold out. Then
// the same for twelve releases of the reservation's last allocated unit:
// one release, eleven already applied, none "inconsistent".
func TestConcurrentDuplicatesAtTheLastUnit(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 1, 1, 1, 1)
		r := tb.newReservation(1, 1, 0)
		acq, err := tb.acquire(r)
		if err != nil {
			t.Fatal(err)
		}
		a := acq.Reservation.Allocation(7, r.MessageID)

		errs := tb.raceDuplicates(t, 11, func(tx pgx.Tx) error {
			_, err := tb.store.AllocateBucket(tb.ctx, tx, a)
			return err
		})
		allAlreadyApplied(t, "allocate", errs, tb.citus)
		if tot := tb.totals(t, 1, 1); tot.Allocated != 1 || tot.Available != 0 {
			t.Fatalf("after allocations: %+v", tot)
		}

		// The batch form classifies the same way.
		var b pgx.Batch
		var got inventory.Allocated
		if err := tb.store.QueueAllocateBucket(&b, a, &got, pgtx.Return); err != nil {
			t.Fatal(err)
		}
		if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error { return tx.SendBatch(tb.ctx, &b).Close() }); !errors.Is(err, inventory.ErrAlreadyApplied) {
			t.Fatalf("batch duplicate: %v", err)
		}

		errs = tb.raceDuplicates(t, 11, func(tx pgx.Tx) error {
			_, err := tb.store.ReleaseStock(tb.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}})
			return err
		})
		allAlreadyApplied(t, "release", errs, tb.citus)
		if tot := tb.totals(t, 1, 1); tot.Allocated != 0 || tot.Available != 1 {
			t.Fatalf("after releases: %+v", tot)
		}
		tb.auditClean(t, 1, 1)
	})
}

// At scale: 10,000 buyers for 100 units in 16 buckets (or 100 tokens), then
// every allocated reservation released twice at once. Every pair gives one
// release and one already applied, whatever the bucket's stock.
func TestConcurrentDoubleReleasesAtScale(t *testing.T) {
	t.Parallel()
	stockModes(t, func(t *testing.T, tb testBundle) {
		buckets := int16(16) // token stock: 100 token rows, bucket 0
		if tb.tokens {
			buckets = 1
		}
		tb.provision(t, 1, 1, 100, buckets)

		const workers = 16
		buyers := 10_000
		if testing.Short() { // the mutation tools' runs: the same race, a tenth of the buyers
			buyers = 1_000
		}
		// The attempts are plain allocations of recorded reservations, each a
		// transaction of one batch; commits skip the WAL flush wait, as
		// durability is not under test here (the releases below wait for it).
		all := make([]inventory.NewReservation, buyers)
		for i := range all {
			all[i] = tb.newReservation(1, 1, int16(i)%buckets)
		}
		tb.insertReservations(t, all)
		fast := tb
		fast.pool = pgtest.NewPool(t, func(cfg *pgxpool.Config) {
			cfg.MaxConns = workers
			cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
		})
		rs := make(chan inventory.NewReservation)
		var (
			mu      sync.Mutex
			ordered []inventory.NewReservation
			wg      sync.WaitGroup
		)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rs {
					switch err := fast.allocateOnly(r2ToAlloc(r)); {
					case err == nil:
						mu.Lock()
						ordered = append(ordered, r)
						mu.Unlock()
					case !errors.Is(err, inventory.ErrSoldOut):
						t.Errorf("allocate: %v", err)
					}
				}
			}()
		}
		for _, r := range all {
			rs <- r
		}
		close(rs)
		testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
		if len(ordered) != 100 {
			t.Fatalf("%d buyers got stock, want 100", len(ordered))
		}

		var (
			released, applied int
			others            []string
		)
		var rwg sync.WaitGroup
		for _, r := range ordered {
			for range 2 {
				rwg.Add(1)
				go func() {
					defer rwg.Done()
					err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
						_, err := tb.store.ReleaseStock(tb.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}})
						return err
					})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						released++
					case errors.Is(err, inventory.ErrAlreadyApplied):
						applied++
					default:
						others = append(others, err.Error())
					}
				}()
			}
		}
		testwait.WaitWithin(t, &rwg, testwait.Long, "the concurrent transactions")
		if released != 100 || applied != 100 || len(others) > 0 {
			t.Fatalf("%d released, %d already applied, %d other errors (want 100, 100, 0): %s",
				released, applied, len(others), strings.Join(others[:min(len(others), 3)], "; "))
		}
		if tot := tb.totals(t, 1, 1); tot.Allocated != 0 || tot.Available != 100 {
			t.Fatalf("after releases: %+v", tot)
		}
		tb.auditClean(t, 1, 1)
	})
}

// Twenty transitions to RELEASE_PENDING (then twenty to RELEASED) wait
// behind an open transaction that moves the reservation PENDING_DB ->
// ORDERED. After it commits, ORDERED -> RELEASE_PENDING is legal: exactly
// one waiter moves the reservation, the other nineteen find it already
// there. Half of the waiters use the batch form.
func TestTransitionWaitsThenDecides(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, to := range []inventory.ReservationStatus{inventory.StatusReleasePending, inventory.StatusReleased} {
		r := tb.newReservation(1, 1, 0)
		if _, err := tb.acquire(r); err != nil {
			t.Fatal(err)
		}
		const waiters = 20
		first, err := tb.pool.BeginTx(tb.ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tb.store.TransitionReservation(tb.ctx, first, inventory.Transition{
			ReservationID: r.ReservationID, To: inventory.StatusOrdered, OrderID: tb.ids.Add(1)}); err != nil {
			t.Fatal(err)
		}
		errs := make([]error, waiters)
		var wg sync.WaitGroup
		for i := range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tr := inventory.Transition{ReservationID: r.ReservationID, To: to}
				errs[i] = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
					if i%2 == 0 {
						_, err := tb.store.TransitionReservation(tb.ctx, tx, tr)
						return err
					}
					var b pgx.Batch
					var got inventory.Reservation
					if err := tb.store.QueueTransitionReservation(&b, tr, &got, pgtx.Return); err != nil {
						return err
					}
					return tx.SendBatch(tb.ctx, &b).Close()
				})
			}()
		}
		tb.waitLockWaiters(t, waiters)
		if err := first.Commit(tb.ctx); err != nil {
			t.Fatal(err)
		}
		testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
		var moved, already int
		for _, err := range errs {
			switch {
			case err == nil:
				moved++
			case errors.Is(err, inventory.ErrAlreadyInState):
				already++
			default:
				t.Errorf("to %s: %v", to, err)
			}
		}
		if moved != 1 || already != waiters-1 {
			t.Fatalf("to %s: %d moved, %d already in state; want 1 and %d", to, moved, already, waiters-1)
		}
		got, err := tb.store.GetReservation(tb.ctx, tb.pool, r.ReservationID)
		if err != nil || got.Status != to || got.Version != 2 {
			t.Fatalf("reservation %+v, %v", got, err)
		}
	}
}
