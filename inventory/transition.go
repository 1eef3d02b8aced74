package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgval"
	"github.com/seckillkit/seckill/internal/twin"
	"github.com/seckillkit/seckill/pgtx"
)

// Transition asks [Store.TransitionReservation] to move a reservation to
// a status.
type Transition struct {
	ReservationID uuid.UUID         // required
	To            ReservationStatus // a target of the state machine (see [ReservationStatus])
	// OrderID is required (> 0) for StatusOrdered and recorded with it;
	// ignored otherwise.
	OrderID int64
	// FailureCode, up to 64 characters, is recorded when not
	// empty (e.g. "POSTGRES_SOLD_OUT" with StatusRejected).
	FailureCode string
}

func (t Transition) validate() error {
	switch {
	case t.ReservationID == uuid.Nil:
		return invalid("ReservationID", "required")
	case len(transitions[t.To]) == 0:
		return invalid("To", fmt.Sprintf("%s is not a transition target", t.To))
	case t.To == StatusOrdered && t.OrderID <= 0:
		return invalid("OrderID", "must be positive for ORDERED")
	case t.OrderID < 0:
		return invalid("OrderID", "must not be negative")
	}
	return checkCode("FailureCode", t.FailureCode)
}

// TransitionReservation moves a reservation along the state machine
// of [ReservationStatus] with one conditional UPDATE (status in the allowed
// from-states), setting order_id and ordered_at for ORDERED, released_at
// for RELEASED, and failure_code when given. It returns the updated row.
//
// A zero-row update is classified, never silently ok: an unknown id gives
// [ErrReservationNotFound]; a reservation already in the target status or
// in a status the target may not be entered from gives a *Error
// (matching [ErrAlreadyInState] or [ErrIllegalTransition]) carrying the
// current row. Nothing is written then. The row is locked before the guard
// is tested, so a call that waits behind a concurrent writer decides on the
// status that writer committed: of twenty concurrent callers asking for one
// legal target, exactly one moves the row and the others get
// [ErrAlreadyInState]. An OrderID that another
// reservation already holds violates uq_reservation_order: the error
// matches [ErrReservationConflict] and the transaction is aborted.
//
// db is usually the caller's transaction (the transition belongs with the
// order and ledger writes); a pool works for stand-alone transitions.
func (s *Store) TransitionReservation(ctx context.Context, db pgtx.Querier, t Transition) (_ Reservation, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return Reservation{}, nilHandle("db")
	}
	if err := t.validate(); err != nil {
		return Reservation{}, err
	}
	return s.transitionRow(t).Run(ctx, db)
}

// QueueTransitionReservation queues the transition t into b; dst, when
// not nil, receives the updated row when the batch results are read. The
// returned error is only for invalid input, in which case nothing is
// queued.
//
// With [pgtx.Return] it queues [Store.TransitionReservation]'s statement:
// the callback's error (returned by BatchResults.Close) is classified as
// described there and the transaction stays usable. With [pgtx.Abort] the
// statement raises the refusal instead, which aborts the whole
// transaction, COMMIT included: [ErrReservationNotFound] (SQLSTATE
// SK009), [ErrAlreadyInState] (SK010) or [ErrIllegalTransition] (SK011);
// the error [pgtx.RunBatch] returns names this call and matches the
// sentinel with errors.Is. Run TransitionReservation in a new transaction
// for the row it found.
func (s *Store) QueueTransitionReservation(b *pgx.Batch, t Transition, dst *Reservation, on pgtx.OnRefusal) error {
	if on == pgtx.Abort {
		if err := t.validate(); err != nil {
			return err
		}
		if b == nil {
			return invalid("batch", "must not be nil")
		}
		from := b.Len()
		b.Queue(s.sql.transitionOrAbort, transitionArgs(t)...).QueryRow(func(row pgx.Row) error {
			var (
				r       Reservation
				version int64
			)
			if err := row.Scan(append(scanReservationInto(&r), &version)...); err != nil {
				return err
			}
			if dst != nil {
				*dst = r
			}
			return nil
		})
		s.nameAbort(b, from, "inventory.Store.QueueTransitionReservation(reservation "+t.ReservationID.String()+")")
		return nil
	}
	defer s.fail.Mark(b, "inventory.Store.QueueTransitionReservation")()
	if err := t.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	if dst == nil {
		dst = new(Reservation)
	}
	s.transitionRow(t).Queue(b, dst)
	return nil
}

// transitionRow is the transition statement of a validated t, shared by
// [Store.TransitionReservation] and its Queue twin.
func (s *Store) transitionRow(t Transition) twin.Row[Reservation] {
	return twin.Row[Reservation]{SQL: s.sql.transition, Args: transitionArgs(t),
		Scan: func(_ context.Context, _ bool, row pgx.Row, dst *Reservation) error {
			return scanTransition(row, t, dst)
		}}
}

func transitionArgs(t Transition) []any {
	var code *string
	if t.FailureCode != "" {
		code = &t.FailureCode
	}
	from := make([]int16, 0, len(transitions[t.To]))
	for _, f := range transitions[t.To] {
		from = append(from, int16(f))
	}
	return []any{pgval.UUID(t.ReservationID), int16(t.To), t.OrderID, code, from}
}

func scanTransition(row pgx.Row, t Transition, dst *Reservation) error {
	var (
		updated bool
		r       Reservation
	)
	err := row.Scan(scanReservationInto(&r, &updated)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("inventory: reservation %s: %w", t.ReservationID, ErrReservationNotFound)
	}
	if err != nil && uniqueViolation(err, "uq_reservation_order") {
		return fmt.Errorf("inventory: reservation %s: order id %d already belongs to another reservation (transaction aborted): %w: %w",
			t.ReservationID, t.OrderID, ErrReservationConflict, err)
	}
	if err != nil {
		return fmt.Errorf("inventory: transition reservation %s to %s: %w", t.ReservationID, t.To, err)
	}
	if !updated {
		return transitionError(t.ReservationID, r, t.To)
	}
	*dst = r
	return nil
}
