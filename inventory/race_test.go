package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/racetest"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// unguarded lists the exported methods of *inventory.Store that lock or
// conditionally update nothing, with the reason; every other method has
// races in inventoryRaces (TestRaceTableCoversStore checks both).
var unguarded = map[string]string{
	"Adjustments":      "read without a lock",
	"Audit":            "read without a lock",
	"AuditIncremental": "read without a lock",
	// The watermark's compare-and-set has one outcome to report: a
	// Checkpoint that lost the race changes nothing and returns the
	// watermark it started from (TestCheckpointWaitsForUndecidedLedgerRows
	// holds the wait it does instead of a lock).
	"Checkpoint":        "compare-and-set without a classified refusal",
	"Stock":             "read without a lock",
	"GetBucket":         "read without a lock",
	"GetReservation":    "read without a lock",
	"LedgerByType":      "read without a lock",
	"ReservationLedger": "read without a lock",
	"SaleLog":           "read without a lock",
	"Check":             "reads the catalog",
	// A read of the bucket without a lock, by design: a SOLD_OUT rejection
	// does not wait for the transactions queued on the hot row. It raises
	// unless its own snapshot shows the bucket sold out.
	"QueueCheckSoldOut": "reads without a lock by design; it never waits",
}

// TestRaceTableCoversStore: every exported method of *inventory.Store is
// in the race table or listed as guarding nothing.
func TestRaceTableCoversStore(t *testing.T) {
	t.Parallel()
	racetest.Covered(t, &inventory.Store{}, inventoryRaces(raceBundle{}), unguarded)
}

// TestGuardedRaces runs the race table: for every guarded entry point and
// every state transaction A leaves the row in, B calls the entry point,
// waits for A's lock, and gets the documented outcome for the row as A
// left it (A committed) or as it was (A rolled back); in both modes (the
// statements of Config.Citus too).
func TestGuardedRaces(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, tb testBundle) {
		// The table's setups share tb.ctx: a budget for the whole table
		// (bucket and token races), above setup's two minutes, so that a
		// machine busy with the rest of the suite does not cut it short.
		tb.ctx = pgtest.Context(t, 5*time.Minute)
		racetest.Run(t, inventoryRaces(raceBundle{tb: tb}))
	})
}

// raceBundle is the schema the races share (each uses SKUs and
// reservations of its own); ExpireReservations, which sweeps the whole
// schema, gets a schema of its own.
type raceBundle struct{ tb testBundle }

// sku provisions a fresh SKU with stock units in one bucket.
func (rb raceBundle) sku(t *testing.T, stock int32) (activity, sku int64) {
	t.Helper()
	activity, sku = rb.tb.ids.Add(1), rb.tb.ids.Add(1)
	rb.tb.provision(t, activity, sku, stock, 1)
	return activity, sku
}

// reservation records a fresh reservation on a fresh SKU (stock units)
// and brings it to status: PENDING_DB, or ORDERED with its stock
// allocated, or RELEASE_PENDING from there.
func (rb raceBundle) reservation(t *testing.T, stock int32, status inventory.ReservationStatus) inventory.Reservation {
	t.Helper()
	tb := rb.tb
	act, sku := rb.sku(t, stock)
	nr := tb.newReservation(act, sku, 0)
	var res inventory.Reservation
	err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
		acq, err := tb.store.AcquireReservation(tb.ctx, tx, nr)
		if err != nil || status == inventory.StatusPendingDB {
			res = acq.Reservation
			return err
		}
		order := tb.ids.Add(1)
		if _, err := tb.store.AllocateBucket(tb.ctx, tx, acq.Reservation.Allocation(order, uuid.Nil)); err != nil {
			return err
		}
		for _, to := range []inventory.ReservationStatus{inventory.StatusOrdered, inventory.StatusReleasePending} {
			if res, err = tb.store.TransitionReservation(tb.ctx, tx, inventory.Transition{ReservationID: nr.ReservationID, To: to, OrderID: order}); err != nil || to == status {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != status {
		t.Fatalf("reservation prepared as %s, want %s", res.Status, status)
	}
	return res
}

// tokenReservation records a PENDING_DB reservation on a fresh SKU of
// stock inventory tokens.
func (rb raceBundle) tokenReservation(t *testing.T, stock int32) inventory.Reservation {
	t.Helper()
	tb := rb.tb
	tb.tokens = true
	act, sku := tb.ids.Add(1), tb.ids.Add(1)
	tb.provision(t, act, sku, stock, 1)
	acq, err := tb.acquire(tb.newReservation(act, sku, 0))
	if err != nil {
		t.Fatal(err)
	}
	return acq.Reservation
}

// tokensBeforeLanes provisions a fresh SKU of 4 tokens and sells tokens 2
// and 3 (two claims that start at token 2), leaving 0 and 1 free, then
// records two PENDING_DB reservations (mine and other) whose claims start
// at token 3: every free token is before their lanes' start.
func (rb raceBundle) tokensBeforeLanes(t *testing.T) (act, sku int64, mine, other inventory.NewReservation) {
	t.Helper()
	tb := rb.tb
	tb.tokens = true
	act, sku = tb.ids.Add(1), tb.ids.Add(1)
	tb.provision(t, act, sku, 4, 1)
	for range 2 {
		if _, err := tb.allocateIn(t, tb.laneReservation(t, act, sku, 2)); err != nil {
			t.Fatal(err)
		}
	}
	if n := tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_token")+`
		WHERE activity_id = $1 AND sku_id = $2 AND reservation_id IS NULL AND token_no IN (0, 1)`, act, sku); n != 2 {
		t.Fatalf("set-up: %d of tokens 0 and 1 free, want both", n)
	}
	mine, other = tb.laneReservation(t, act, sku, 3), tb.laneReservation(t, act, sku, 3)
	for _, r := range []inventory.NewReservation{mine, other} {
		if _, err := tb.acquire(r); err != nil {
			t.Fatal(err)
		}
	}
	return act, sku, mine, other
}

func (rb raceBundle) get(t *testing.T, id uuid.UUID) inventory.Reservation {
	t.Helper()
	r, err := rb.tb.store.GetReservation(rb.tb.ctx, rb.tb.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (rb raceBundle) bucket(t *testing.T, act, sku int64) inventory.Bucket {
	t.Helper()
	b, err := rb.tb.store.GetBucket(rb.tb.ctx, rb.tb.pool, act, sku, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// transitionTo is A (or B) moving reservation id to status to.
func (rb raceBundle) transitionTo(id uuid.UUID, to inventory.ReservationStatus) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := rb.tb.store.TransitionReservation(ctx, tx, inventory.Transition{ReservationID: id, To: to, OrderID: rb.tb.ids.Add(1), FailureCode: "RACE"})
		return err
	}
}

// sendBatch sends b on tx and returns the first callback's error.
func sendBatch(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	return tx.SendBatch(ctx, b).Close()
}

// wantRefused checks a *TransitionError for the row as it is stored now:
// its sentinel, its Current and its row (status and version).
func (rb raceBundle) wantRefused(t *testing.T, err error, id uuid.UUID, target inventory.ReservationStatus) {
	t.Helper()
	now := rb.get(t, id)
	want := inventory.ErrIllegalTransition
	if now.Status == target {
		want = inventory.ErrAlreadyInState
	}
	var te *inventory.Error
	if !errors.As(err, &te) || !errors.Is(err, want) {
		t.Fatalf("err = %v, want a *TransitionError matching %v (row now %s)", err, want, now.Status)
	}
	if te.Current != now.Status || te.Reservation.Status != now.Status || te.Reservation.Version != now.Version {
		t.Fatalf("refusal reports %s (row version %d), the row is %s (version %d): classified on a stale row",
			te.Current, te.Reservation.Version, now.Status, now.Version)
	}
}

// transitionRaces: B asks for target from start while A moves the row to
// each status it can reach from start; the outcome follows AllowedFrom
// on the row as A left it. queued sends B's call through
// QueueTransitionReservation, given on: with pgtx.Abort a refusal raises
// its sentinel and leaves the row as A left it.
func (rb raceBundle) transitionRaces(start, target inventory.ReservationStatus, queued bool, on pgtx.OnRefusal) []racetest.Race {
	method := "TransitionReservation"
	if queued {
		method = "QueueTransitionReservation"
	}
	abort := queued && on == pgtx.Abort
	var races []racetest.Race
	for _, aTo := range inventory.ReservationStatuses() {
		if !inventory.CanTransition(start, aTo) {
			continue
		}
		races = append(races, racetest.Race{
			Method: method, State: fmt.Sprintf("%s_to_%s_asked_%s", start, aTo, target) + abortSuffix(abort),
			Setup: func(t *testing.T) racetest.Round {
				r := rb.reservation(t, 5, start)
				return racetest.Round{
					Pool: rb.tb.pool,
					Hold: rb.transitionTo(r.ReservationID, aTo),
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) {
						tr := inventory.Transition{ReservationID: r.ReservationID, To: target, OrderID: rb.tb.ids.Add(1)}
						if !queued {
							return rb.tb.store.TransitionReservation(ctx, tx, tr)
						}
						var b pgx.Batch
						var dst inventory.Reservation
						if err := rb.tb.store.QueueTransitionReservation(&b, tr, &dst, on); err != nil {
							return nil, err
						}
						err := sendBatch(ctx, tx, &b)
						return dst, err
					},
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						left := start
						if end == racetest.Commit {
							left = aTo
						}
						if left != target && inventory.CanTransition(left, target) {
							if err != nil || got.(inventory.Reservation).Status != target {
								t.Fatalf("from %s to %s: %+v, %v; want moved", left, target, got, err)
							}
							return
						}
						if abort {
							want := inventory.ErrIllegalTransition
							if left == target {
								want = inventory.ErrAlreadyInState
							}
							if now := rb.get(t, r.ReservationID); !errors.Is(err, want) || now.Status != left {
								t.Fatalf("from %s to %s: %v (row now %s), want the refusal %v raised", left, target, err, now.Status, want)
							}
							return
						}
						rb.wantRefused(t, err, r.ReservationID, target)
					},
				}
			},
		})
	}
	return races
}

// compensationRaces: B counts a failure (MaxFailures 2) of a
// RELEASE_PENDING reservation while A escalates it, releases it, or counts
// a failure itself.
func (rb raceBundle) compensationRaces() []racetest.Race {
	type state struct {
		name string
		hold func(uuid.UUID) func(context.Context, pgx.Tx) error
		// after A commits: B's failures (0: refused) and escalation
		failures  int
		escalated bool
	}
	record := func(max int) func(uuid.UUID) func(context.Context, pgx.Tx) error {
		return func(id uuid.UUID) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				_, err := rb.tb.store.RecordCompensationFailure(ctx, tx, inventory.CompensationFailure{ReservationID: id, MaxFailures: max})
				return err
			}
		}
	}
	states := []state{
		{name: "MANUAL_REQUIRED_by_escalation", hold: record(1)},
		{name: "MANUAL_REQUIRED", hold: func(id uuid.UUID) func(context.Context, pgx.Tx) error {
			return rb.transitionTo(id, inventory.StatusManualRequired)
		}},
		{name: "RELEASED", hold: func(id uuid.UUID) func(context.Context, pgx.Tx) error {
			return rb.transitionTo(id, inventory.StatusReleased)
		}},
		{name: "RELEASE_PENDING_one_failure", hold: record(2), failures: 2, escalated: true},
	}
	var races []racetest.Race
	for _, st := range states {
		races = append(races, racetest.Race{
			Method: "RecordCompensationFailure", State: st.name,
			Setup: func(t *testing.T) racetest.Round {
				r := rb.reservation(t, 5, inventory.StatusReleasePending)
				return racetest.Round{
					Pool: rb.tb.pool,
					Hold: st.hold(r.ReservationID),
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) {
						return rb.tb.store.RecordCompensationFailure(ctx, tx, inventory.CompensationFailure{ReservationID: r.ReservationID, MaxFailures: 2})
					},
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						failures, escalated := st.failures, st.escalated
						if end == racetest.Rollback {
							failures, escalated = 1, false
						}
						if failures == 0 {
							rb.wantRefused(t, err, r.ReservationID, inventory.StatusManualRequired)
							return
						}
						rec, _ := got.(inventory.CompensationRecorded)
						if err != nil || rec.Failures != failures || rec.Escalated != escalated {
							t.Fatalf("got %+v, %v; want failures %d, escalated %v", rec, err, failures, escalated)
						}
						if now := rb.get(t, r.ReservationID); now.Version != rec.Reservation.Version || now.Status != rec.Reservation.Status {
							t.Fatalf("returned row %s v%d, stored %s v%d", rec.Reservation.Status, rec.Reservation.Version, now.Status, now.Version)
						}
					},
				}
			},
		})
	}
	return races
}

// inventoryRaces is the race table of package inventory.
func inventoryRaces(rb raceBundle) []racetest.Race {
	tb := rb.tb
	var races []racetest.Race
	races = append(races, rb.transitionRaces(inventory.StatusPendingDB, inventory.StatusOrdered, false, pgtx.Return)...)
	races = append(races, rb.transitionRaces(inventory.StatusOrdered, inventory.StatusReleased, false, pgtx.Return)...)
	races = append(races, rb.transitionRaces(inventory.StatusReleasePending, inventory.StatusReleased, false, pgtx.Return)...)
	races = append(races, rb.transitionRaces(inventory.StatusPendingDB, inventory.StatusRejected, true, pgtx.Return)...)
	races = append(races, rb.transitionRaces(inventory.StatusPendingDB, inventory.StatusRejected, true, pgtx.Abort)...)
	races = append(races, rb.compensationRaces()...)

	// AcquireReservation: A inserts the same reservation (B waits on the
	// primary key), or A rejects the existing one (B waits on its lock).
	acquire := func(queued bool) func(ctx context.Context, tx pgx.Tx, nr inventory.NewReservation) (inventory.Acquired, error) {
		return func(ctx context.Context, tx pgx.Tx, nr inventory.NewReservation) (inventory.Acquired, error) {
			if !queued {
				return tb.store.AcquireReservation(ctx, tx, nr)
			}
			var b pgx.Batch
			var dst inventory.Acquired
			if err := tb.store.QueueAcquireReservation(&b, nr, &dst, pgtx.Return); err != nil {
				return dst, err
			}
			return dst, sendBatch(ctx, tx, &b)
		}
	}
	for _, queued := range []bool{false, true} {
		method := "AcquireReservation"
		if queued {
			method = "QueueAcquireReservation"
		}
		call := acquire(queued)
		races = append(races, racetest.Race{
			Method: method, State: "inserted_PENDING_DB",
			Setup: func(t *testing.T) racetest.Round {
				act, sku := rb.sku(t, 5)
				nr := tb.newReservation(act, sku, 0)
				return racetest.Round{
					Pool: tb.pool,
					Hold: func(ctx context.Context, tx pgx.Tx) error {
						_, err := tb.store.AcquireReservation(ctx, tx, nr)
						return err
					},
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, tx, nr) },
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						acq, _ := got.(inventory.Acquired)
						// After A's commit B finds A's row (ErrConcurrentInsert
						// is what the queued form reports for its one run: run
						// it again); after A's rollback B inserts it.
						if queued && end == racetest.Commit && errors.Is(err, inventory.ErrConcurrentInsert) {
							return
						}
						if err != nil || acq.Created != (end == racetest.Rollback) || acq.Reservation.Status != inventory.StatusPendingDB {
							t.Fatalf("got %+v, %v; want Created %v", acq, err, end == racetest.Rollback)
						}
					},
				}
			},
		})
		races = append(races, racetest.Race{
			Method: method, State: "PENDING_DB_to_REJECTED",
			Setup: func(t *testing.T) racetest.Round {
				act, sku := rb.sku(t, 5)
				nr := tb.newReservation(act, sku, 0)
				if _, err := tb.acquire(nr); err != nil {
					t.Fatal(err)
				}
				return racetest.Round{
					Pool: tb.pool,
					Hold: rb.transitionTo(nr.ReservationID, inventory.StatusRejected),
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, tx, nr) },
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						acq, _ := got.(inventory.Acquired)
						now := rb.get(t, nr.ReservationID)
						if err != nil || acq.Created || acq.Reservation.Status != now.Status || acq.Reservation.Version != now.Version {
							t.Fatalf("got %+v, %v; want the row as stored: %s v%d", acq, err, now.Status, now.Version)
						}
					},
				}
			},
		})
	}

	// The pgtx.Abort inserts: A inserts the same reservation; B waits on the
	// primary key, then raises (A committed) or inserts (A rolled back).
	for _, rejected := range []bool{false, true} {
		method := "QueueAcquireReservation"
		races = append(races, racetest.Race{
			Method: method, State: "inserted_PENDING_DB" + abortSuffix(true) + map[bool]string{true: "_rejected"}[rejected],
			Setup: func(t *testing.T) racetest.Round {
				act, sku := rb.sku(t, 5)
				nr := tb.newReservation(act, sku, 0)
				return racetest.Round{
					Pool: tb.pool,
					Hold: func(ctx context.Context, tx pgx.Tx) error {
						_, err := tb.store.AcquireReservation(ctx, tx, nr)
						return err
					},
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) {
						var b pgx.Batch
						var err error
						if rejected {
							rej := nr
							rej.FailureCode = "SOLD_OUT"
							err = tb.store.QueueAcquireReservation(&b, rej, nil, pgtx.Abort)
						} else {
							err = tb.store.QueueAcquireReservation(&b, nr, nil, pgtx.Abort)
						}
						if err != nil {
							return nil, err
						}
						return nil, sendBatch(ctx, tx, &b)
					},
					Check: func(t *testing.T, end racetest.End, _ any, err error) {
						if end == racetest.Commit {
							if c, ok := pgtx.UniqueViolationOf(err); !ok || c != "pk_inventory_reservation" && c != "inventory_reservation_pkey" {
								t.Fatalf("err = %v (constraint %q), want the primary key's unique_violation", err, c)
							}
							return
						}
						want := inventory.StatusPendingDB
						if rejected {
							want = inventory.StatusRejected
						}
						if err != nil || rb.get(t, nr.ReservationID).Status != want {
							t.Fatalf("err = %v, want the reservation inserted as %s", err, want)
						}
					},
				}
			},
		})
	}

	// AllocateBucket and its twins: A takes the last unit for another
	// reservation (B finds the bucket sold out after the wait), or A
	// allocates the same reservation (B is a concurrent duplicate).
	type allocCall func(ctx context.Context, tx pgx.Tx, a inventory.Allocation) (inventory.Allocated, error)
	allocs := map[string]allocCall{
		"AllocateBucket": func(ctx context.Context, tx pgx.Tx, a inventory.Allocation) (inventory.Allocated, error) {
			return tb.store.AllocateBucket(ctx, tx, a)
		},
		"QueueAllocateBucket": func(ctx context.Context, tx pgx.Tx, a inventory.Allocation) (inventory.Allocated, error) {
			var b pgx.Batch
			var dst inventory.Allocated
			if err := tb.store.QueueAllocateBucket(&b, a, &dst, pgtx.Return); err != nil {
				return dst, err
			}
			return dst, sendBatch(ctx, tx, &b)
		},
		"QueueAllocateBucket+Abort": func(ctx context.Context, tx pgx.Tx, a inventory.Allocation) (inventory.Allocated, error) {
			var b pgx.Batch
			var dst inventory.Allocated
			if err := tb.store.QueueAllocateBucket(&b, a, &dst, pgtx.Abort); err != nil {
				return dst, err
			}
			return dst, sendBatch(ctx, tx, &b)
		},
	}
	for key, call := range allocs {
		method, orAbort := strings.CutSuffix(key, "+Abort")
		races = append(races, racetest.Race{
			Method: method, State: "last_unit_taken" + abortSuffix(orAbort),
			Setup: func(t *testing.T) racetest.Round {
				mine := rb.reservation(t, 1, inventory.StatusPendingDB)
				other := tb.newReservation(mine.ActivityID, mine.SKUID, 0)
				if _, err := tb.acquire(other); err != nil {
					t.Fatal(err)
				}
				return racetest.Round{
					Pool: tb.pool,
					Hold: func(ctx context.Context, tx pgx.Tx) error {
						_, err := tb.store.AllocateBucket(ctx, tx, r2ToAlloc(other))
						return err
					},
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, tx, mine.Allocation(0, uuid.Nil)) },
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						switch {
						case end == racetest.Rollback:
							if err != nil || got.(inventory.Allocated).AfterAvailable != 0 {
								t.Fatalf("got %+v, %v; want the unit allocated", got, err)
							}
						case orAbort:
							if !errors.Is(err, inventory.ErrSoldOut) {
								t.Fatalf("err = %v, want the allocation refused as sold out", err)
							}
						default:
							var so *inventory.Error
							if !errors.As(err, &so) || so.Available != 0 {
								t.Fatalf("err = %v, want *SoldOutError with the available stock A left (0)", err)
							}
						}
					},
				}
			},
		})
		for _, stock := range []int32{1, 3} {
			races = append(races, racetest.Race{
				Method: method, State: fmt.Sprintf("same_reservation_allocated_stock_%d", stock) + abortSuffix(orAbort),
				Setup: func(t *testing.T) racetest.Round {
					mine := rb.reservation(t, stock, inventory.StatusPendingDB)
					return racetest.Round{
						Pool: tb.pool,
						Hold: func(ctx context.Context, tx pgx.Tx) error {
							_, err := tb.store.AllocateBucket(ctx, tx, mine.Allocation(0, uuid.Nil))
							return err
						},
						Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, tx, mine.Allocation(0, uuid.Nil)) },
						Check: func(t *testing.T, end racetest.End, got any, err error) {
							switch {
							case end == racetest.Rollback:
								if err != nil {
									t.Fatalf("err = %v, want the unit allocated", err)
								}
							case orAbort && stock == 1:
								// The duplicate took the last unit: the decrement
								// refuses before the ledger insert meets the key.
								// Either way the transaction aborts and nothing is
								// written; the general path classifies.
								if c, ok := pgtx.UniqueViolationOf(err); !errors.Is(err, inventory.ErrSoldOut) && (!ok || c != "uq_inventory_ledger_idempotency") {
									t.Fatalf("err = %v, want the transaction aborted", err)
								}
							case orAbort:
								if c, ok := pgtx.UniqueViolationOf(err); !ok || c != "uq_inventory_ledger_idempotency" {
									t.Fatalf("err = %v, want the ledger key's unique_violation", err)
								}
							case !errors.Is(err, inventory.ErrAlreadyApplied):
								t.Fatalf("err = %v, want ErrAlreadyApplied (a concurrent duplicate, never sold out)", err)
							}
							if b := rb.bucket(t, mine.ActivityID, mine.SKUID); b.Allocated != 1 {
								t.Fatalf("bucket %+v: allocated %d, want 1", b, b.Allocated)
							}
						},
					}
				},
			})
		}
	}

	// The same entry points on a token SKU (SKU.Tokens), the one-batch
	// form with pgtx.Abort too for the first race. A claims the last token
	// for another reservation: B passes it over (SKIP LOCKED, in the claim
	// from its lane's start) and is refused as sold out while A still
	// holds it, whatever A then does; the free count it reports is read
	// with a snapshot of its own, in which A's token is still free. A
	// allocates the same reservation: B waits for A's lock on the
	// reservation and is then a concurrent duplicate, never sold out.
	for key, call := range allocs {
		method, orAbort := strings.CutSuffix(key, "+Abort")
		races = append(races, racetest.Race{
			Method: method, State: "last_token_taken" + abortSuffix(orAbort), Skips: true,
			Setup: func(t *testing.T) racetest.Round {
				mine := rb.tokenReservation(t, 1)
				other := tb.newReservation(mine.ActivityID, mine.SKUID, 0)
				if _, err := tb.acquire(other); err != nil {
					t.Fatal(err)
				}
				return racetest.Round{
					Pool: tb.pool,
					Hold: func(ctx context.Context, tx pgx.Tx) error {
						_, err := tb.store.AllocateBucket(ctx, tx, r2ToAlloc(other))
						return err
					},
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, tx, mine.Allocation(0, uuid.Nil)) },
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						if orAbort {
							// The aborting form's refusal names the condition
							// only (no count: the statement raised it).
							if !errors.Is(err, inventory.ErrSoldOut) {
								t.Fatalf("got %+v, %v; want sold out", got, err)
							}
						} else if so := (*inventory.Error)(nil); !errors.As(err, &so) || !errors.Is(err, inventory.ErrSoldOut) || so.Available != 1 {
							t.Fatalf("got %+v, %v; want sold out, the locked token counted as free", got, err)
						}
						if n := tb.tokensHeld(t, mine.ActivityID, mine.SKUID, &mine.ReservationID); n != 0 {
							t.Fatalf("A %s: B's reservation holds %d tokens, want none", end, n)
						}
					},
				}
			},
		})
	}
	for _, method := range []string{"AllocateBucket", "QueueAllocateBucket"} {
		call := allocs[method]
		for _, stock := range []int32{1, 3} {
			races = append(races, racetest.Race{
				Method: method, State: fmt.Sprintf("same_reservation_allocated_tokens_%d", stock),
				Setup: func(t *testing.T) racetest.Round {
					mine := rb.tokenReservation(t, stock)
					return racetest.Round{
						Pool: tb.pool,
						Hold: func(ctx context.Context, tx pgx.Tx) error {
							_, err := tb.store.AllocateBucket(ctx, tx, mine.Allocation(0, uuid.Nil))
							return err
						},
						Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, tx, mine.Allocation(0, uuid.Nil)) },
						Check: func(t *testing.T, end racetest.End, got any, err error) {
							if end == racetest.Rollback && err != nil || end == racetest.Commit && !errors.Is(err, inventory.ErrAlreadyApplied) {
								t.Fatalf("A %s: err = %v; want allocated after a rollback, ErrAlreadyApplied after a commit", end, err)
							}
							if b := rb.bucket(t, mine.ActivityID, mine.SKUID); b.Allocated != 1 || b.Available != stock-1 {
								t.Fatalf("tokens %+v: want 1 claimed", b)
							}
						},
					}
				},
			})
		}
	}

	// A and B both start their claim past the last free token of a token
	// SKU, so both take the tokens before their lanes' start: A holds the
	// first free one, B passes it over (SKIP LOCKED) and claims the next
	// one while A still holds it, whatever A then does; it never waits for
	// A and is never sold out with a token free. Every form, the one-batch
	// one with pgtx.Abort too (its statements are decrement_then_raise
	// and, with Config.Citus, decrement_abort).
	for key, call := range allocs {
		method, orAbort := strings.CutSuffix(key, "+Abort")
		races = append(races, racetest.Race{
			Method: method, State: "token_before_lane_taken" + abortSuffix(orAbort), Skips: true,
			Setup: func(t *testing.T) racetest.Round {
				act, sku, mine, other := rb.tokensBeforeLanes(t)
				return racetest.Round{
					Pool: tb.pool,
					Hold: func(ctx context.Context, tx pgx.Tx) error {
						_, err := tb.store.AllocateBucket(ctx, tx, r2ToAlloc(other))
						return err
					},
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, tx, r2ToAlloc(mine)) },
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						if err != nil {
							t.Fatalf("A %s: got %+v, %v; want the free token A does not hold", end, got, err)
						}
						held := func(no int, id uuid.UUID) int64 {
							return tb.count(t, `SELECT count(*) FROM `+tb.table("inventory_token")+`
								WHERE activity_id = $1 AND sku_id = $2 AND token_no = $3 AND reservation_id = $4`, act, sku, no, id)
						}
						if held(1, mine.ReservationID) != 1 {
							t.Fatalf("A %s: token 1 is not B's", end)
						}
						want := map[racetest.End]int64{racetest.Commit: 1, racetest.Rollback: 0}[end]
						if got := held(0, other.ReservationID); got != want {
							t.Fatalf("A %s: token 0 held by A's reservation: %d, want %d", end, got, want)
						}
					},
				}
			},
		})
	}

	// A rejects the reservation of a token SKU; B allocates it. The token
	// claim of these forms locks the reservation (allocate's rlk), so B
	// waits for A and decides, and reports, on the reservation as A left
	// it: after A's commit no longer PENDING_DB, a mismatch that claims
	// nothing (before rlk, the refusal read the snapshot's PENDING_DB and
	// called it sold out with two tokens free); after A's rollback,
	// allocated. The bucket path and the forms with pgtx.Abort lock no
	// reservation: holding its status still is the caller's business (the
	// reservation row lock AcquireReservation takes in the order
	// transaction), as AllocateBucket documents.
	for _, method := range []string{"AllocateBucket", "QueueAllocateBucket"} {
		call := allocs[method]
		races = append(races, racetest.Race{
			Method: method, State: "reservation_rejected_tokens",
			Setup: func(t *testing.T) racetest.Round {
				mine := rb.tokenReservation(t, 2)
				return racetest.Round{
					Pool: tb.pool,
					Hold: rb.transitionTo(mine.ReservationID, inventory.StatusRejected),
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, tx, mine.Allocation(0, uuid.Nil)) },
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						claimed := tb.tokensHeld(t, mine.ActivityID, mine.SKUID, &mine.ReservationID)
						switch {
						case end == racetest.Rollback:
							if err != nil || claimed != 1 {
								t.Fatalf("A rolled back: err = %v, %d tokens claimed; want allocated, 1", err, claimed)
							}
						case !errors.Is(err, inventory.ErrAllocationMismatch) || claimed != 0:
							t.Fatalf("A rejected the reservation: err = %v, %d tokens claimed; want ErrAllocationMismatch, none", err, claimed)
						}
					},
				}
			},
		})
	}

	// ReleaseStock and its twins: A releases the same reservation (B is a
	// concurrent duplicate).
	type releaseCall func(ctx context.Context, tx pgx.Tx, r inventory.Reservation) (inventory.Allocated, error)
	releases := map[string]releaseCall{
		"ReleaseStock": func(ctx context.Context, tx pgx.Tx, r inventory.Reservation) (inventory.Allocated, error) {
			return tb.store.ReleaseStock(ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}})
		},
		"QueueReleaseStock": func(ctx context.Context, tx pgx.Tx, r inventory.Reservation) (inventory.Allocated, error) {
			var b pgx.Batch
			var dst inventory.Allocated
			if err := tb.store.QueueReleaseStock(&b, inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}}, &dst, pgtx.Return); err != nil {
				return dst, err
			}
			return dst, sendBatch(ctx, tx, &b)
		},
		"QueueReleaseStock+Abort": func(ctx context.Context, tx pgx.Tx, r inventory.Reservation) (inventory.Allocated, error) {
			var b pgx.Batch
			var dst inventory.Allocated
			if err := tb.store.QueueReleaseStock(&b, inventory.StockRelease{Request: r.Allocation(r.OrderID, uuid.Nil).Request}, &dst, pgtx.Abort); err != nil {
				return dst, err
			}
			return dst, sendBatch(ctx, tx, &b)
		},
	}
	for key, call := range releases {
		method, orAbort := strings.CutSuffix(key, "+Abort")
		races = append(races, racetest.Race{
			Method: method, State: "same_reservation_released" + abortSuffix(orAbort),
			Setup: func(t *testing.T) racetest.Round {
				r := rb.reservation(t, 3, inventory.StatusOrdered)
				return racetest.Round{
					Pool: tb.pool,
					Hold: func(ctx context.Context, tx pgx.Tx) error {
						_, err := tb.store.ReleaseStock(ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}})
						return err
					},
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, tx, r) },
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						switch {
						case end == racetest.Rollback:
							if err != nil || got.(inventory.Allocated).AfterAvailable != 3 {
								t.Fatalf("got %+v, %v; want released (3 available)", got, err)
							}
						case orAbort:
							if c, ok := pgtx.UniqueViolationOf(err); !ok || c != "uq_inventory_ledger_idempotency" {
								t.Fatalf("err = %v, want the ledger key's unique_violation", err)
							}
						case !errors.Is(err, inventory.ErrAlreadyApplied):
							t.Fatalf("err = %v, want ErrAlreadyApplied (a concurrent duplicate, never inconsistent)", err)
						}
						if b := rb.bucket(t, r.ActivityID, r.SKUID); b.Available != 3 || b.Allocated != 0 {
							t.Fatalf("bucket %+v, want 3 available and 0 allocated", b)
						}
					},
				}
			},
		})
	}
	// The same on a token SKU: B waits for A's lock on the reservation's
	// token (the one-batch form serves bucket stock only).
	for _, method := range []string{"ReleaseStock", "QueueReleaseStock"} {
		call := releases[method]
		races = append(races, racetest.Race{
			Method: method, State: "same_reservation_released_tokens",
			Setup: func(t *testing.T) racetest.Round {
				r := rb.tokenReservation(t, 3)
				if _, err := rb.tb.allocateIn(t, rb.tb.newReservation(r.ActivityID, r.SKUID, 0)); err != nil {
					t.Fatal(err)
				}
				err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
					_, err := tb.store.AllocateBucket(tb.ctx, tx, r.Allocation(0, uuid.Nil))
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				return racetest.Round{
					Pool: tb.pool,
					Hold: func(ctx context.Context, tx pgx.Tx) error {
						_, err := tb.store.ReleaseStock(ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}})
						return err
					},
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, tx, r) },
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						if end == racetest.Rollback && err != nil || end == racetest.Commit && !errors.Is(err, inventory.ErrAlreadyApplied) {
							t.Fatalf("A %s: got %+v, %v; want released after a rollback, ErrAlreadyApplied after a commit", end, got, err)
						}
						if b := rb.bucket(t, r.ActivityID, r.SKUID); b.Available != 2 || b.Allocated != 1 {
							t.Fatalf("tokens %+v, want 2 free and 1 claimed (the other reservation's)", b)
						}
					},
				}
			},
		})
	}

	// SetSaleStatus: A ends or pauses the sale; B decides on the status A
	// left.
	for _, st := range []struct{ a, b inventory.SaleStatus }{
		{inventory.SaleEnded, inventory.SalePaused},
		{inventory.SalePaused, inventory.SaleOnSale},
	} {
		change := func(act, sku int64, to inventory.SaleStatus) inventory.SaleChange {
			return inventory.SaleChange{ActivityID: act, SKUID: sku, To: to, Operator: "race", Reason: "race"}
		}
		races = append(races, racetest.Race{
			Method: "SetSaleStatus", State: st.a.String() + "_asked_" + st.b.String(),
			Setup: func(t *testing.T) racetest.Round {
				act, sku := rb.sku(t, 5)
				return racetest.Round{
					Pool: tb.pool,
					Hold: func(ctx context.Context, tx pgx.Tx) error {
						_, err := tb.store.SetSaleStatus(ctx, tx, change(act, sku, st.a))
						return err
					},
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) {
						return tb.store.SetSaleStatus(ctx, tx, change(act, sku, st.b))
					},
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						from, version := inventory.SaleOnSale, int64(1)
						if end == racetest.Commit {
							from, version = st.a, 2
						}
						if !inventory.CanChangeSale(from, st.b) {
							var ce *inventory.Error
							if !errors.As(err, &ce) || ce.From != from {
								t.Fatalf("err = %v, want *SaleChangeError from %s", err, from)
							}
							return
						}
						if c, _ := got.(inventory.SaleChanged); err != nil || c.From != from || c.Version != version {
							t.Fatalf("got %+v, %v; want from %s, version %d", got, err, from, version)
						}
					},
				}
			},
		})
	}

	// AdjustStock: A applies the same approval (B is a concurrent
	// duplicate), or A takes the last unit (B's negative delta finds the
	// bucket empty).
	adjust := func(act, sku int64, delta int32) inventory.Adjustment {
		return inventory.Adjustment{ActivityID: act, SKUID: sku, Delta: delta, Operator: "ops", ApprovalRef: fmt.Sprintf("T-%d-%d", act, delta), Reason: "RACE"}
	}
	races = append(races, racetest.Race{
		Method: "AdjustStock", State: "same_approval_applied",
		Setup: func(t *testing.T) racetest.Round {
			act, sku := rb.sku(t, 5)
			return racetest.Round{
				Pool: tb.pool,
				Hold: func(ctx context.Context, tx pgx.Tx) error {
					_, err := tb.store.AdjustStock(ctx, tx, adjust(act, sku, 2))
					return err
				},
				Call: func(ctx context.Context, tx pgx.Tx) (any, error) {
					return tb.store.AdjustStock(ctx, tx, adjust(act, sku, 2))
				},
				Check: func(t *testing.T, end racetest.End, got any, err error) {
					if end == racetest.Commit && !errors.Is(err, inventory.ErrAlreadyApplied) {
						t.Fatalf("err = %v, want ErrAlreadyApplied", err)
					}
					if end == racetest.Rollback && err != nil {
						t.Fatalf("err = %v, want applied", err)
					}
					if b := rb.bucket(t, act, sku); b.Available != 7 {
						t.Fatalf("bucket %+v, want 7 available (applied once)", b)
					}
				},
			}
		},
	})
	races = append(races, racetest.Race{
		Method: "AdjustStock", State: "last_unit_allocated",
		Setup: func(t *testing.T) racetest.Round {
			r := rb.reservation(t, 1, inventory.StatusPendingDB)
			return racetest.Round{
				Pool: tb.pool,
				Hold: func(ctx context.Context, tx pgx.Tx) error {
					_, err := tb.store.AllocateBucket(ctx, tx, r.Allocation(0, uuid.Nil))
					return err
				},
				Call: func(ctx context.Context, tx pgx.Tx) (any, error) {
					return tb.store.AdjustStock(ctx, tx, adjust(r.ActivityID, r.SKUID, -1))
				},
				Check: func(t *testing.T, end racetest.End, got any, err error) {
					var so *inventory.Error
					if end == racetest.Commit && (!errors.As(err, &so) || so.Available != 0) {
						t.Fatalf("err = %v, want *SoldOutError with the available stock A left (0)", err)
					}
					if end == racetest.Rollback && err != nil {
						t.Fatalf("err = %v, want the unit removed", err)
					}
				},
			}
		},
	})

	// Rebalance: A allocates from bucket 0; B computes the moves from the
	// counters A left.
	races = append(races, racetest.Race{
		Method: "Rebalance", State: "bucket_0_allocated",
		Setup: func(t *testing.T) racetest.Round {
			act, sku := tb.ids.Add(1), tb.ids.Add(1)
			tb.provision(t, act, sku, 4, 2)
			r := tb.newReservation(act, sku, 0)
			r.Quantity = 2
			if _, err := tb.acquire(r); err != nil {
				t.Fatal(err)
			}
			return racetest.Round{
				Pool: tb.pool,
				Hold: func(ctx context.Context, tx pgx.Tx) error {
					_, err := tb.store.AllocateBucket(ctx, tx, r2ToAlloc(r))
					return err
				},
				Call: func(ctx context.Context, tx pgx.Tx) (any, error) {
					return tb.store.Rebalance(ctx, tx, inventory.RebalanceRequest{ActivityID: act, SKUID: sku})
				},
				Check: func(t *testing.T, end racetest.End, got any, err error) {
					available, moved := int64(4), int64(0)
					if end == racetest.Commit {
						available, moved = 2, 1 // 0 and 2 left: one unit moves
					}
					if rb, _ := got.(inventory.Rebalanced); err != nil || rb.Available != available || rb.Moved != moved {
						t.Fatalf("got %+v, %v; want available %d, moved %d", got, err, available, moved)
					}
					bs, err := inventory.BucketsOf(tb.store, tb.ctx, tb.pool, act, sku)
					if err != nil || len(bs) != 2 || bs[0].Available+bs[1].Available != int32(available) ||
						bs[0].Available-bs[1].Available > 1 || bs[1].Available-bs[0].Available > 1 {
						t.Fatalf("buckets %+v, %v; want %d available, even", bs, err, available)
					}
				},
			}
		},
	})

	// Provision: A provisions the same SKU (B waits on the key): the same
	// split is already provisioned, another one a conflict.
	for _, same := range []bool{true, false} {
		state := "same_split_provisioned"
		if !same {
			state = "other_split_provisioned"
		}
		races = append(races, racetest.Race{
			Method: "Provision", State: state,
			Setup: func(t *testing.T) racetest.Round {
				k := inventory.SKU{ActivityID: tb.ids.Add(1), SKUID: tb.ids.Add(1), Stock: 10, Buckets: 2}
				aK := k
				if !same {
					aK.Stock = 20
				}
				return racetest.Round{
					Pool: tb.pool,
					Hold: func(ctx context.Context, tx pgx.Tx) error { _, err := tb.store.Provision(ctx, tx, aK); return err },
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return tb.store.Provision(ctx, tx, k) },
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						p, _ := got.(inventory.Provisioned)
						switch {
						case end == racetest.Rollback:
							if err != nil || !p.Created {
								t.Fatalf("got %+v, %v; want created", p, err)
							}
						case same:
							if err != nil || p.Created {
								t.Fatalf("got %+v, %v; want already provisioned", p, err)
							}
						case !errors.Is(err, inventory.ErrProvisionConflict):
							t.Fatalf("err = %v, want ErrProvisionConflict", err)
						}
					},
				}
			},
		})
	}

	// ExpireReservations passes over a reservation locked by an order
	// transaction (SKIP LOCKED): B returns at once with the other one.
	races = append(races, racetest.Race{
		Method: "ExpireReservations", State: "PENDING_DB_locked", Skips: true,
		Setup: func(t *testing.T) racetest.Round {
			own := setup(t) // the sweep sees the whole schema
			own.provision(t, 1, 1, 10, 1)
			locked, free := own.pastDue(t), own.pastDue(t)
			return racetest.Round{
				Pool: own.pool,
				Hold: func(ctx context.Context, tx pgx.Tx) error {
					_, err := own.store.TransitionReservation(ctx, tx, inventory.Transition{ReservationID: locked.ReservationID, To: inventory.StatusOrdered, OrderID: 7})
					return err
				},
				Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return own.store.ExpireReservations(ctx, tx, 10) },
				Check: func(t *testing.T, end racetest.End, got any, err error) {
					rs, _ := got.([]inventory.Reservation)
					if err != nil || len(rs) != 1 || rs[0].ReservationID != free.ReservationID {
						t.Fatalf("got %+v, %v; want only the unlocked reservation expired", rs, err)
					}
				},
			}
		},
	})
	return races
}

// abortSuffix marks the state of a race of a queued form given pgtx.Abort.
func abortSuffix(abort bool) string {
	if abort {
		return "_abort"
	}
	return ""
}
