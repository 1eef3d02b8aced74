package order

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/seckillkit/seckill/internal/textcheck"
)

// Sentinel errors. Every error this package returns for a refusal or a
// classified outcome matches one of them with errors.Is; those that carry
// data the caller acts on are an [*Error] (errors.As). The error of a
// queued form with pgtx.Abort is the server's, classified: it matches the
// sentinel and names the call ([pgtx.StatementError]).
var (
	// ErrInvalidArgument: bad input, rejected before anything was sent to
	// the database; [Error.Field] names the field.
	ErrInvalidArgument = errors.New("order: invalid argument")
	// ErrNotFound: no order with that id (or request id, or buyer); for
	// [Store.ResolvePaymentReview], no review with that id.
	ErrNotFound = errors.New("order: not found")
	// ErrUserAlreadyOrdered: Create hit the one-order-per-(activity, sku,
	// user) constraint with a different request. [Error.Order] is the
	// existing order (for the abort of a one-batch [Store.QueueCreate]
	// with pgtx.Abort, the classified server error: match it with
	// errors.Is and read the order with [Store.Get]).
	ErrUserAlreadyOrdered = errors.New("order: user already ordered this sku in this activity")
	// ErrIDCollision: Create's order_id or order_no (or RecordPayment's
	// payment_id) is already used by an unrelated row. Generate a new id
	// and retry. [Error.Field] names the column, [Error.Value] the value.
	ErrIDCollision = errors.New("order: id collision")
	// ErrModel: the database holds something the model says cannot happen
	// (e.g. a request id reused for another user, a conflict no row
	// explains). Not retryable; investigate. [Error.Reason] says what.
	ErrModel = errors.New("order: model or data error")
	// ErrIllegalTransition: the order's current status ([Error.From]) does
	// not allow the requested transition (to [Error.To]).
	ErrIllegalTransition = errors.New("order: illegal status transition")
	// ErrNotExpired: a timeout cancel found the order cancellable but not
	// yet expired (expire_at > statement_timestamp()); [Error.Order] holds
	// its expire_at.
	ErrNotExpired = errors.New("order: not yet expired")
	// ErrMismatch: a payment's amount or currency ([Error.Field] "amount"
	// or "currency") differs from the order's ([Error.Order]). Nothing was
	// written.
	ErrMismatch = errors.New("order: payment does not match the order")
	// ErrConflict is returned by the callbacks of [Store.QueueCreate] and
	// [Store.QueueRecordPayment] with [pgtx.Return] when the single
	// statement inserted nothing: the conflict is real but not classified
	// yet. Run the direct form ([Store.Create], [Store.RecordPayment]) with
	// the same input in the same transaction: it writes nothing and
	// returns the classified outcome. It is also matched by the error of a
	// queued form with [pgtx.Abort] that met an order of the same request,
	// reservation or message, or a payment already recorded (run the
	// direct form in a new transaction).
	ErrConflict = errors.New("order: insert conflicted, classification needed")
	// ErrReviewResolved is matched when [Store.ResolvePaymentReview] finds
	// the review already resolved; nothing is written (the first
	// resolution stands).
	ErrReviewResolved = errors.New("order: payment review already resolved")
)

// Error is the error of a helper of this package: the sentinel it matches
// (Err, returned by Unwrap) with the data of the refusal. Which fields are
// set depends on Err, as each sentinel's documentation says. Nothing was
// written when a helper returns it.
type Error struct {
	Op      string // the helper, e.g. "Create" or "QueueTransitionOrder"
	Err     error  // the sentinel, e.g. ErrIllegalTransition
	OrderID int64  // the order concerned; 0 if none
	// Order is the row the classifying statement read: the buyer's
	// existing order (ErrUserAlreadyOrdered), the order's current row
	// (ErrIllegalTransition, ErrNotExpired), the order a payment does not
	// match (ErrMismatch).
	Order Order
	// From is the order's current status and To the requested one
	// (ErrIllegalTransition; From also for ErrNotExpired).
	From, To Status
	// Field names the offending field (ErrInvalidArgument, e.g.
	// "NewOrder.UserID"), the column of a colliding id (ErrIDCollision:
	// "order_id", "order_no" or "payment_id") or what a payment does not
	// match (ErrMismatch: "amount" or "currency").
	Field string
	// Value is the colliding id (ErrIDCollision) or the payment's amount
	// or currency (ErrMismatch).
	Value string
	// Reason says why (ErrInvalidArgument, ErrModel).
	Reason string
}

// Error describes the refusal, e.g. "order: order 7 cannot go from PAID
// to CANCELLED" or "order: invalid NewOrder.OrderID: must be > 0".
func (e *Error) Error() string {
	switch e.Err {
	case ErrInvalidArgument:
		return textcheck.Message("order", e.Field, e.Reason)
	case ErrNotFound:
		return fmt.Sprintf("order: order %d not found", e.OrderID)
	case ErrUserAlreadyOrdered:
		o := e.Order
		return fmt.Sprintf("order: user %d already ordered sku %d in activity %d (order %d, %s)",
			o.UserID, o.SKUID, o.ActivityID, o.OrderID, o.Status)
	case ErrIDCollision:
		return fmt.Sprintf("order: %s %s already used by another row", e.Field, e.Value)
	case ErrModel:
		if e.OrderID != 0 {
			return fmt.Sprintf("order: model error on order %d: %s", e.OrderID, e.Reason)
		}
		return "order: model error: " + e.Reason
	case ErrIllegalTransition:
		return fmt.Sprintf("order: order %d cannot go from %s to %s", e.OrderID, e.From, e.To)
	case ErrNotExpired:
		return fmt.Sprintf("order: order %d (%s) does not expire before %s", e.OrderID, e.From, e.Order.ExpireAt.Format(time.RFC3339Nano))
	case ErrMismatch:
		want := e.Order.Currency
		if e.Field == "amount" {
			want = strconv.FormatInt(e.Order.TotalAmount, 10)
		}
		return fmt.Sprintf("order: payment %s %s does not match order %d (%s)", e.Field, e.Value, e.OrderID, want)
	case ErrConflict:
		return fmt.Sprintf("order: %s for order %d conflicted with an existing row; the direct form (Create, RecordPayment) in the same transaction classifies it", e.Op, e.OrderID)
	}
	return fmt.Sprintf("order: %s: %v", e.Op, e.Err)
}

// Unwrap returns the sentinel, so that errors.Is(err, ErrX) matches.
func (e *Error) Unwrap() error { return e.Err }

func invalid(field, reason string) error {
	return &Error{Err: ErrInvalidArgument, Field: field, Reason: reason}
}

func notFound(op string, orderID int64) error {
	return &Error{Op: op, Err: ErrNotFound, OrderID: orderID}
}

func modelError(op string, orderID int64, reason string) error {
	return &Error{Op: op, Err: ErrModel, OrderID: orderID, Reason: reason}
}

// checkText validates a value bound for a text column: storable text (see
// internal/textcheck), at most max characters, non-empty when required.
func checkText(field, v string, max int, required bool) error {
	if r := textcheck.Reason(v, max, required); r != "" {
		return invalid(field, r)
	}
	return nil
}

// nilHandle rejects a nil transaction or connection handle (an *Error
// matching ErrInvalidArgument) instead of letting the call panic on it.
func nilHandle(name string) error { return invalid(name, "must not be nil") }
