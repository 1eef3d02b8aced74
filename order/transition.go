package order

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/twin"
	"github.com/seckillkit/seckill/pgtx"
)

// Cancel reasons this package uses; any other non-empty reason of at most 64
// characters is accepted too.
const (
	// CancelReasonPayTimeout is the reason of a timeout cancel.
	CancelReasonPayTimeout = "PAY_TIMEOUT"
	// CancelReasonUser is the reason of a cancel requested by the user.
	CancelReasonUser = "USER_CANCEL"
)

// Transition asks TransitionOrder to move one order to a new status.
type Transition struct {
	// OrderID of the order to move; required (> 0).
	OrderID int64
	// To is the target status; it must be a target of the transition
	// table (any status but CREATED).
	To Status
	// CancelReason is stored in cancel_reason; required when To is
	// StatusCancelled (at most 64 characters), ignored otherwise.
	CancelReason string
	// OnlyIfExpired adds the timeout guard expire_at <=
	// statement_timestamp(); allowed only with To == StatusCancelled.
	OnlyIfExpired bool
}

// TimeoutCancel returns the transition of a payment-timeout cancel: to
// CANCELLED, reason PAY_TIMEOUT, only if the order has expired.
func TimeoutCancel(orderID int64) Transition {
	return Transition{OrderID: orderID, To: StatusCancelled, CancelReason: CancelReasonPayTimeout, OnlyIfExpired: true}
}

// UserCancel returns the transition of a user's cancel: to CANCELLED,
// reason USER_CANCEL, expired or not.
func UserCancel(orderID int64) Transition {
	return Transition{OrderID: orderID, To: StatusCancelled, CancelReason: CancelReasonUser}
}

// TransitionResult is the outcome of TransitionOrder when it is not an
// error.
type TransitionResult struct {
	// Order is the order after the call: the updated row when Changed, the
	// unchanged current row when AlreadyInState. It carries what a cancel
	// needs to release stock in the same transaction (ReservationID,
	// ActivityID, SKUID, UserID, Bucket, Quantity, TotalAmount).
	Order Order
	// From is the status the order had before this call.
	From Status
	// Changed is true when this call performed the transition. Exactly one
	// caller ever sees Changed for a given order and target, so "release
	// stock when a cancel Changed" releases it exactly once.
	Changed bool
	// AlreadyInState is true when the order already had the target status:
	// nothing was written (idempotent repeat). Do not release stock again.
	AlreadyInState bool
}

func (t Transition) validate() error {
	switch {
	case t.OrderID <= 0:
		return invalid("Transition.OrderID", "must be > 0")
	case !t.To.Valid():
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

// transitionSQL is the one conditional UPDATE behind every transition.
//
// cur locks the order row (FOR NO KEY UPDATE: enough to serialise status
// changes, while FK checks of payment_record inserts, FOR KEY SHARE, do not
// wait) and, being a locking read under Read Committed, returns the row's
// latest committed version even if it changed after the statement's
// snapshot. The UPDATE's guard is evaluated on cur's values, and since the
// row stays locked until the transaction ends, the row we classify is the
// row the guard saw: a 0-row outcome is explained by the very version that
// caused it (race-free, one statement, one round trip — so it pipelines).
// The UPDATE itself may scan an older version; PostgreSQL then re-applies it
// to the latest (locked) version (EvalPlanQual). The guard deliberately
// tests c.* rather than o.*: o's values come from the statement's snapshot,
// which may predate the lock (a guard on them could skip a row that the
// latest version allows), while c's come from the locked latest version.
// Without the lock in cur, concurrent callers would each pass the guard on
// stale values — TestTransitionConcurrentCancelsClassifiedOnce catches that.
const transitionSQL = `WITH cur AS (
	SELECT {cols}, expire_at <= statement_timestamp() AS expired
	FROM {schema}.orders
	WHERE order_id = $1
	FOR NO KEY UPDATE
), upd AS (
	UPDATE {schema}.orders AS o
	SET status = $2::smallint,
		paid_at = CASE WHEN $2::smallint = 30 THEN statement_timestamp() ELSE o.paid_at END,
		cancelled_at = CASE WHEN $2::smallint = 40 THEN statement_timestamp() ELSE o.cancelled_at END,
		cancel_reason = CASE WHEN $2::smallint = 40 THEN $4::text ELSE o.cancel_reason END,
		version = o.version + 1,
		updated_at = statement_timestamp()
	FROM cur AS c
	WHERE o.order_id = c.order_id
		AND c.status = ANY ($3::smallint[])
		AND (NOT $5::boolean OR c.expired)
	RETURNING {o.cols}
)
SELECT {u.cols}, true, c.status, c.expired FROM upd AS u, cur AS c
UNION ALL
SELECT {c.cols}, false, c.status, c.expired FROM cur AS c WHERE NOT EXISTS (SELECT FROM upd)`

// TransitionOrder moves one order to t.To if the transition table allows
// it from the order's current status (and, for a timeout cancel, the order
// has expired): one conditional UPDATE that sets the status, the status
// timestamps (paid_at for PAID; cancelled_at and cancel_reason for
// CANCELLED), version+1 and updated_at, and returns the row.
//
// A 0-row UPDATE is classified, race-free (see the package documentation):
//
//   - no such order: *NotFoundError ([ErrNotFound]);
//   - already in t.To: result with AlreadyInState, nil error (idempotent);
//   - current status not allowed: *IllegalTransitionError
//     ([ErrIllegalTransition]) with From and To;
//   - allowed but not yet expired: *NotExpiredError ([ErrNotExpired]).
//
// On these classified errors the returned TransitionResult still holds the
// current row (Order, and From = its status), so the caller can report it.
//
// The row stays locked until q's transaction ends. Pass the caller's pgx.Tx
// when the transition must be atomic with other writes — always for a
// cancel, whose stock the caller releases in the same transaction when
// Changed; a pool is fine for stand-alone moves. Invalid input returns a
// *ValidationError before anything is sent.
func (s *Store) TransitionOrder(ctx context.Context, q pgtx.Querier, t Transition) (TransitionResult, error) {
	if q == nil {
		return TransitionResult{}, nilHandle("q")
	}
	if err := t.validate(); err != nil {
		return TransitionResult{}, err
	}
	return s.transitionRow(t).Run(ctx, q)
}

// QueueTransitionOrder queues TransitionOrder's single statement into b;
// the returned error only reports invalid input (nothing queued). When the
// batch runs, the callback fills dst and returns what TransitionOrder would
// return as error (classified the same way).
func (s *Store) QueueTransitionOrder(b *pgx.Batch, t Transition, dst *TransitionResult) error {
	if err := t.validate(); err != nil {
		return err
	}
	if b == nil || dst == nil {
		return invalid("QueueTransitionOrder", "batch and dst must not be nil")
	}
	s.transitionRow(t).Queue(b, dst)
	return nil
}

// transitionRow is the transition statement of a validated t, shared by
// [Store.TransitionOrder] and its Queue twin.
func (s *Store) transitionRow(t Transition) twin.Row[TransitionResult] {
	return twin.Row[TransitionResult]{SQL: s.sql.transition, Args: transitionArgs(t),
		Scan: func(_ context.Context, _ bool, row pgx.Row, dst *TransitionResult) error {
			return scanTransition(row, t, dst)
		}}
}

func scanTransition(row pgx.Row, t Transition, dst *TransitionResult) error {
	*dst = TransitionResult{}
	var expired bool
	err := scanOrder(row, &dst.Order, &dst.Changed, &dst.From, &expired)
	if errors.Is(err, pgx.ErrNoRows) {
		*dst = TransitionResult{}
		return &NotFoundError{OrderID: t.OrderID}
	}
	if err != nil {
		*dst = TransitionResult{}
		return fmt.Errorf("order: transition %d to %s: %w", t.OrderID, t.To, err)
	}
	return classifyTransition(t, expired, dst)
}

// classifyTransition explains a transition statement's outcome from the
// locked row it returned.
func classifyTransition(t Transition, expired bool, dst *TransitionResult) error {
	cur := dst.From
	switch {
	case dst.Changed:
		return nil
	case cur == t.To:
		dst.AlreadyInState = true
		return nil
	case !CanTransition(cur, t.To):
		return &IllegalTransitionError{OrderID: t.OrderID, From: cur, To: t.To}
	case t.OnlyIfExpired && !expired:
		return &NotExpiredError{OrderID: t.OrderID, Status: cur, ExpireAt: dst.Order.ExpireAt}
	}
	return &ModelError{OrderID: t.OrderID, Reason: fmt.Sprintf("transition %s -> %s allowed but not applied", cur, t.To)}
}
