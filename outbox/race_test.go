package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/racetest"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// unguarded lists the exported methods of *outbox.Store that lock or
// conditionally update nothing, with the reason; every other method has
// races in outboxRaces (TestRaceTableCoversStore checks both).
var unguarded = map[string]string{
	"EventsByStatus": "read without a lock",
	"Schema":         "returns the configured schema name",
	"Check":          "reads the catalog",
	"Stats":          "read without a lock",
	"Backlog":        "read without a lock",
}

// TestRaceTableCoversStore: every exported method of *outbox.Store is in the
// race table or listed as guarding nothing.
func TestRaceTableCoversStore(t *testing.T) {
	t.Parallel()
	racetest.Covered(t, &outbox.Store{}, outboxRaces(nil, false), unguarded)
}

// TestGuardedRaces runs the race table: lease outcomes decided after
// waiting for a concurrent writer of the event, enqueues waiting for a
// concurrent event with the same dedup key, and the sweeps that pass
// locked rows over.
func TestGuardedRaces(t *testing.T) {
	t.Parallel()
	for _, citus := range []bool{false, true} {
		name := "default"
		if citus {
			name = "citus"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			racetest.Run(t, outboxRaces(setup(t, outbox.Config{Citus: citus}), citus))
		})
	}
}

// leased returns a schema of its own (a claim sees every event of its
// schema) holding one event claimed by "relay-1", and the claim.
func leased(t *testing.T, citus bool) (*bundle, outbox.Claim) {
	t.Helper()
	b := setup(t, outbox.Config{Citus: citus})
	b.enqueue(t, event(1))
	c := b.claim(t, "relay-1", 10)
	if len(c.Messages) != 1 {
		t.Fatalf("claimed %d events, want 1", len(c.Messages))
	}
	return b, c
}

func batchMark(ctx context.Context, tx pgx.Tx, queue func(*pgx.Batch, *outbox.MarkResult) error) (outbox.MarkResult, error) {
	var batch pgx.Batch
	var dst outbox.MarkResult
	if err := queue(&batch, &dst); err != nil {
		return dst, err
	}
	return dst, tx.SendBatch(ctx, &batch).Close()
}

// outboxRaces is the race table of package outbox. shared is the schema
// the enqueue races share (nil when only the method names are wanted);
// the races that need a schema of their own use Config.Citus as citus.
func outboxRaces(shared *bundle, citus bool) []racetest.Race {
	type markCall func(ctx context.Context, b *bundle, tx pgx.Tx, l outbox.Lease, id uuid.UUID) (outbox.MarkResult, error)
	marks := map[string]markCall{
		"Mark sent": func(ctx context.Context, b *bundle, tx pgx.Tx, l outbox.Lease, id uuid.UUID) (outbox.MarkResult, error) {
			return b.store.Mark(ctx, tx, outbox.Outcome{Lease: l, Sent: []uuid.UUID{id}})
		},
		"QueueMark sent": func(ctx context.Context, b *bundle, tx pgx.Tx, l outbox.Lease, id uuid.UUID) (outbox.MarkResult, error) {
			return batchMark(ctx, tx, func(batch *pgx.Batch, dst *outbox.MarkResult) error {
				return b.store.QueueMark(batch, outbox.Outcome{Lease: l, Sent: []uuid.UUID{id}}, dst)
			})
		},
		"Mark failed": func(ctx context.Context, b *bundle, tx pgx.Tx, l outbox.Lease, id uuid.UUID) (outbox.MarkResult, error) {
			return b.store.Mark(ctx, tx, outbox.Outcome{Lease: l, Failed: []outbox.Failure{{EventID: id, Err: errors.New("B failed")}}})
		},
		"QueueMark failed": func(ctx context.Context, b *bundle, tx pgx.Tx, l outbox.Lease, id uuid.UUID) (outbox.MarkResult, error) {
			return batchMark(ctx, tx, func(batch *pgx.Batch, dst *outbox.MarkResult) error {
				return b.store.QueueMark(batch, outbox.Outcome{Lease: l, Failed: []outbox.Failure{{EventID: id, Err: errors.New("B failed")}}}, dst)
			})
		},
		"Mark released": func(ctx context.Context, b *bundle, tx pgx.Tx, l outbox.Lease, id uuid.UUID) (outbox.MarkResult, error) {
			return b.store.Mark(ctx, tx, outbox.Outcome{Lease: l, Released: []uuid.UUID{id}})
		},
		"QueueMark released": func(ctx context.Context, b *bundle, tx pgx.Tx, l outbox.Lease, id uuid.UUID) (outbox.MarkResult, error) {
			return batchMark(ctx, tx, func(batch *pgx.Batch, dst *outbox.MarkResult) error {
				return b.store.QueueMark(batch, outbox.Outcome{Lease: l, Released: []uuid.UUID{id}}, dst)
			})
		},
	}
	// What A does to the claimed event under lease l: every way the lease
	// can end.
	type holdFn func(ctx context.Context, b *bundle, tx pgx.Tx, l outbox.Lease, id uuid.UUID) error
	leaseEnds := map[string]holdFn{
		"SENT": func(ctx context.Context, b *bundle, tx pgx.Tx, l outbox.Lease, id uuid.UUID) error {
			_, err := b.store.Mark(ctx, tx, outbox.Outcome{Lease: l, Sent: []uuid.UUID{id}})
			return err
		},
		"RETRY_failed": func(ctx context.Context, b *bundle, tx pgx.Tx, l outbox.Lease, id uuid.UUID) error {
			_, err := b.store.Mark(ctx, tx, outbox.Outcome{Lease: l, Failed: []outbox.Failure{{EventID: id, Err: errors.New("A failed")}}})
			return err
		},
		"RETRY_released": func(ctx context.Context, b *bundle, tx pgx.Tx, l outbox.Lease, id uuid.UUID) error {
			_, err := b.store.Mark(ctx, tx, outbox.Outcome{Lease: l, Released: []uuid.UUID{id}})
			return err
		},
		"RETRY_recovered": func(ctx context.Context, b *bundle, tx pgx.Tx, l outbox.Lease, id uuid.UUID) error {
			rec, err := b.store.Recover(ctx, tx, l, time.Microsecond, 1000)
			if err == nil && len(rec) != 1 {
				err = errors.New("A recovered nothing")
			}
			return err
		},
		"SENDING_claimed_again": func(ctx context.Context, b *bundle, tx pgx.Tx, l outbox.Lease, id uuid.UUID) error {
			if _, err := b.store.Mark(ctx, tx, outbox.Outcome{Lease: l, Released: []uuid.UUID{id}}); err != nil {
				return err
			}
			c, err := b.store.ClaimOutboxBatch(ctx, tx, "relay-2", 10)
			if err == nil && len(c.Messages) != 1 {
				err = errors.New("A claimed nothing")
			}
			return err
		},
	}
	var races []racetest.Race
	for variant, call := range marks {
		method, mode, _ := strings.Cut(variant, " ")
		for state, hold := range leaseEnds {
			races = append(races, racetest.Race{
				Method: method, State: mode + "_" + state,
				Setup: func(t *testing.T) racetest.Round {
					b, c := leased(t, citus)
					id := c.Messages[0].EventID
					return racetest.Round{
						Pool: b.pool,
						Hold: func(ctx context.Context, tx pgx.Tx) error { return hold(ctx, b, tx, c.Lease, id) },
						Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, b, tx, c.Lease, id) },
						Check: func(t *testing.T, end racetest.End, got any, err error) {
							res, _ := got.(outbox.MarkResult)
							if end == racetest.Rollback {
								if err != nil || res.Marked != 1 {
									t.Fatalf("got %+v, %v; want the event marked under the lease", res, err)
								}
								return
							}
							// The lease ended: B touches nothing and reports the
							// event as it is now.
							var status outbox.Status
							var owner *string
							if err := b.pool.QueryRow(b.ctx, `SELECT status, locked_by FROM `+b.table()+` WHERE event_id = $1`, id).Scan(&status, &owner); err != nil {
								t.Fatal(err)
							}
							lockedBy := ""
							if owner != nil && status == outbox.StatusSending {
								lockedBy = *owner
							}
							var le *outbox.Error
							if !errors.As(err, &le) || !errors.Is(err, outbox.ErrLeaseLost) || res.Marked != 0 || len(res.Lost) != 1 {
								t.Fatalf("got %+v, %v; want *LeaseLostError for the event", res, err)
							}
							if l := res.Lost[0]; l.EventID != id || !l.Exists || l.Status != status || l.LockedBy != lockedBy {
								t.Fatalf("lost %+v; the row is %s owned by %q: reported from a stale row", l, status, lockedBy)
							}
						},
					}
				},
			})
		}
	}

	// The sweeps that pass over a row another transaction is marking
	// (SKIP LOCKED): recovery of an expired lease, claims and the purge.
	type sweep struct {
		deadBlocksKey bool // the store's Config.DeadBlocksKey (its own claim statement)
		prepare       func(t *testing.T, b *bundle) outbox.Claim
		call          func(ctx context.Context, b *bundle, tx pgx.Tx, c outbox.Claim) (int, error)
	}
	expiredLease := func(t *testing.T, b *bundle) outbox.Claim {
		b.enqueue(t, event(1))
		return b.claim(t, "relay-1", 10)
	}
	sweeps := map[string]sweep{
		"Recover expired": {prepare: expiredLease, call: func(ctx context.Context, b *bundle, tx pgx.Tx, c outbox.Claim) (int, error) {
			rec, err := b.store.Recover(ctx, tx, outbox.Lease{}, time.Microsecond, 10)
			return len(rec), err
		}},
		"Recover lease": {prepare: expiredLease, call: func(ctx context.Context, b *bundle, tx pgx.Tx, c outbox.Claim) (int, error) {
			rec, err := b.store.Recover(ctx, tx, c.Lease, time.Microsecond, 1000)
			return len(rec), err
		}},
		"ClaimOutboxBatch": {call: func(ctx context.Context, b *bundle, tx pgx.Tx, _ outbox.Claim) (int, error) {
			c, err := b.store.ClaimOutboxBatch(ctx, tx, "relay-2", 10)
			return len(c.Messages), err
		}},
		"ClaimOutboxBatch DeadBlocksKey": {deadBlocksKey: true, call: func(ctx context.Context, b *bundle, tx pgx.Tx, _ outbox.Claim) (int, error) {
			c, err := b.store.ClaimOutboxBatch(ctx, tx, "relay-2", 10)
			return len(c.Messages), err
		}},
		"PurgeSent": {prepare: func(t *testing.T, b *bundle) outbox.Claim {
			b.enqueue(t, event(1))
			c := b.claim(t, "relay-1", 10)
			if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: []uuid.UUID{c.Messages[0].EventID}}); err != nil {
				t.Fatal(err)
			}
			return c
		}, call: func(ctx context.Context, b *bundle, tx pgx.Tx, _ outbox.Claim) (int, error) {
			n, err := b.store.PurgeSent(ctx, tx, time.Now().Add(time.Hour), 10)
			return int(n), err
		}},
		"ArchiveSent": {prepare: func(t *testing.T, b *bundle) outbox.Claim {
			b.enqueue(t, event(1))
			c := b.claim(t, "relay-1", 10)
			if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: []uuid.UUID{c.Messages[0].EventID}}); err != nil {
				t.Fatal(err)
			}
			return c
		}, call: func(ctx context.Context, b *bundle, tx pgx.Tx, _ outbox.Claim) (int, error) {
			n, err := b.store.ArchiveSent(ctx, tx, time.Now().Add(time.Hour), 10)
			return int(n), err
		}},
	}
	for variant, sw := range sweeps {
		method, mode, _ := strings.Cut(variant, " ")
		races = append(races, racetest.Race{
			Method: method, State: mode + "_row_locked", Skips: true,
			Setup: func(t *testing.T) racetest.Round {
				b := setup(t, outbox.Config{Citus: citus, DeadBlocksKey: sw.deadBlocksKey}) // a sweep sees the whole schema
				var c outbox.Claim
				if sw.prepare != nil {
					c = sw.prepare(t, b)
				} else {
					b.enqueue(t, event(1))
				}
				return racetest.Round{
					Pool: b.pool,
					// A holds the event's row: a lock on it, whatever it
					// goes on to do.
					Hold: func(ctx context.Context, tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `SELECT 1 FROM `+b.table()+` FOR UPDATE`)
						return err
					},
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return sw.call(ctx, b, tx, c) },
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						if n, _ := got.(int); err != nil || n != 0 {
							t.Fatalf("got %v, %v; want the locked row passed over", got, err)
						}
					},
				}
			},
		})
	}

	// The enqueues wait for a concurrent event with the same dedup key:
	// a duplicate after its commit, new after its rollback.
	type enqueueCall func(ctx context.Context, b *bundle, tx pgx.Tx, ev outbox.Event) (outbox.Enqueued, error)
	enqueues := map[string]enqueueCall{
		"Enqueue": func(ctx context.Context, b *bundle, tx pgx.Tx, ev outbox.Event) (outbox.Enqueued, error) {
			return enqueueOne(ctx, b.store, tx, ev)
		},
		"Enqueue many": func(ctx context.Context, b *bundle, tx pgx.Tx, ev outbox.Event) (outbox.Enqueued, error) {
			res, err := b.store.Enqueue(ctx, tx, []outbox.Event{ev}...)
			if err != nil {
				return outbox.Enqueued{}, err
			}
			return res[0], nil
		},
		"QueueEnqueue one": func(ctx context.Context, b *bundle, tx pgx.Tx, ev outbox.Event) (outbox.Enqueued, error) {
			var batch pgx.Batch
			var dst []outbox.Enqueued
			if err := b.store.QueueEnqueue(&batch, []outbox.Event{ev}, &dst, pgtx.Return); err != nil {
				return outbox.Enqueued{}, err
			}
			if err := tx.SendBatch(ctx, &batch).Close(); err != nil || len(dst) != 1 {
				return outbox.Enqueued{}, err
			}
			return dst[0], nil
		},
		"QueueEnqueue many": func(ctx context.Context, b *bundle, tx pgx.Tx, ev outbox.Event) (outbox.Enqueued, error) {
			var batch pgx.Batch
			var dst []outbox.Enqueued
			if err := b.store.QueueEnqueue(&batch, []outbox.Event{ev}, &dst, pgtx.Return); err != nil {
				return outbox.Enqueued{}, err
			}
			if err := tx.SendBatch(ctx, &batch).Close(); err != nil || len(dst) != 1 {
				return outbox.Enqueued{}, err
			}
			return dst[0], nil
		},
		"QueueEnqueue abort": func(ctx context.Context, b *bundle, tx pgx.Tx, ev outbox.Event) (outbox.Enqueued, error) {
			var batch pgx.Batch
			var dst []outbox.Enqueued
			if err := b.store.QueueEnqueue(&batch, []outbox.Event{ev}, &dst, pgtx.Abort); err != nil {
				return outbox.Enqueued{}, err
			}
			if err := tx.SendBatch(ctx, &batch).Close(); err != nil || len(dst) != 1 {
				return outbox.Enqueued{}, err
			}
			return dst[0], nil
		},
	}
	for variant, call := range enqueues {
		method, mode, _ := strings.Cut(variant, " ")
		if variant != "QueueEnqueue abort" { // which refuses ordered events
			// Ordered mode: B waits for A's lock on the ordering key, so for
			// one key the seq order is the commit order.
			races = append(races, racetest.Race{
				Method: method, State: mode + "_same_ordering_key_enqueued",
				Setup: func(t *testing.T) racetest.Round {
					key := "race:" + uuid.NewString()
					first, second := event(1), event(2)
					first.DedupKey, second.DedupKey = key+":1", key+":2"
					first.OrderingKey, second.OrderingKey = key, key
					var aID uuid.UUID
					return racetest.Round{
						Pool: shared.pool,
						Hold: func(ctx context.Context, tx pgx.Tx) error {
							e, err := enqueueOne(ctx, shared.store, tx, first)
							aID = e.EventID
							return err
						},
						Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, shared, tx, second) },
						Check: func(t *testing.T, end racetest.End, got any, err error) {
							res, _ := got.(outbox.Enqueued)
							if err != nil || !res.New {
								t.Fatalf("got %+v, %v; want the event new", res, err)
							}
							if end == racetest.Rollback {
								return
							}
							var before bool
							if err := shared.pool.QueryRow(shared.ctx, `SELECT (SELECT seq FROM `+shared.table()+` WHERE event_id = $1)
								< (SELECT seq FROM `+shared.table()+` WHERE event_id = $2)`, aID, res.EventID).Scan(&before); err != nil || !before {
								t.Fatalf("A's event does not come first in seq order (%v)", err)
							}
						},
					}
				},
			})
		}
		races = append(races, racetest.Race{
			Method: method, State: mode + "_same_dedup_key_enqueued",
			Setup: func(t *testing.T) racetest.Round {
				ev := event(1)
				ev.DedupKey = "race:" + uuid.NewString()
				return racetest.Round{
					Pool: shared.pool,
					Hold: func(ctx context.Context, tx pgx.Tx) error { _, err := shared.store.Enqueue(ctx, tx, ev); return err },
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, shared, tx, ev) },
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						res, _ := got.(outbox.Enqueued)
						switch {
						case end == racetest.Rollback:
							if err != nil || !res.New {
								t.Fatalf("got %+v, %v; want the event new", res, err)
							}
						case variant == "QueueEnqueue abort":
							if c, ok := pgtx.UniqueViolationOf(err); !ok || c != "uq_outbox_dedup" {
								t.Fatalf("err = %v, want unique_violation on uq_outbox_dedup", err)
							}
						case err != nil || res.New:
							t.Fatalf("got %+v, %v; want a duplicate", res, err)
						}
						if n := shared.count(t, `dedup_key = $1`, ev.DedupKey); n != 1 {
							t.Fatalf("%d rows hold the dedup key, want 1", n)
						}
					},
				}
			},
		})
	}
	return races
}
