package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/racetest"
	"github.com/seckillkit/seckill/pgtx"
)

// unguarded lists the exported methods of *inbox.Store that no other
// transaction's lock can make wait, with the reason; every other method
// has races in inboxRaces (TestRaceTableCoversStore checks both).
var unguarded = map[string]string{
	"Lookup": "read without a lock",
	"Schema": "returns the configured schema name",
	"Check":  "reads the catalog",
	// Complete updates only a CLAIMED row its own transaction inserted:
	// that row is invisible to every other transaction until it commits,
	// so none can hold its lock. A row claimed by a committed transaction
	// is refused (ErrNotClaimer) by a guard that is false before any row
	// is scanned, so it never waits either.
	"Complete":      "updates only its own transaction's uncommitted claim, which no other transaction can lock",
	"QueueComplete": "the queued Complete: updates only its own transaction's uncommitted claim",
}

// TestRaceTableCoversStore: every exported method of *inbox.Store is in
// the race table or listed as guarding nothing.
func TestRaceTableCoversStore(t *testing.T) {
	t.Parallel()
	racetest.Covered(t, &inbox.Store{}, inboxRaces(nil), unguarded)
}

// TestGuardedRaces runs the race table in both claim modes: a duplicate
// arrives while the first delivery (transaction A) is in flight, waits
// for it, and gets the documented outcome for the row A committed, or
// becomes the owner when A rolls back.
func TestGuardedRaces(t *testing.T) {
	t.Parallel()
	for _, citus := range []bool{false, true} {
		name := "default"
		if citus {
			name = "citus"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupMode(t, citus)
			b.citus = citus
			racetest.Run(t, inboxRaces(b))
		})
	}
}

// claimCall is B's call of one claim entry point for msg (res is stored by
// the forms that take a result).
type claimCall func(ctx context.Context, b *testBundle, tx pgx.Tx, msg inbox.Message, res inbox.Result) (inbox.Claim, error)

var claimCalls = map[string]claimCall{
	"ClaimMessage": func(ctx context.Context, b *testBundle, tx pgx.Tx, msg inbox.Message, res inbox.Result) (inbox.Claim, error) {
		c, err := b.in.ClaimMessage(ctx, tx, msg)
		if err == nil && c.Fresh {
			err = b.in.Complete(ctx, tx, msg.Key(), res)
		}
		return c, err
	},
	"ClaimMessage with Message.Result": func(ctx context.Context, b *testBundle, tx pgx.Tx, msg inbox.Message, res inbox.Result) (inbox.Claim, error) {
		return b.in.ClaimMessage(ctx, tx, withResult(msg, res))
	},
	"QueueClaimMessage": func(ctx context.Context, b *testBundle, tx pgx.Tx, msg inbox.Message, res inbox.Result) (inbox.Claim, error) {
		var batch pgx.Batch
		var c inbox.Claim
		if err := b.in.QueueClaimMessage(&batch, msg, &c, pgtx.Return); err != nil {
			return c, err
		}
		err := tx.SendBatch(ctx, &batch).Close()
		if err == nil && c.Fresh {
			err = b.in.Complete(ctx, tx, msg.Key(), res)
		}
		return c, err
	},
	"QueueClaimMessage with Message.Result": func(ctx context.Context, b *testBundle, tx pgx.Tx, msg inbox.Message, res inbox.Result) (inbox.Claim, error) {
		var batch pgx.Batch
		var c inbox.Claim
		if err := b.in.QueueClaimMessage(&batch, withResult(msg, res), &c, pgtx.Return); err != nil {
			return c, err
		}
		return c, tx.SendBatch(ctx, &batch).Close()
	},
}

// inboxRaces is the race table of package inbox. b is nil when only the
// method names are wanted.
func inboxRaces(b *testBundle) []racetest.Race {
	// A's first delivery: the same payload processed, the same payload
	// claimed without a result yet, or another payload under the same id.
	type first struct {
		state     string
		other     bool // A's payload differs from B's
		completes bool // A records a result
	}
	firsts := []first{
		{state: "PROCESSED_same_payload", completes: true},
		{state: "CLAIMED_same_payload"},
		{state: "PROCESSED_other_payload", other: true, completes: true},
	}
	var races []racetest.Race
	for variant, call := range claimCalls {
		// The variant's method, and the value it passes (the claim that
		// records its result up front) in the state's name.
		method, with, _ := strings.Cut(variant, " with ")
		state := func(s string) string {
			if with != "" {
				return s + "_with_result"
			}
			return s
		}
		for _, f := range firsts {
			races = append(races, racetest.Race{
				Method: method, State: state(f.state),
				Setup: func(t *testing.T) racetest.Round {
					msg := newMessage("race")
					aMsg := msg
					if f.other {
						aMsg.PayloadHash = inbox.HashPayload([]byte(`{"sku":2}`))
					}
					return racetest.Round{
						Pool: b.pool,
						Hold: func(ctx context.Context, tx pgx.Tx) error {
							c, err := b.in.ClaimMessage(ctx, tx, aMsg)
							if err == nil && !c.Fresh {
								t.Fatalf("A's claim is a duplicate: %+v", c)
							}
							if err == nil && f.completes {
								err = b.in.Complete(ctx, tx, aMsg.Key(), inbox.Result{Code: "A"})
							}
							return err
						},
						Call: func(ctx context.Context, tx pgx.Tx) (any, error) {
							return call(ctx, b, tx, msg, inbox.Result{Code: "B"})
						},
						Check: func(t *testing.T, end racetest.End, got any, err error) {
							c, _ := got.(inbox.Claim)
							rec, lerr := b.in.Lookup(b.ctx, b.pool, msg.Key())
							if lerr != nil {
								t.Fatal(lerr)
							}
							batch := method == "QueueClaimMessage"
							switch {
							case end == racetest.Commit && batch && !b.citus:
								// Documented: the one-statement batch form cannot
								// see the row committed while it waited, nor
								// send a look-up; it reports the duplicate as
								// ErrConcurrentClaim, whatever the payload.
								if !errors.Is(err, inbox.ErrConcurrentClaim) {
									t.Fatalf("got %+v, %v; want ErrConcurrentClaim", c, err)
								}
							case end == racetest.Rollback:
								// The waiter became the owner: its row, its
								// payload, its result.
								if err != nil || !c.Fresh || rec.Result.Code != "B" || !bytes.Equal(rec.PayloadHash, msg.PayloadHash) {
									t.Fatalf("got %+v, %v (stored %+v); want B the owner", c, err, rec)
								}
							case f.other:
								var pm *inbox.Error
								if !errors.As(err, &pm) || !errors.Is(err, inbox.ErrPayloadMismatch) ||
									!bytes.Equal(pm.Record.PayloadHash, aMsg.PayloadHash) || !bytes.Equal(pm.Given, msg.PayloadHash) || pm.Record.Result.Code != "A" {
									t.Fatalf("got %+v, %v; want a *PayloadMismatchError against A's committed row", c, err)
								}
							default:
								wantStatus := inbox.StatusClaimed
								if f.completes {
									wantStatus = inbox.StatusProcessed
								}
								if err != nil || c.Fresh || c.Record.Status != wantStatus || c.Record.Result.Code != rec.Result.Code {
									t.Fatalf("got %+v, %v; want the duplicate with A's row %+v", c, err, rec)
								}
							}
						},
					}
				},
			})
		}
	}

	// QueueClaimMessage with pgtx.Abort waits for the first delivery and
	// raises when it commits, whatever the payload; it inserts when A rolls
	// back.
	races = append(races, racetest.Race{
		Method: "QueueClaimMessage", State: "PROCESSED_same_payload_abort",
		Setup: func(t *testing.T) racetest.Round {
			msg := newMessage("race")
			return racetest.Round{
				Pool: b.pool,
				Hold: func(ctx context.Context, tx pgx.Tx) error {
					_, err := b.in.ClaimMessage(ctx, tx, withResult(msg, inbox.Result{Code: "A"}))
					return err
				},
				Call: func(ctx context.Context, tx pgx.Tx) (any, error) {
					var batch pgx.Batch
					if err := b.in.QueueClaimMessage(&batch, withResult(msg, inbox.Result{Code: "B"}), nil, pgtx.Abort); err != nil {
						return nil, err
					}
					return nil, tx.SendBatch(ctx, &batch).Close()
				},
				Check: func(t *testing.T, end racetest.End, _ any, err error) {
					if end == racetest.Commit {
						if c, ok := pgtx.UniqueViolationOf(err); !ok || c != inbox.ConstraintClaimed {
							t.Fatalf("err = %v, want unique_violation on %s", err, inbox.ConstraintClaimed)
						}
						return
					}
					rec, lerr := b.in.Lookup(b.ctx, b.pool, msg.Key())
					if err != nil || lerr != nil || rec.Result.Code != "B" {
						t.Fatalf("err = %v, stored %+v (%v); want B's row", err, rec, lerr)
					}
				},
			}
		},
	})

	// Purge and Archive pass over a row another transaction holds (SKIP
	// LOCKED).
	sweeps := map[string]func(ctx context.Context, in *inbox.Store, tx pgx.Tx) (int64, error){
		"Purge": func(ctx context.Context, in *inbox.Store, tx pgx.Tx) (int64, error) {
			return in.Purge(ctx, tx, time.Now().Add(time.Hour), 10)
		},
		"Archive": func(ctx context.Context, in *inbox.Store, tx pgx.Tx) (int64, error) {
			return in.Archive(ctx, tx, time.Now().Add(time.Hour), 10)
		},
	}
	for method, sweep := range sweeps {
		races = append(races, racetest.Race{
			Method: method, State: "PROCESSED_locked", Skips: true,
			Setup: func(t *testing.T) racetest.Round {
				own := setup(t) // the purge sees the whole schema
				locked, free := newMessage("race"), newMessage("race")
				for _, m := range []inbox.Message{locked, free} {
					if err := pgx.BeginFunc(own.ctx, own.pool, func(tx pgx.Tx) error {
						_, err := own.in.ClaimMessage(own.ctx, tx, withResult(m, inbox.Result{Code: "OK"}))
						return err
					}); err != nil {
						t.Fatal(err)
					}
				}
				return racetest.Round{
					Pool: own.pool,
					Hold: func(ctx context.Context, tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{own.schema, "consumer_inbox"}.Sanitize()+
							` WHERE consumer_group = $1 AND message_id = $2 FOR UPDATE`, locked.Group, locked.MessageID)
						return err
					},
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) {
						return sweep(ctx, own.in, tx)
					},
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						if n, _ := got.(int64); err != nil || n != 1 {
							t.Fatalf("%s moved %v, %v; want only the unlocked row", method, got, err)
						}
						if _, err := own.in.Lookup(own.ctx, own.pool, locked.Key()); err != nil {
							t.Fatalf("the locked row: %v, want it kept", err)
						}
					},
				}
			},
		})
	}
	return races
}
