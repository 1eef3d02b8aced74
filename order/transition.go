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
const transitionSQL = transitionCTEs + transitionSelect

// transitionCTEs and transitionSelect are the two parts of transitionSQL.
const transitionCTEs = `WITH cur AS (
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
`

const transitionSelect = `SELECT {u.cols}, true AS changed, c.status AS prev, c.expired AS expired FROM upd AS u, cur AS c
UNION ALL
SELECT {c.cols}, false, c.status, c.expired FROM cur AS c WHERE NOT EXISTS (SELECT FROM upd)`

// transitionOrAbortSQL is transitionSQL for QueueTransitionOrder with
// pgtx.Abort: the same statement, whose refusals raise (order_refuse,
// migration 003) instead of returning the row: SK101 no such order, SK103
// allowed but not yet expired, SK102 any other status but the target. The
// outer join keeps one row when the order does not exist.
const transitionOrAbortSQL = transitionCTEs + `, res AS (
` + transitionSelect + `
)
SELECT r.*, CASE
	WHEN r.order_id IS NULL THEN {schema}.order_refuse('SK101', $1, r.prev, NULL)
	WHEN r.changed OR r.prev = $2::smallint THEN NULL
	WHEN r.prev = ANY ($3::smallint[]) THEN {schema}.order_refuse('SK103', $1, r.prev, NULL)
	ELSE {schema}.order_refuse('SK102', $1, r.prev, ($2::smallint)::text)
END
FROM (SELECT 1) AS one LEFT JOIN res AS r ON true`

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
