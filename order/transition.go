package order

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/twin"
	"github.com/seckillkit/seckill/pgtx"
)

// cancelReasonPayTimeout is the reason of a timeout cancel, TimeoutCancel's
// and CancelExpired's.
const cancelReasonPayTimeout = "PAY_TIMEOUT"

// Transition asks TransitionOrder to move one order to a new status.
type Transition struct {
	// OrderID of the order to move; required (> 0).
	OrderID int64
	// To is the target status; it must be a target of the transition
	// table (any status but CREATED).
	To Status
	// CancelReason is stored in cancel_reason; required when To is
	// StatusCancelled (at most 64 characters), ignored otherwise. This
	// package's timeout cancels use "PAY_TIMEOUT"; the example service
	// names a buyer's cancel "USER_CANCEL".
	CancelReason string
	// OnlyIfExpired adds the timeout guard expire_at <=
	// statement_timestamp(); allowed only with To == StatusCancelled.
	OnlyIfExpired bool
}

// TimeoutCancel returns the transition of a payment-timeout cancel: to
// CANCELLED, reason PAY_TIMEOUT (CancelExpired's), only if the order has
// expired.
func TimeoutCancel(orderID int64) Transition {
	return Transition{OrderID: orderID, To: StatusCancelled, CancelReason: cancelReasonPayTimeout, OnlyIfExpired: true}
}

func (t Transition) validate() error {
	switch {
	case t.OrderID <= 0:
		return invalid("Transition.OrderID", "must be > 0")
	case !t.To.valid():
		return invalid("Transition.To", "unknown status "+t.To.String())
	case len(transitions[t.To]) == 0:
		return invalid("Transition.To", t.To.String()+" is no transition target")
	case t.OnlyIfExpired && t.To != StatusCancelled:
		return invalid("Transition.OnlyIfExpired", "only a cancel can require expiry")
	case t.To == StatusCancelled && t.CancelReason == "":
		return invalid("Transition.CancelReason", "required for a cancel")
	case t.To == StatusCancelled && checkText("Transition.CancelReason", t.CancelReason, 64, true) != nil:
		return checkText("Transition.CancelReason", t.CancelReason, 64, true)
	}
	return nil
}

func transitionArgs(t Transition) []any {
	from := make([]int16, 0, 3)
	for _, s := range transitions[t.To] {
		from = append(from, int16(s))
	}
	var reason *string
	if t.To == StatusCancelled {
		reason = &t.CancelReason
	}
	return []any{t.OrderID, int16(t.To), from, reason, t.OnlyIfExpired}
}

// TransitionOrder moves one order to t.To if the transition table allows
// it from the order's current status (and, for a timeout cancel, the order
// has expired): one conditional UPDATE that sets the status, the status
// timestamps (paid_at for PAID; cancelled_at and cancel_reason for
// CANCELLED), version+1 and updated_at, and returns the row with Changed.
//
// A 0-row UPDATE is classified, race-free (see the package documentation):
//
//   - no such order: [ErrNotFound];
//   - already in t.To: result with Existing, nil error (idempotent);
//   - current status not allowed: [ErrIllegalTransition], the *Error
//     with From, To and the current row;
//   - allowed but not yet expired: [ErrNotExpired], the *Error with the
//     current row (its ExpireAt).
//
// On these classified errors the returned Result still holds the
// current row (Order, and From = its status), so the caller can report it.
//
// The row stays locked until q's transaction ends. Pass the caller's pgx.Tx
// when the transition must be atomic with other writes — always for a
// cancel, whose stock the caller releases in the same transaction when
// Changed; a pool is fine for stand-alone moves. Invalid input returns an
// [ErrInvalidArgument] error before anything is sent.
func (s *Store) TransitionOrder(ctx context.Context, q pgtx.Querier, t Transition) (_ Result, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return Result{}, nilHandle("q")
	}
	if err := t.validate(); err != nil {
		return Result{}, err
	}
	return s.transitionRow(t, "TransitionOrder").Run(ctx, q)
}

// QueueTransitionOrder queues TransitionOrder's single statement into b;
// the returned error only reports invalid input or a nil b (nothing
// queued). dst may be nil (the result is discarded). When the batch runs,
// the callback fills dst; on says what a refusal (no such order, an
// illegal transition, a timeout cancel too early) does:
//
//   - [pgtx.Return]: the callback returns what TransitionOrder would
//     return as error (classified the same way); the server goes on.
//   - [pgtx.Abort]: the statement raises the refusal on the server
//     (SQLSTATE SK101 [ErrNotFound], SK102 [ErrIllegalTransition], SK103
//     [ErrNotExpired]), which aborts the transaction, COMMIT included; the
//     error [pgtx.RunBatch] returns matches the sentinel and names this
//     call in its [pgtx.StatementError.Call]. An order already in t.To is
//     no refusal (dst.Existing).
func (s *Store) QueueTransitionOrder(b *pgx.Batch, t Transition, dst *Result, on pgtx.OnRefusal) error {
	if err := t.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("QueueTransitionOrder", "batch must not be nil")
	}
	if dst == nil {
		dst = new(Result)
	}
	if on == pgtx.Abort {
		from := b.Len()
		b.Queue(s.sql.transitionOrAbort, transitionArgs(t)...).QueryRow(func(row pgx.Row) error {
			*dst = Result{}
			var expired bool
			var refused *int64
			if err := scanOrder(row, &dst.Order, &dst.Changed, &dst.From, &expired, &refused); err != nil {
				*dst = Result{}
				return fmt.Errorf("order: transition %d to %s: %w", t.OrderID, t.To, err)
			}
			dst.Existing = !dst.Changed
			return nil
		})
		pgtx.NameCall(b, from, fmt.Sprintf("order.Store.QueueTransitionOrder(order %d)", t.OrderID), s.fail.Classify)
		return nil
	}
	defer s.fail.Mark(b, "order.Store.QueueTransitionOrder")()
	s.transitionRow(t, "QueueTransitionOrder").Queue(b, dst)
	return nil
}

// transitionRow is the transition statement of a validated t, shared by
// [Store.TransitionOrder] and its queued form (op).
func (s *Store) transitionRow(t Transition, op string) twin.Row[Result] {
	return twin.Row[Result]{SQL: s.sql.transition, Args: transitionArgs(t),
		Scan: func(_ context.Context, _ bool, row pgx.Row, dst *Result) error {
			return scanTransition(row, t, op, dst)
		}}
}

func scanTransition(row pgx.Row, t Transition, op string, dst *Result) error {
	*dst = Result{}
	var expired bool
	err := scanOrder(row, &dst.Order, &dst.Changed, &dst.From, &expired)
	if errors.Is(err, pgx.ErrNoRows) {
		*dst = Result{}
		return notFound(op, t.OrderID)
	}
	if err != nil {
		*dst = Result{}
		return fmt.Errorf("order: transition %d to %s: %w", t.OrderID, t.To, err)
	}
	return classifyTransition(t, op, expired, dst)
}

// classifyTransition explains a transition statement's outcome from the
// locked row it returned.
func classifyTransition(t Transition, op string, expired bool, dst *Result) error {
	cur := dst.From
	switch {
	case dst.Changed:
		return nil
	case cur == t.To:
		dst.Existing = true
		return nil
	case !transitions.Can(cur, t.To):
		return &Error{Op: op, Err: ErrIllegalTransition, OrderID: t.OrderID, Order: dst.Order, From: cur, To: t.To}
	case t.OnlyIfExpired && !expired:
		return &Error{Op: op, Err: ErrNotExpired, OrderID: t.OrderID, Order: dst.Order, From: cur, To: t.To}
	}
	return modelError(op, t.OrderID, fmt.Sprintf("transition %s -> %s allowed but not applied", cur, t.To))
}
