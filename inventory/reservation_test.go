package inventory_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

func TestAcquireReservation(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		r := tb.newReservation(1, 2, 3)
		first, err := tb.acquire(r)
		if err != nil {
			t.Fatal(err)
		}
		got := first.Reservation
		if !first.Created || got.ReservationID != r.ReservationID || got.RequestID != r.RequestID || got.FirstMessageID != r.MessageID ||
			got.ActivityID != 1 || got.SKUID != 2 || got.UserID != r.UserID || got.Bucket != 3 || got.Quantity != 1 ||
			got.Status != inventory.StatusPendingDB || got.OrderID != 0 || got.FailureCode != "" || !got.OrderedAt.IsZero() ||
			!got.ReservedAt.Equal(r.ReservedAt.Truncate(time.Microsecond)) || got.Version != 0 {
			t.Fatalf("first acquire %+v", first)
		}

		// Redelivery under another message id: same row, not created.
		again := r
		again.MessageID = uuid.Must(uuid.NewV7())
		second, err := tb.acquire(again)
		if err != nil || second.Created || second.Reservation.FirstMessageID != r.MessageID {
			t.Fatalf("second acquire %+v, %v", second, err)
		}

		// Same reservation id, different data; same request id, other reservation.
		for field, mutate := range map[string]func(*inventory.NewReservation){
			"request_id":       func(n *inventory.NewReservation) { n.RequestID = uuid.Must(uuid.NewV7()) },
			"activity_id":      func(n *inventory.NewReservation) { n.ActivityID = 9 },
			"sku_id":           func(n *inventory.NewReservation) { n.SKUID = 9 },
			"user_id":          func(n *inventory.NewReservation) { n.UserID = 1 << 40 },
			"inventory_bucket": func(n *inventory.NewReservation) { n.Bucket = 0 },
			"quantity":         func(n *inventory.NewReservation) { n.Quantity = 2 },
		} {
			n := r
			mutate(&n)
			_, err := tb.acquire(n)
			var ce *inventory.Error
			if !errors.Is(err, inventory.ErrReservationConflict) || !errors.As(err, &ce) || ce.Field != field || ce.Reservation.ReservationID != r.ReservationID {
				t.Errorf("%s: %v", field, err)
			}
		}
		other := tb.newReservation(1, 2, 3)
		other.RequestID = r.RequestID
		var ce *inventory.Error
		// The transaction stays usable after the conflict.
		err = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.AcquireReservation(tb.ctx, tx, other)
			if !errors.As(err, &ce) || ce.Field != "request_id" || ce.Reservation.ReservationID != r.ReservationID {
				t.Errorf("request id conflict: %v", err)
			}
			_, err = tb.store.GetReservation(tb.ctx, tx, r.ReservationID)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_reservation")); n != 1 {
			t.Fatalf("%d reservations, want 1", n)
		}
		if _, err := tb.store.GetReservation(tb.ctx, tb.pool, uuid.Must(uuid.NewV7())); !errors.Is(err, inventory.ErrReservationNotFound) {
			t.Fatalf("get unknown: %v", err)
		}
	})
}

// NewReservation.OrderID inserts the reservation as ORDERED; it never
// changes an existing reservation, and an order id held by another
// reservation is a typed conflict that writes nothing, also when the other
// reservation is still being inserted by a concurrent transaction.
func TestAcquireReservationAsOrdered(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		count := func() int64 {
			return tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_reservation"))
		}

		r := tb.newReservation(1, 2, 3)
		r.OrderID, r.Ordered = 77, true
		got, err := tb.acquire(r)
		if err != nil {
			t.Fatal(err)
		}
		if res := got.Reservation; !got.Created || res.Status != inventory.StatusOrdered || res.OrderID != 77 ||
			res.OrderedAt.IsZero() || res.Version != 0 || res.FailureCode != "" {
			t.Fatalf("acquire as ordered: %+v", got)
		}
		stored, err := tb.store.GetReservation(tb.ctx, tb.pool, r.ReservationID)
		if err != nil || stored.Status != inventory.StatusOrdered || stored.OrderID != 77 || !stored.OrderedAt.Equal(got.Reservation.OrderedAt) {
			t.Fatalf("stored %+v, %v", stored, err)
		}

		// Redelivered: the stored row, not created again.
		if again, err := tb.acquire(r); err != nil || again.Created || again.Reservation.Status != inventory.StatusOrdered {
			t.Fatalf("redelivery: %+v, %v", again, err)
		}

		// An existing PENDING_DB reservation is returned as it is: OrderID
		// does not move it.
		p := tb.newReservation(1, 2, 3)
		if _, err := tb.acquire(p); err != nil {
			t.Fatal(err)
		}
		p.OrderID, p.Ordered = 88, true
		if again, err := tb.acquire(p); err != nil || again.Created || again.Reservation.Status != inventory.StatusPendingDB || again.Reservation.OrderID != 0 {
			t.Fatalf("existing pending with an order id: %+v, %v", again, err)
		}

		// Another reservation with the same order id: conflict, nothing
		// written, the transaction stays usable. The request id conflict is
		// reported first when both apply.
		before := count()
		q := tb.newReservation(1, 2, 3)
		q.OrderID, q.Ordered = 77, true
		err = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.AcquireReservation(tb.ctx, tx, q)
			var ce *inventory.Error
			if !errors.Is(err, inventory.ErrReservationConflict) || !errors.As(err, &ce) || ce.Field != "order_id" ||
				ce.Reservation.ReservationID != r.ReservationID || ce.Reservation.OrderID != 77 {
				t.Errorf("order id conflict: %v", err)
			}
			both := q
			both.RequestID = r.RequestID
			_, err = tb.store.AcquireReservation(tb.ctx, tx, both)
			if !errors.As(err, &ce) || ce.Field != "request_id" {
				t.Errorf("request and order id conflict: %v", err)
			}
			_, err = tb.store.GetReservation(tb.ctx, tx, r.ReservationID)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := count(); n != before {
			t.Fatalf("%d reservations after the conflicts, want %d", n, before)
		}

		// Bad input: typed, nothing sent.
		bad := tb.newReservation(1, 2, 3)
		bad.OrderID = -1
		var ve *inventory.Error
		if _, err := tb.acquire(bad); !errors.As(err, &ve) || ve.Field != "OrderID" {
			t.Fatalf("negative order id: %v", err)
		}
		if err := tb.store.QueueAcquireReservation(&pgx.Batch{}, bad, &inventory.Acquired{}, pgtx.Return); !errors.As(err, &ve) {
			t.Fatalf("queued negative order id: %v", err)
		}

		// The batch form.
		qb := tb.newReservation(1, 2, 3)
		qb.OrderID, qb.Ordered = 78, true
		var queued inventory.Acquired
		err = inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			if err := tb.store.QueueAcquireReservation(b, qb, &queued, pgtx.Return); err != nil {
				return err
			}
			return tx.SendBatch(tb.ctx, b).Close()
		})
		if err != nil || !queued.Created || queued.Reservation.Status != inventory.StatusOrdered || queued.Reservation.OrderID != 78 {
			t.Fatalf("queued acquire as ordered: %+v, %v", queued, err)
		}

		// Two transactions insert different reservations for one order id at
		// once: the second waits for the first and, once it commits, gets the
		// conflict.
		first, second := tb.newReservation(1, 2, 3), tb.newReservation(1, 2, 3)
		first.OrderID, second.OrderID = 99, 99
		first.Ordered, second.Ordered = true, true
		tx1, err := tb.pool.Begin(tb.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx1.Rollback(tb.ctx)
		if _, err := tb.store.AcquireReservation(tb.ctx, tx1, first); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := tb.acquire(second); done <- err }()
		select {
		case err := <-done:
			t.Fatalf("second insert did not wait for the first: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if err := tx1.Commit(tb.ctx); err != nil {
			t.Fatal(err)
		}
		var ce *inventory.Error
		if err := testwait.Recv(t, done, "the blocked call to return"); !errors.As(err, &ce) || ce.Field != "order_id" || ce.Reservation.ReservationID != first.ReservationID {
			t.Fatalf("concurrent order id: %v", err)
		}
	})
}

// The row stays locked until the acquiring transaction ends: a second
// transaction acquiring the same reservation waits and then sees the first
// one's result.
func TestAcquireReservationLocksAndSerialises(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		tb.provision(t, 1, 1, 10, 1)
		r := tb.newReservation(1, 1, 0)

		tx1, err := tb.pool.Begin(tb.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx1.Rollback(tb.ctx)
		if acq, err := tb.store.AcquireReservation(tb.ctx, tx1, r); err != nil || !acq.Created {
			t.Fatalf("tx1: %+v, %v", acq, err)
		}
		done := make(chan inventory.Acquired, 1)
		errc := make(chan error, 1)
		go func() {
			var acq inventory.Acquired
			errc <- inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
				var err error
				acq, err = tb.store.AcquireReservation(tb.ctx, tx, r)
				return err
			})
			done <- acq
		}()
		// tx2 must be waiting for tx1's row: wait until the server shows it
		// blocked, then finish tx1.
		deadline := time.After(testwait.Step)
		for {
			var waiting bool
			if err := tb.pool.QueryRow(tb.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND position($1 IN query) > 0)`, pgx.Identifier{tb.schema}.Sanitize()+".inventory_reservation").Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting {
				break
			}
			select {
			case err := <-errc:
				t.Fatalf("second acquire did not wait: %v", err)
			case <-deadline:
				t.Fatal("second acquire is not waiting for the first one's row lock")
			case <-time.After(10 * time.Millisecond):
			}
		}
		if _, err := tb.store.AllocateBucket(tb.ctx, tx1, r2ToAlloc(r)); err != nil {
			t.Fatal(err)
		}
		if _, err := tb.store.TransitionReservation(tb.ctx, tx1, inventory.Transition{ReservationID: r.ReservationID, To: inventory.StatusOrdered, OrderID: 77}); err != nil {
			t.Fatal(err)
		}
		if err := tx1.Commit(tb.ctx); err != nil {
			t.Fatal(err)
		}
		if err := testwait.Recv(t, errc, "the goroutine to return"); err != nil {
			t.Fatal(err)
		}
		acq := testwait.Recv(t, done, "the blocked call to return")
		if acq.Created || acq.Reservation.Status != inventory.StatusOrdered || acq.Reservation.OrderID != 77 {
			t.Fatalf("second acquire saw %+v", acq)
		}
	})
}

// Many transactions acquire one new reservation at once: exactly one
// inserts it, none fails.
func TestAcquireReservationConcurrentFirstInsert(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		r := tb.newReservation(1, 1, 0)
		const callers = 24
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			created int
		)
		start := make(chan struct{})
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
					acq, err := tb.store.AcquireReservation(tb.ctx, tx, r)
					if err == nil && acq.Created {
						mu.Lock()
						created++
						mu.Unlock()
					}
					return err
				})
				if err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
		if created != 1 {
			t.Fatalf("created %d times", created)
		}
	})
}

// Every (from, to) pair of statuses against the transition table: allowed
// pairs move, stamping only their own target's columns (order id and
// time for ORDERED, release time for RELEASED), the rest are classified
// (already in target / illegal, with the current status) and change
// nothing, and an unknown id is not found; with TransitionReservation and
// with the one-batch form (QueueTransitionReservation with pgtx.Abort),
// whose refusals carry the condition without the row.
func TestTransitionEveryPair(t *testing.T) {
	t.Parallel()
	t.Run("TransitionReservation", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		transitionEveryPair(t, tb, true, func(tr inventory.Transition) (inventory.Reservation, error) {
			return tb.store.TransitionReservation(tb.ctx, tb.pool, tr)
		})
	})
	t.Run("QueueTransitionReservation/Abort", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		transitionEveryPair(t, tb, false, func(tr inventory.Transition) (inventory.Reservation, error) {
			var b pgx.Batch
			var got inventory.Reservation
			if err := tb.store.QueueTransitionReservation(&b, tr, &got, pgtx.Abort); err != nil {
				return got, err
			}
			return got, pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{}, &b)
		})
	})
}

// transitionEveryPair is TestTransitionEveryPair with transition as the
// form; detailed: its refusals carry the current and target status.
func transitionEveryPair(t *testing.T, tb testBundle, detailed bool, transition func(inventory.Transition) (inventory.Reservation, error)) {
	orderID := int64(1000)
	force := func(id uuid.UUID, status inventory.ReservationStatus) {
		t.Helper()
		orderID++
		_, err := tb.pool.Exec(tb.ctx, `UPDATE `+tb.table("inventory_reservation")+`
   SET status = $2::smallint, order_id = CASE WHEN $2::smallint IN (10, 30, 40) THEN $3::bigint END,
       released_at = CASE WHEN $2::smallint = 40 THEN now() END
 WHERE reservation_id = $1`, id, int16(status), orderID)
		if err != nil {
			t.Fatal(err)
		}
	}
	targets := 0
	for _, to := range inventory.ReservationStatuses() {
		if len(inventory.AllowedFrom(to)) == 0 {
			// Not a target: rejected up front.
			_, err := transition(inventory.Transition{ReservationID: uuid.Must(uuid.NewV7()), To: to, OrderID: 1})
			if !errors.Is(err, inventory.ErrInvalidArgument) {
				t.Errorf("to %s: %v, want ErrInvalidArgument", to, err)
			}
			continue
		}
		targets++
		for _, from := range inventory.ReservationStatuses() {
			nr := tb.newReservation(1, 1, 0)
			if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
				_, err := tb.store.AcquireReservation(tb.ctx, tx, nr)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			force(nr.ReservationID, from)
			before, err := tb.store.GetReservation(tb.ctx, tb.pool, nr.ReservationID)
			if err != nil {
				t.Fatal(err)
			}
			tr := inventory.Transition{ReservationID: nr.ReservationID, To: to, FailureCode: "CODE_" + to.String()}
			if to == inventory.StatusOrdered {
				orderID++
				tr.OrderID = orderID
			}
			got, err := transition(tr)
			var te *inventory.Error
			switch {
			case inventory.CanTransition(from, to):
				if err != nil {
					t.Errorf("%s -> %s: %v", from, to, err)
					continue
				}
				if got.Status != to || got.Version != before.Version+1 || got.FailureCode != tr.FailureCode {
					t.Errorf("%s -> %s: row %+v", from, to, got)
				}
				if to == inventory.StatusOrdered && (got.OrderID != tr.OrderID || got.OrderedAt.IsZero()) {
					t.Errorf("%s -> ORDERED: order %d, ordered_at %v", from, got.OrderID, got.OrderedAt)
				}
				if to == inventory.StatusReleased && got.ReleasedAt.IsZero() {
					t.Errorf("%s -> RELEASED: no released_at", from)
				}
				// A transition stamps only its own target's columns.
				if to != inventory.StatusOrdered && (got.OrderID != before.OrderID || !got.OrderedAt.Equal(before.OrderedAt)) {
					t.Errorf("%s -> %s: order %d, ordered_at %v; want them kept (%d, %v)",
						from, to, got.OrderID, got.OrderedAt, before.OrderID, before.OrderedAt)
				}
				if to != inventory.StatusReleased && !got.ReleasedAt.Equal(before.ReleasedAt) {
					t.Errorf("%s -> %s: released_at %v; want it kept (%v)", from, to, got.ReleasedAt, before.ReleasedAt)
				}
			case from == to:
				if !errors.Is(err, inventory.ErrAlreadyInState) || errors.Is(err, inventory.ErrIllegalTransition) ||
					detailed && (!errors.As(err, &te) || te.Current != from || te.Target != to || te.Reservation.Version != before.Version) {
					t.Errorf("%s -> %s: %v, want ErrAlreadyInState", from, to, err)
				}
			default:
				if !errors.Is(err, inventory.ErrIllegalTransition) || errors.Is(err, inventory.ErrAlreadyInState) ||
					detailed && (!errors.As(err, &te) || te.Current != from || te.Target != to) {
					t.Errorf("%s -> %s: %v, want ErrIllegalTransition", from, to, err)
				}
			}
			if err != nil {
				after, _ := tb.store.GetReservation(tb.ctx, tb.pool, nr.ReservationID)
				if after.Status != from || after.Version != before.Version {
					t.Errorf("%s -> %s failed but changed the row: %+v", from, to, after)
				}
			}
		}
		_, err := transition(inventory.Transition{ReservationID: uuid.Must(uuid.NewV7()), To: to, OrderID: 5})
		if !errors.Is(err, inventory.ErrReservationNotFound) {
			t.Errorf("unknown -> %s: %v", to, err)
		}
	}
	if targets != 6 {
		t.Fatalf("%d transition targets, want 6", targets)
	}
}

// The batch form classifies like the direct one.
func TestQueueTransitionReservation(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	nr := tb.newReservation(1, 1, 0)
	var (
		acq          inventory.Acquired
		ordered, dup inventory.Reservation
	)
	err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		var b pgx.Batch
		if err := tb.store.QueueAcquireReservation(&b, nr, &acq, pgtx.Return); err != nil {
			return err
		}
		if err := tb.store.QueueTransitionReservation(&b, inventory.Transition{ReservationID: nr.ReservationID, To: inventory.StatusOrdered, OrderID: 3}, &ordered, pgtx.Return); err != nil {
			return err
		}
		if err := tb.store.QueueTransitionReservation(&b, inventory.Transition{ReservationID: nr.ReservationID, To: inventory.StatusOrdered, OrderID: 3}, &dup, pgtx.Return); err != nil {
			return err
		}
		err := tx.SendBatch(tb.ctx, &b).Close()
		if !errors.Is(err, inventory.ErrAlreadyInState) {
			t.Errorf("batch: %v, want ErrAlreadyInState from the third statement", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !acq.Created || ordered.Status != inventory.StatusOrdered || ordered.OrderID != 3 || dup.ReservationID != uuid.Nil {
		t.Fatalf("acq %+v ordered %+v dup %+v", acq, ordered, dup)
	}
}

func TestTransitionOrderIDTaken(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	a, b := tb.newReservation(1, 1, 0), tb.newReservation(1, 1, 0)
	for _, r := range []inventory.NewReservation{a, b} {
		if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.AcquireReservation(tb.ctx, tx, r)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tb.store.TransitionReservation(tb.ctx, tb.pool, inventory.Transition{ReservationID: a.ReservationID, To: inventory.StatusOrdered, OrderID: 5}); err != nil {
		t.Fatal(err)
	}
	_, err := tb.store.TransitionReservation(tb.ctx, tb.pool, inventory.Transition{ReservationID: b.ReservationID, To: inventory.StatusOrdered, OrderID: 5})
	if !errors.Is(err, inventory.ErrReservationConflict) {
		t.Fatalf("order id reused: %v", err)
	}
	if got, _ := tb.store.GetReservation(tb.ctx, tb.pool, b.ReservationID); got.Status != inventory.StatusPendingDB {
		t.Fatalf("b is %s", got.Status)
	}
}

// A transition that waits for a concurrent one reports the status that
// transaction committed, not the stale one of its snapshot.
func TestTransitionRaceReportsCommittedStatus(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	r := tb.newReservation(1, 1, 0)
	if err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		_, err := tb.store.AcquireReservation(tb.ctx, tx, r)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	tx1, err := tb.pool.Begin(tb.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(tb.ctx)
	if _, err := tb.store.TransitionReservation(tb.ctx, tx1, inventory.Transition{ReservationID: r.ReservationID, To: inventory.StatusOrdered, OrderID: 11}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := tb.store.TransitionReservation(tb.ctx, tb.pool, inventory.Transition{ReservationID: r.ReservationID, To: inventory.StatusOrdered, OrderID: 12})
		errc <- err
	}()
	deadline := time.After(testwait.Step)
	for {
		var waiting bool
		if err := tb.pool.QueryRow(tb.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND position($1 IN query) > 0)`, pgx.Identifier{tb.schema}.Sanitize()+".inventory_reservation").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-errc:
			t.Fatalf("second transition did not wait: %v", err)
		case <-deadline:
			t.Fatal("second transition is not waiting for the first one's row lock")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := tx1.Commit(tb.ctx); err != nil {
		t.Fatal(err)
	}
	err = testwait.Recv(t, errc, "the goroutine to return")
	var te *inventory.Error
	if !errors.Is(err, inventory.ErrAlreadyInState) || !errors.As(err, &te) || te.Current != inventory.StatusOrdered || te.Reservation.OrderID != 11 {
		t.Fatalf("racing transition: %v", err)
	}
}

// TestAcquireLocksTheExistingReservation: acquiring a reservation that
// exists locks its row until the caller's transaction ends (the lock
// serialises two messages of one reservation), on the plain and the Citus
// statements: another transaction's FOR UPDATE NOWAIT on it fails while
// the transaction is open and succeeds once it committed.
func TestAcquireLocksTheExistingReservation(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		r := tb.newReservation(1, 2, 0)
		if _, err := tb.acquire(r); err != nil {
			t.Fatal(err)
		}
		nowait := func() error {
			var one int
			return tb.pool.QueryRow(tb.ctx, `SELECT 1 FROM `+tb.table("inventory_reservation")+
				` WHERE reservation_id = $1 FOR UPDATE NOWAIT`, r.ReservationID).Scan(&one)
		}
		tx, err := tb.pool.Begin(tb.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(tb.ctx)) }()
		got, err := tb.store.AcquireReservation(tb.ctx, tx, r)
		if err != nil || got.Created {
			t.Fatalf("acquire the existing reservation: %+v, %v", got, err)
		}
		if err := nowait(); pgErrCode(err) != "55P03" {
			t.Fatalf("FOR UPDATE NOWAIT while the acquiring transaction is open: %v, want lock_not_available (55P03)", err)
		}
		if err := tx.Commit(tb.ctx); err != nil {
			t.Fatal(err)
		}
		if err := nowait(); err != nil {
			t.Fatalf("FOR UPDATE NOWAIT after the commit: %v", err)
		}
	})
}

// TestQueueAcquireAbortOrderedAt: the one-batch form records a reservation
// without an order as PENDING_DB with no order time, and one with an
// order as ORDERED at the statement's time, with and without dst.
func TestQueueAcquireAbortOrderedAt(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		for _, withDst := range []bool{false, true} {
			pending, ordered := tb.newReservation(1, 3, 0), tb.newReservation(1, 3, 0)
			ordered.OrderID, ordered.Ordered = tb.ids.Add(1), true
			var b pgx.Batch
			var dp, do *inventory.Acquired
			if withDst {
				dp, do = new(inventory.Acquired), new(inventory.Acquired)
			}
			if err := tb.store.QueueAcquireReservation(&b, pending, dp, pgtx.Abort); err != nil {
				t.Fatal(err)
			}
			if err := tb.store.QueueAcquireReservation(&b, ordered, do, pgtx.Abort); err != nil {
				t.Fatal(err)
			}
			if err := pgtx.RunBatch(tb.ctx, tb.pool, pgtx.Options{}, &b); err != nil {
				t.Fatal(err)
			}
			p, err := tb.store.GetReservation(tb.ctx, tb.pool, pending.ReservationID)
			if err != nil || p.Status != inventory.StatusPendingDB || !p.OrderedAt.IsZero() || p.OrderID != 0 {
				t.Fatalf("dst %v: the pending reservation %+v, %v: want PENDING_DB, no order, no order time", withDst, p, err)
			}
			o, err := tb.store.GetReservation(tb.ctx, tb.pool, ordered.ReservationID)
			if err != nil || o.Status != inventory.StatusOrdered || o.OrderedAt.IsZero() || o.OrderID != ordered.OrderID {
				t.Fatalf("dst %v: the ordered reservation %+v, %v: want ORDERED with its order and time", withDst, o, err)
			}
			if withDst && (!dp.Reservation.OrderedAt.IsZero() || !do.Reservation.OrderedAt.Equal(o.OrderedAt)) {
				t.Fatalf("dst: pending ordered at %v, ordered at %v (stored %v)", dp.Reservation.OrderedAt, do.Reservation.OrderedAt, o.OrderedAt)
			}
		}
	})
}

// pgErrCode is err's SQLSTATE, or "" when it is not a server error.
func pgErrCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
