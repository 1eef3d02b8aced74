package order_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/racetest"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

// unguarded lists the exported methods of *order.Store that lock or
// conditionally update nothing, with the reason; every other method has
// races in orderRaces (TestRaceTableCoversStore checks both).
var unguarded = map[string]string{
	"Audit":              "read without a lock",
	"AuditSince":         "read without a lock",
	"Get":                "read without a lock",
	"Items":              "test hook: read without a lock",
	"OpenPaymentReviews": "read without a lock",
	"Payments":           "read without a lock",
	"QuantitiesByStatus": "read without a lock",
	"Check":              "reads the catalog",
	// Test hooks of export_test.go.
	"Schema":           "test hook: returns the configured schema name",
	"CancelExpiredSQL": "test hook: returns the statement text",
	"DueForExpirySQL":  "test hook: returns the statement text",
}

// TestRaceTableCoversStore: every exported method of *order.Store is in the
// race table or listed as guarding nothing.
func TestRaceTableCoversStore(t *testing.T) {
	t.Parallel()
	racetest.Covered(t, &order.Store{}, orderRaces(testBundle{}), unguarded)
}

// TestGuardedRaces runs the race table: B waits for A's lock on the order
// (or its unique keys) and gets the documented outcome for the row as A
// left it; in both modes (the statements of Config.Citus too).
func TestGuardedRaces(t *testing.T) {
	t.Parallel()
	for _, citus := range []bool{false, true} {
		name := "default"
		if citus {
			name = "citus"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			racetest.Run(t, orderRaces(setupCfg(t, pgtest.Pool(t), order.Config{Citus: citus})))
		})
	}
}

// raceUsers gives every order of the race table a buyer of its own.
var raceUsers atomic.Int64

func (b testBundle) raceOrder(t *testing.T, expired bool) order.Order {
	t.Helper()
	in := newOrder(1_000_000 + raceUsers.Add(1))
	if expired {
		in.ExpireAt = time.Now().Add(-time.Second)
	}
	return b.create(t, in)
}

func (b testBundle) get(t *testing.T, id int64) order.Order {
	t.Helper()
	o, err := b.store.Get(b.ctx, b.pool, seckill.Request{OrderID: id})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func moveTo(b testBundle, id int64, to order.Status) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := b.store.TransitionOrder(ctx, tx, order.Transition{OrderID: id, To: to, CancelReason: "RACE"})
		return err
	}
}

// transitionRaces: B asks for target from start while A moves the order to
// each status it can reach from start; the outcome follows the transition
// table on the row as A left it. queued sends the queued form with
// pgtx.Return, abort with pgtx.Abort (a refusal raises on the server).
func transitionRaces(b testBundle, start, target order.Status, queued, abort bool) []racetest.Race {
	method, suffix := "TransitionOrder", ""
	if queued {
		method = "QueueTransitionOrder"
	}
	on := pgtx.Return
	if abort {
		on, suffix = pgtx.Abort, "/abort"
	}
	var races []racetest.Race
	for _, aTo := range order.Statuses() {
		if !order.CanTransition(start, aTo) {
			continue
		}
		races = append(races, racetest.Race{
			Method: method, State: fmt.Sprintf("%s_to_%s_asked_%s%s", start, aTo, target, suffix),
			Setup: func(t *testing.T) racetest.Round {
				o := b.raceOrder(t, false)
				if start != order.StatusCreated {
					b.force(t, o.OrderID, start, o.ExpireAt)
				}
				return racetest.Round{
					Pool: b.pool,
					Hold: moveTo(b, o.OrderID, aTo),
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) {
						tr := order.Transition{OrderID: o.OrderID, To: target, CancelReason: "RACE"}
						if !queued {
							return b.store.TransitionOrder(ctx, tx, tr)
						}
						var batch pgx.Batch
						var dst order.Result
						if err := b.store.QueueTransitionOrder(&batch, tr, &dst, on); err != nil {
							return dst, err
						}
						return dst, tx.SendBatch(ctx, &batch).Close()
					},
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						left := start
						if end == racetest.Commit {
							left = aTo
						}
						res, _ := got.(order.Result)
						now := b.get(t, o.OrderID)
						switch {
						case left == target:
							if err != nil || !res.Existing || res.Changed || res.Order.Version != now.Version {
								t.Fatalf("got %+v, %v; want AlreadyInState with the stored row (v%d)", res, err, now.Version)
							}
						case order.CanTransition(left, target):
							if err != nil || !res.Changed || res.From != left || res.Order.Status != target {
								t.Fatalf("got %+v, %v; want Changed from %s", res, err, left)
							}
						case abort:
							var pgErr *pgconn.PgError
							if !errors.Is(err, order.ErrIllegalTransition) || !errors.As(err, &pgErr) || pgErr.Code != "SK102" ||
								now.Status != left || res.Changed {
								t.Fatalf("got %+v, %v; want SK102 (ErrIllegalTransition) raised, the order left %s", res, err, left)
							}
						default:
							var ie *order.Error
							if !errors.As(err, &ie) || !errors.Is(err, order.ErrIllegalTransition) || ie.From != left || res.From != left || res.Order.Status != left || res.Order.Version != now.Version {
								t.Fatalf("got %+v, %v; want *IllegalTransitionError from %s with the stored row (v%d)", res, err, left, now.Version)
							}
						}
					},
				}
			},
		})
	}
	return races
}

// orderRaces is the race table of package order.
func orderRaces(b testBundle) []racetest.Race {
	var races []racetest.Race
	races = append(races, transitionRaces(b, order.StatusCreated, order.StatusCancelled, false, false)...)
	races = append(races, transitionRaces(b, order.StatusCreated, order.StatusPaid, false, false)...)
	races = append(races, transitionRaces(b, order.StatusPaying, order.StatusPaid, false, false)...)
	races = append(races, transitionRaces(b, order.StatusPaid, order.StatusClosed, false, false)...)
	races = append(races, transitionRaces(b, order.StatusCancelled, order.StatusClosed, false, false)...)
	races = append(races, transitionRaces(b, order.StatusCreated, order.StatusCancelled, true, false)...)
	races = append(races, transitionRaces(b, order.StatusCreated, order.StatusCancelled, true, true)...)

	// RecordPayment and its twin: A cancels the order on timeout, pays it
	// with another payment, or records the same payment.
	type payCall func(ctx context.Context, tx pgx.Tx, p order.Payment) (order.PaymentResult, error)
	pays := map[string]payCall{
		"RecordPayment": func(ctx context.Context, tx pgx.Tx, p order.Payment) (order.PaymentResult, error) {
			return b.store.RecordPayment(ctx, tx, p)
		},
		// The queued statement, and for a conflict the classification in
		// a new statement after the wait.
		"ClassifyPaymentConflict": func(ctx context.Context, tx pgx.Tx, p order.Payment) (order.PaymentResult, error) {
			var batch pgx.Batch
			var dst order.PaymentResult
			if err := b.store.QueueRecordPayment(&batch, p, &dst, pgtx.Return); err != nil {
				return dst, err
			}
			err := tx.SendBatch(ctx, &batch).Close()
			if errors.Is(err, order.ErrConflict) {
				return b.store.ClassifyPaymentConflict(ctx, tx, p)
			}
			return dst, err
		},
		"QueueRecordPayment": func(ctx context.Context, tx pgx.Tx, p order.Payment) (order.PaymentResult, error) {
			var batch pgx.Batch
			var dst order.PaymentResult
			if err := b.store.QueueRecordPayment(&batch, p, &dst, pgtx.Return); err != nil {
				return dst, err
			}
			return dst, tx.SendBatch(ctx, &batch).Close()
		},
		"QueueRecordPayment/abort": func(ctx context.Context, tx pgx.Tx, p order.Payment) (order.PaymentResult, error) {
			var batch pgx.Batch
			var dst order.PaymentResult
			if err := b.store.QueueRecordPayment(&batch, p, &dst, pgtx.Abort); err != nil {
				return dst, err
			}
			return dst, tx.SendBatch(ctx, &batch).Close()
		},
	}
	type payState struct {
		name string
		hold func(o order.Order, p order.Payment) func(context.Context, pgx.Tx) error
		want order.PaymentKind // after A commits
	}
	payStates := []payState{
		{name: "CANCELLED_on_timeout", want: order.PaymentAfterCancel,
			hold: func(o order.Order, _ order.Payment) func(context.Context, pgx.Tx) error {
				return func(ctx context.Context, tx pgx.Tx) error {
					_, err := b.store.TransitionOrder(ctx, tx, order.TimeoutCancel(o.OrderID))
					return err
				}
			}},
		{name: "PAID_by_another_payment", want: order.PaymentOnPaidOrder,
			hold: func(o order.Order, _ order.Payment) func(context.Context, pgx.Tx) error {
				return func(ctx context.Context, tx pgx.Tx) error {
					_, err := b.store.RecordPayment(ctx, tx, newPayment(o))
					return err
				}
			}},
		{name: "PAID_by_the_same_payment", want: order.PaymentDuplicate,
			hold: func(_ order.Order, p order.Payment) func(context.Context, pgx.Tx) error {
				return func(ctx context.Context, tx pgx.Tx) error {
					_, err := b.store.RecordPayment(ctx, tx, p)
					return err
				}
			}},
	}
	for method, call := range pays {
		for _, st := range payStates {
			name, variant, _ := strings.Cut(method, "/")
			state := st.name
			if variant != "" {
				state += "/" + variant
			}
			races = append(races, racetest.Race{
				Method: name, State: state,
				Setup: func(t *testing.T) racetest.Round {
					o := b.raceOrder(t, true)
					p := newPayment(o)
					return racetest.Round{
						Pool: b.pool,
						Hold: st.hold(o, p),
						Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, tx, p) },
						Check: func(t *testing.T, end racetest.End, got any, err error) {
							res, _ := got.(order.PaymentResult)
							want := order.PaymentPaid
							if end == racetest.Commit {
								want = st.want
							}
							if method == "QueueRecordPayment" && want == order.PaymentDuplicate {
								// Documented: the queued form reports a duplicate
								// as a *ConflictError, for ClassifyPaymentConflict.
								if !errors.Is(err, order.ErrConflict) {
									t.Fatalf("err = %v, want ErrConflict", err)
								}
								return
							}
							if method == "QueueRecordPayment/abort" && want == order.PaymentDuplicate {
								// With pgtx.Abort the payment that inserted
								// nothing raises SK106 (ErrConflict).
								var pgErr *pgconn.PgError
								if !errors.Is(err, order.ErrConflict) || !errors.As(err, &pgErr) || pgErr.Code != "SK106" {
									t.Fatalf("err = %v, want SK106 (ErrConflict)", err)
								}
								return
							}
							now := b.get(t, o.OrderID)
							if err != nil || res.Kind != want || res.Order.Status != now.Status {
								t.Fatalf("got %+v, %v; want kind %v with the order as stored (%s)", res, err, want, now.Status)
							}
						},
					}
				},
			})
		}
	}

	// Create and its twins: A creates the same order (B waits on its
	// keys), or another order of the same buyer and SKU.
	type createCall func(ctx context.Context, tx pgx.Tx, in order.NewOrder) (order.Result, error)
	creates := map[string]createCall{
		"Create": func(ctx context.Context, tx pgx.Tx, in order.NewOrder) (order.Result, error) {
			return b.store.Create(ctx, tx, in)
		},
		"ClassifyConflict": func(ctx context.Context, tx pgx.Tx, in order.NewOrder) (order.Result, error) {
			var batch pgx.Batch
			var dst order.Result
			if err := b.store.QueueCreate(&batch, in, &dst, pgtx.Return); err != nil {
				return dst, err
			}
			err := tx.SendBatch(ctx, &batch).Close()
			if errors.Is(err, order.ErrConflict) {
				return b.store.ClassifyConflict(ctx, tx, in)
			}
			return dst, err
		},
		"QueueCreate": func(ctx context.Context, tx pgx.Tx, in order.NewOrder) (order.Result, error) {
			var batch pgx.Batch
			var dst order.Result
			if err := b.store.QueueCreate(&batch, in, &dst, pgtx.Return); err != nil {
				return dst, err
			}
			return dst, tx.SendBatch(ctx, &batch).Close()
		},
		"QueueCreate/Abort": func(ctx context.Context, tx pgx.Tx, in order.NewOrder) (order.Result, error) {
			var batch pgx.Batch
			var dst order.Result
			if err := b.store.QueueCreate(&batch, in, &dst, pgtx.Abort); err != nil {
				return dst, err
			}
			return dst, tx.SendBatch(ctx, &batch).Close()
		},
	}
	for method, call := range creates {
		for _, same := range []bool{true, false} {
			state := "same_order_created"
			if !same {
				state = "other_order_of_the_buyer_created"
			}
			name, variant, _ := strings.Cut(method, "/")
			if variant != "" {
				state += "/" + variant
			}
			races = append(races, racetest.Race{
				Method: name, State: state,
				Setup: func(t *testing.T) racetest.Round {
					in := newOrder(1_000_000 + raceUsers.Add(1))
					aIn := in
					if !same {
						aIn = newOrder(in.UserID)
					}
					return racetest.Round{
						Pool: b.pool,
						Hold: func(ctx context.Context, tx pgx.Tx) error {
							_, err := b.store.Create(ctx, tx, aIn)
							return err
						},
						Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return call(ctx, tx, in) },
						Check: func(t *testing.T, end racetest.End, got any, err error) {
							res, _ := got.(order.Result)
							switch {
							case end == racetest.Rollback:
								if err != nil || res.Existing {
									t.Fatalf("got %+v, %v; want the order created", res, err)
								}
							case method == "QueueCreate/Abort":
								if _, ok := pgtx.UniqueViolationOf(err); !ok {
									t.Fatalf("err = %v, want a unique_violation", err)
								}
							case method == "QueueCreate":
								// Documented: the queued insert reports the
								// conflict for ClassifyConflict.
								if !errors.Is(err, order.ErrConflict) {
									t.Fatalf("err = %v, want ErrConflict", err)
								}
							case same:
								if err != nil || !res.Existing || res.Order.OrderID != in.OrderID {
									t.Fatalf("got %+v, %v; want Existing", res, err)
								}
							default:
								var ue *order.Error
								if !errors.As(err, &ue) || !errors.Is(err, order.ErrUserAlreadyOrdered) {
									t.Fatalf("err = %v, want *UserAlreadyOrderedError", err)
								}
							}
						},
					}
				},
			})
		}
	}

	// The timeout sweeps pass over an order a payment holds (SKIP LOCKED).
	sweeps := map[string]func(ctx context.Context, b testBundle, tx pgx.Tx) ([]int64, error){
		"CancelExpired": func(ctx context.Context, b testBundle, tx pgx.Tx) ([]int64, error) {
			res, err := b.store.CancelExpired(ctx, tx, 10)
			return transitioned(res), err
		},
		"QueueCancelExpired": func(ctx context.Context, b testBundle, tx pgx.Tx) ([]int64, error) {
			var batch pgx.Batch
			var res []order.Result
			if err := b.store.QueueCancelExpired(&batch, 10, &res); err != nil {
				return nil, err
			}
			err := tx.SendBatch(ctx, &batch).Close()
			return transitioned(res), err
		},
		"DueForExpiry": func(ctx context.Context, b testBundle, tx pgx.Tx) ([]int64, error) {
			os, err := b.store.DueForExpiry(ctx, tx, 10)
			var ids []int64
			for _, o := range os {
				ids = append(ids, o.OrderID)
			}
			return ids, err
		},
	}
	for method, sweep := range sweeps {
		races = append(races, racetest.Race{
			Method: method, State: "expired_CREATED_being_paid", Skips: true,
			Setup: func(t *testing.T) racetest.Round {
				own := setup(t) // the sweep sees the whole schema
				locked, free := own.raceOrder(t, true), own.raceOrder(t, true)
				return racetest.Round{
					Pool: own.pool,
					Hold: func(ctx context.Context, tx pgx.Tx) error {
						_, err := own.store.RecordPayment(ctx, tx, newPayment(locked))
						return err
					},
					Call: func(ctx context.Context, tx pgx.Tx) (any, error) { return sweep(ctx, own, tx) },
					Check: func(t *testing.T, end racetest.End, got any, err error) {
						ids, _ := got.([]int64)
						if err != nil || len(ids) != 1 || ids[0] != free.OrderID {
							t.Fatalf("got %v, %v; want only order %d (the unlocked one)", ids, err, free.OrderID)
						}
					},
				}
			},
		})
	}

	// Payment reviews: A records the same review (B waits on its key), or
	// A resolves it (B finds it resolved).
	review := func(o int64) order.Payment {
		p := newPayment(order.Order{Request: seckill.Request{OrderID: o}, TotalAmount: 100, Currency: "CNY"})
		p.ProviderTradeNo = fmt.Sprintf("REVIEW-%d", o)
		return p
	}
	races = append(races, racetest.Race{
		Method: "RecordPaymentReview", State: "same_review_recorded",
		Setup: func(t *testing.T) racetest.Round {
			p := review(9_000_000 + raceUsers.Add(1))
			return racetest.Round{
				Pool: b.pool,
				Hold: func(ctx context.Context, tx pgx.Tx) error {
					_, _, err := b.store.RecordPaymentReview(ctx, tx, p, order.PaymentResult{}, order.ErrNotFound)
					return err
				},
				Call: func(ctx context.Context, tx pgx.Tx) (any, error) {
					_, created, err := b.store.RecordPaymentReview(ctx, tx, p, order.PaymentResult{}, order.ErrNotFound)
					return created, err
				},
				Check: func(t *testing.T, end racetest.End, got any, err error) {
					if created, _ := got.(bool); err != nil || created != (end == racetest.Rollback) {
						t.Fatalf("created %v, %v; want %v", got, err, end == racetest.Rollback)
					}
				},
			}
		},
	})
	races = append(races, racetest.Race{
		Method: "ResolvePaymentReview", State: "RESOLVED",
		Setup: func(t *testing.T) racetest.Round {
			rv, _, err := b.store.RecordPaymentReview(b.ctx, b.pool, review(9_000_000+raceUsers.Add(1)), order.PaymentResult{}, order.ErrNotFound)
			if err != nil {
				t.Fatal(err)
			}
			return racetest.Round{
				Pool: b.pool,
				Hold: func(ctx context.Context, tx pgx.Tx) error {
					_, err := b.store.ResolvePaymentReview(ctx, tx, rv.ReviewID, "refunded by A", "a")
					return err
				},
				Call: func(ctx context.Context, tx pgx.Tx) (any, error) {
					return b.store.ResolvePaymentReview(ctx, tx, rv.ReviewID, "refunded by B", "b")
				},
				Check: func(t *testing.T, end racetest.End, got any, err error) {
					res, _ := got.(order.PaymentReview)
					switch {
					case end == racetest.Rollback:
						if err != nil || res.ResolvedBy != "b" {
							t.Fatalf("got %+v, %v; want resolved by B", res, err)
						}
					case !errors.Is(err, order.ErrReviewResolved) || res.ResolvedBy != "a" || res.Resolution != "refunded by A":
						t.Fatalf("got %+v, %v; want ErrReviewResolved with A's resolution", res, err)
					}
				},
			}
		},
	})
	return races
}

func transitioned(res []order.Result) []int64 {
	var ids []int64
	for _, r := range res {
		if r.Changed {
			ids = append(ids, r.Order.OrderID)
		}
	}
	return ids
}
