package order

import (
	"errors"
	"fmt"
	"time"

	"github.com/seckillkit/seckill/internal/textcheck"
)

// Sentinel errors. Every error this package returns for a classified
// outcome matches one of them with errors.Is; most are carried by a typed
// error (errors.As) holding the data the caller needs.
var (
	// ErrInvalidArgument: bad input, rejected before anything was sent to
	// the database. The concrete type is *ValidationError.
	ErrInvalidArgument = errors.New("order: invalid argument")
	// ErrNotFound: no order with that id (or request id). The concrete type
	// is *NotFoundError when the lookup key is known.
	ErrNotFound = errors.New("order: not found")
	// ErrUserAlreadyOrdered: Create hit the one-order-per-(activity, sku,
	// user) constraint with a different request. The concrete type is
	// *UserAlreadyOrderedError, carrying the existing order (for the abort
	// of a one-batch [Store.QueueCreateOrAbort], the classified server
	// error: match it with errors.Is).
	ErrUserAlreadyOrdered = errors.New("order: user already ordered this sku in this activity")
	// ErrIDCollision: Create's order_id or order_no (or RecordPayment's
	// payment_id) is already used by an unrelated row. Generate a new id and
	// retry. The concrete type is *IDCollisionError.
	ErrIDCollision = errors.New("order: id collision")
	// ErrModel: the database holds something the model says cannot happen
	// (e.g. a request id reused for another user, a conflict no row
	// explains). Not retryable; investigate. The concrete type is
	// *ModelError.
	ErrModel = errors.New("order: model or data error")
	// ErrIllegalTransition: the order's current status does not allow the
	// requested transition. The concrete type is *IllegalTransitionError.
	ErrIllegalTransition = errors.New("order: illegal status transition")
	// ErrNotExpired: a timeout cancel found the order cancellable but not
	// yet expired (expire_at > statement_timestamp()). The concrete type is
	// *NotExpiredError.
	ErrNotExpired = errors.New("order: not yet expired")
	// ErrAmountMismatch: a payment's amount differs from the order's total.
	// Nothing was written. The concrete type is *MismatchError.
	ErrAmountMismatch = errors.New("order: payment amount does not match the order")
	// ErrCurrencyMismatch: a payment's currency differs from the order's.
	// Nothing was written. The concrete type is *MismatchError.
	ErrCurrencyMismatch = errors.New("order: payment currency does not match the order")
	// ErrConflict is returned by the callbacks of QueueCreate and
	// QueueRecordPayment when the single statement inserted nothing: the
	// conflict is real but not classified yet. Call [Store.ClassifyConflict]
	// or [Store.ClassifyPaymentConflict] in the same transaction to get
	// what Create / RecordPayment would have returned. The concrete type is
	// *ConflictError. It is also matched by the error of a one-batch
	// [Store.QueueCreateOrAbort] that met an order of the same request,
	// reservation or source message (run Create in a new transaction).
	ErrConflict = errors.New("order: insert conflicted, classification needed")
)

// ValidationError rejects an argument. Nothing was written.
type ValidationError struct {
	Field  string // the offending field, e.g. "NewOrder.UserID"
	Reason string // why it is invalid
}

// Error names the field and the reason, e.g.
// "order: invalid NewOrder.OrderID: must be > 0".
func (e *ValidationError) Error() string {
	return textcheck.Message("order", e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalidArgument].
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidArgument }

func invalid(field, reason string) error { return &ValidationError{Field: field, Reason: reason} }

// checkText validates a value bound for a text column: storable text (see
// internal/textcheck), at most max characters, non-empty when required.
func checkText(field, v string, max int, required bool) error {
	if r := textcheck.Reason(v, max, required); r != "" {
		return invalid(field, r)
	}
	return nil
}

// NotFoundError reports that no order has the given id.
type NotFoundError struct {
	OrderID int64 // the id looked up
}

// Error gives the order id.
func (e *NotFoundError) Error() string { return fmt.Sprintf("order: order %d not found", e.OrderID) }

// Is reports whether target is [ErrNotFound].
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// UserAlreadyOrderedError reports that the user already has an order for
// the activity and SKU. Existing is that order as it is now.
type UserAlreadyOrderedError struct {
	Existing Order // the user's order, as the classifying statement read it
}

// Error names the user, SKU and activity and the existing order with its status.
func (e *UserAlreadyOrderedError) Error() string {
	return fmt.Sprintf("order: user %d already ordered sku %d in activity %d (order %d, %s)",
		e.Existing.UserID, e.Existing.SKUID, e.Existing.ActivityID, e.Existing.OrderID, e.Existing.Status)
}

// Is reports whether target is [ErrUserAlreadyOrdered].
func (e *UserAlreadyOrderedError) Is(target error) bool { return target == ErrUserAlreadyOrdered }

// IDCollisionError reports that a generated id is already taken by an
// unrelated row.
type IDCollisionError struct {
	Column string // "order_id", "order_no" or "payment_id"
	Value  string // the colliding value
}

// Error names the column and the colliding value.
func (e *IDCollisionError) Error() string {
	return fmt.Sprintf("order: %s %s already used by another row", e.Column, e.Value)
}

// Is reports whether target is [ErrIDCollision].
func (e *IDCollisionError) Is(target error) bool { return target == ErrIDCollision }

// ModelError reports data the model says cannot exist.
type ModelError struct {
	OrderID int64  // the order concerned, 0 if none
	Reason  string // what is inconsistent
}

// Error gives the order id (when there is one) and the reason.
func (e *ModelError) Error() string {
	if e.OrderID != 0 {
		return fmt.Sprintf("order: model error on order %d: %s", e.OrderID, e.Reason)
	}
	return "order: model error: " + e.Reason
}

// Is reports whether target is [ErrModel].
func (e *ModelError) Is(target error) bool { return target == ErrModel }

// IllegalTransitionError reports that the transition table forbids moving
// the order from its current status From to To. Nothing was written.
type IllegalTransitionError struct {
	OrderID int64  // the order asked for
	From    Status // the order's current status
	To      Status // the requested status
}

// Error gives the order id and the refused move (from, to).
func (e *IllegalTransitionError) Error() string {
	return fmt.Sprintf("order: order %d cannot go from %s to %s", e.OrderID, e.From, e.To)
}

// Is reports whether target is [ErrIllegalTransition].
func (e *IllegalTransitionError) Is(target error) bool { return target == ErrIllegalTransition }

// NotExpiredError reports that a timeout cancel came too early. Nothing was
// written.
type NotExpiredError struct {
	OrderID  int64     // the order asked for
	Status   Status    // the order's current (cancellable) status
	ExpireAt time.Time // when the order expires
}

// Error gives the order id, its status and its expiry time.
func (e *NotExpiredError) Error() string {
	return fmt.Sprintf("order: order %d (%s) does not expire before %s", e.OrderID, e.Status, e.ExpireAt.Format(time.RFC3339Nano))
}

// Is reports whether target is [ErrNotExpired].
func (e *NotExpiredError) Is(target error) bool { return target == ErrNotExpired }

// MismatchError reports a payment that does not match its order. Nothing
// was written.
type MismatchError struct {
	OrderID int64  // the order the payment names
	Field   string // "amount" or "currency"
	Order   string // the order's value
	Payment string // the payment's value
}

// Error names the field and gives the payment's and the order's value.
func (e *MismatchError) Error() string {
	return fmt.Sprintf("order: payment %s %s does not match order %d (%s)", e.Field, e.Payment, e.OrderID, e.Order)
}

// Is matches [ErrAmountMismatch] or [ErrCurrencyMismatch] by Field.
func (e *MismatchError) Is(target error) bool {
	return target == ErrAmountMismatch && e.Field == "amount" ||
		target == ErrCurrencyMismatch && e.Field == "currency"
}

// ConflictError is returned by a queued insert whose statement inserted
// nothing because a unique constraint already held a row. See [ErrConflict].
type ConflictError struct {
	Op      string // "create" or "payment"
	OrderID int64  // the order id of the queued insert (NewOrder.OrderID or Payment.OrderID)
}

// Error names the operation and the order id.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("order: %s for order %d conflicted; classify it", e.Op, e.OrderID)
}

// Is reports whether target is [ErrConflict].
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// nilHandle rejects a nil transaction or connection handle (a
// *ValidationError matching ErrInvalidArgument) instead of letting the call
// panic on it.
func nilHandle(name string) error { return invalid(name, "must not be nil") }
