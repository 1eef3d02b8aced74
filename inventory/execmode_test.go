package inventory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// TestQueryExecModes runs every statement of the package through pools in
// the query exec modes where pgx does not learn parameter types from the
// server (exec, simple_protocol: what PgBouncer in transaction mode needs)
// or encodes from a cached description (cache_describe).
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	for _, mode := range pgtest.ExecModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			tb.pool = pgtest.NewPool(t, pgtest.WithExecMode(mode))
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
		})
	}
}
