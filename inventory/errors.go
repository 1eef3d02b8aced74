package inventory

import (
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/internal/textcheck"
	"github.com/seckillkit/seckill/pgtx"
)

// Sentinel errors. Every error the package returns for one of these
// conditions matches the sentinel with errors.Is; the typed errors below
// carry the details.
var (
	// ErrInvalidArgument is matched by every *ValidationError: bad input,
	// rejected before anything was sent to the database.
	ErrInvalidArgument = errors.New("inventory: invalid argument")

	// ErrSoldOut: the bucket has less available stock than requested. The
	// concrete type is *SoldOutError (for the abort of a one-batch form,
	// the classified server error: match it with errors.Is; the table of
	// one-batch conditions is at [ErrReservationExists]).
	ErrSoldOut = errors.New("inventory: sold out")

	// ErrUnknownBucket: no such bucket (or no such SKU) was provisioned.
	ErrUnknownBucket = errors.New("inventory: unknown bucket")

	// ErrUnknownSKU: the SKU was never provisioned.
	ErrUnknownSKU = errors.New("inventory: unknown SKU")

	// ErrAlreadyApplied: the ledger already holds the row this operation
	// would write (its idempotency key exists), so the counters were not
	// touched again. The concrete type is *AppliedError.
	ErrAlreadyApplied = errors.New("inventory: already applied")

	// ErrNotAllocated: a release found no ALLOCATE ledger row for the
	// reservation; there is nothing to give back.
	ErrNotAllocated = errors.New("inventory: reservation has no allocation")

	// ErrInconsistent: the database contradicts an invariant the package
	// relies on (for example a bucket's allocated stock is smaller than an
	// allocation recorded in the ledger). Nothing was written; run [Store.Audit].
	ErrInconsistent = errors.New("inventory: inconsistent inventory state")

	// ErrProvisionConflict: the SKU is already provisioned with a different
	// stock or bucket count. The concrete type is *ProvisionConflictError.
	ErrProvisionConflict = errors.New("inventory: SKU provisioned differently")

	// ErrReservationNotFound: no reservation has the id.
	ErrReservationNotFound = errors.New("inventory: reservation not found")

	// ErrReservationConflict: the reservation id (or its request id) is
	// already recorded with different data. The concrete type is
	// *ReservationConflictError.
	ErrReservationConflict = errors.New("inventory: reservation conflict")

	// ErrAlreadyInState: a transition found the reservation already in the
	// target status. The concrete type is *TransitionError.
	ErrAlreadyInState = errors.New("inventory: reservation already in target status")

	// ErrIllegalTransition: a transition found the reservation in a status
	// the target may not be entered from. The concrete type is
	// *TransitionError.
	ErrIllegalTransition = errors.New("inventory: illegal reservation transition")

	// ErrAllocationMismatch: an allocation does not match its reservation
	// (another activity, SKU, bucket, quantity or buyer), or the
	// reservation may no longer take stock. Nothing was written. The
	// concrete type is *AllocationMismatchError.
	ErrAllocationMismatch = errors.New("inventory: allocation does not match its reservation")

	// ErrConcurrentInsert: a concurrent transaction inserted the same row and
	// committed while the statement ran, so the statement's snapshot could
	// neither insert nor see it. Nothing was written; running the statement
	// again resolves it ([Store.AcquireReservation] and [Store.Provision]
	// do so themselves; batch forms return this error).
	ErrConcurrentInsert = errors.New("inventory: concurrent insert, run the statement again")
)

// ValidationError rejects one input field. It matches [ErrInvalidArgument].
// Nothing was sent to the database.
type ValidationError struct {
	Field  string // the offending field, e.g. "Quantity"
	Reason string // what is wrong with it
}

// Error names the field and the reason, e.g.
// "inventory: invalid Quantity: must be at least 1".
func (e *ValidationError) Error() string {
	return textcheck.Message("inventory", e.Field, e.Reason)
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

// checkCode validates a ledger reason or failure code: at most
// [MaxCodeLength] characters of storable text ("" is fine: it means the
// default or none).
func checkCode(field, v string) error {
	return checkText(field, v, MaxCodeLength, false)
}

// SoldOutError reports a refused allocation. It matches [ErrSoldOut].
type SoldOutError struct {
	ActivityID, SKUID int64 // the SKU
	Bucket            int16 // the bucket that lacked stock
	// Requested is the units asked: the allocation's quantity, or for
	// [Store.AdjustStock] the units a negative Delta takes away (at most
	// 32767).
	Requested int16
	// Available is the bucket's available stock when the statement
	// refused, read after any wait for the bucket's row lock: what the
	// transaction it waited for left (it may have changed since).
	Available int32
}

// Error names the SKU and bucket and gives the available and the
// requested units.
func (e *SoldOutError) Error() string {
	return fmt.Sprintf("inventory: sold out: activity %d sku %d bucket %d has %d available, %d requested",
		e.ActivityID, e.SKUID, e.Bucket, e.Available, e.Requested)
}

// Is reports whether target is [ErrSoldOut].
func (e *SoldOutError) Is(target error) bool { return target == ErrSoldOut }

// AppliedError reports that a ledger row with the idempotency key already
// exists: the operation was applied before and was not applied again. It
// matches [ErrAlreadyApplied].
type AppliedError struct {
	Key string // the idempotency key, e.g. "ALLOCATE:<reservation_id>"
	// LedgerID is the existing row's id; 0 when the duplicate was caught
	// by the unique index (see TxAborted).
	LedgerID int64
	// TxAborted is true when the duplicate was a concurrent one, caught by
	// the unique index uq_inventory_ledger_idempotency instead of the
	// statement's guard: PostgreSQL raised unique_violation and the
	// caller's transaction is aborted and must be rolled back. Running the
	// whole transaction again then sees the committed row and gets an
	// AppliedError with TxAborted false.
	TxAborted bool
	Err       error // the driver error when TxAborted
}

// Error gives the idempotency key and the existing ledger row, or for a
// concurrent duplicate says that the transaction aborted and adds the
// driver error.
func (e *AppliedError) Error() string {
	if e.TxAborted {
		return fmt.Sprintf("inventory: already applied: %s (concurrent duplicate, transaction aborted): %v", e.Key, e.Err)
	}
	return fmt.Sprintf("inventory: already applied: %s (ledger %d)", e.Key, e.LedgerID)
}

// Is reports whether target is [ErrAlreadyApplied].
func (e *AppliedError) Is(target error) bool { return target == ErrAlreadyApplied }

// Unwrap returns the driver error, if any.
func (e *AppliedError) Unwrap() error { return e.Err }

// ProvisionConflictError reports that a SKU exists with another split. It
// matches [ErrProvisionConflict]. Nothing was written.
type ProvisionConflictError struct {
	ActivityID, SKUID int64 // the SKU
	// ExistingStock and ExistingBuckets are what the database holds.
	ExistingStock   int32
	ExistingBuckets int16 // see ExistingStock
	// RequestedStock and RequestedBuckets are what the call asked for.
	RequestedStock   int32
	RequestedBuckets int16 // see RequestedStock
}

// Error names the SKU and gives the existing and the requested stock and
// bucket count.
func (e *ProvisionConflictError) Error() string {
	return fmt.Sprintf("inventory: activity %d sku %d is provisioned with stock %d in %d buckets, not stock %d in %d buckets",
		e.ActivityID, e.SKUID, e.ExistingStock, e.ExistingBuckets, e.RequestedStock, e.RequestedBuckets)
}

// Is reports whether target is [ErrProvisionConflict].
func (e *ProvisionConflictError) Is(target error) bool { return target == ErrProvisionConflict }

// ReservationConflictError reports that a reservation id or request id is
// taken by different data. It matches [ErrReservationConflict]. Nothing
// was written.
type ReservationConflictError struct {
	ReservationID uuid.UUID // the id the caller asked for
	// Field names what conflicts: "request_id" when another reservation
	// holds the request id, "order_id" when another reservation holds
	// NewReservation.OrderID, otherwise the first differing column of the
	// existing row with the same reservation id ("activity_id", "sku_id",
	// "user_id", "inventory_bucket", "quantity").
	Field string
	// Existing is the existing row holding the reservation id, or, for a
	// request id or order id conflict, the reservation that holds it (only
	// its ReservationID, RequestID and OrderID are set then).
	Existing Reservation
}

// Error names the reservation and the conflicting field (with the other
// reservation for a request id or order id conflict).
func (e *ReservationConflictError) Error() string {
	switch e.Field {
	case "request_id":
		return fmt.Sprintf("inventory: reservation %s: request id %s already belongs to reservation %s",
			e.ReservationID, e.Existing.RequestID, e.Existing.ReservationID)
	case "order_id":
		return fmt.Sprintf("inventory: reservation %s: order id %d already belongs to reservation %s",
			e.ReservationID, e.Existing.OrderID, e.Existing.ReservationID)
	}
	return fmt.Sprintf("inventory: reservation %s exists with a different %s", e.ReservationID, e.Field)
}

// Is reports whether target is [ErrReservationConflict].
func (e *ReservationConflictError) Is(target error) bool { return target == ErrReservationConflict }

// TransitionError reports a conditional reservation transition that
// updated no row although the reservation exists. It matches
// [ErrAlreadyInState] when Current equals Target and [ErrIllegalTransition]
// otherwise.
type TransitionError struct {
	ReservationID uuid.UUID         // the reservation asked for
	Current       ReservationStatus // the status found (after waiting for concurrent writers)
	Target        ReservationStatus // the status asked for
	// Reservation is the row as found (locked FOR UPDATE by the statement);
	// for an ORDERED reservation its OrderID names the existing order.
	Reservation Reservation
}

// Error names the reservation and says it is already in the target status,
// or gives the illegal transition (current -> target).
func (e *TransitionError) Error() string {
	if e.Current == e.Target {
		return fmt.Sprintf("inventory: reservation %s already %s", e.ReservationID, e.Target)
	}
	return fmt.Sprintf("inventory: reservation %s: illegal transition %s -> %s", e.ReservationID, e.Current, e.Target)
}

// Is matches [ErrAlreadyInState] or [ErrIllegalTransition].
func (e *TransitionError) Is(target error) bool {
	if e.Current == e.Target {
		return target == ErrAlreadyInState
	}
	return target == ErrIllegalTransition
}

// uniqueViolation reports whether err is a unique_violation of constraint.
func uniqueViolation(err error, constraint string) bool {
	c, ok := pgtx.UniqueViolationOf(err)
	return ok && c == constraint
}

// nilHandle rejects a nil transaction or connection handle (a
// *ValidationError matching ErrInvalidArgument) instead of letting the call
// panic on it.
func nilHandle(name string) error { return invalid(name, "must not be nil") }

// AllocationMismatchError reports an allocation that its reservation does
// not allow. It matches [ErrAllocationMismatch]. Nothing was written and
// the transaction stays usable.
type AllocationMismatchError struct {
	ReservationID uuid.UUID // the allocation's reservation
	// Field is the reservation column that disagrees ("activity_id",
	// "sku_id", "inventory_bucket", "quantity", "user_id"), or "status"
	// when the reservation is neither PENDING_DB nor ORDERED.
	Field string
	// Reservation is the reservation's value, Allocation the caller's (for
	// "status": the allowed statuses), both as text.
	Reservation, Allocation string
}

// Error names the reservation and the field, with the reservation's and
// the allocation's value.
func (e *AllocationMismatchError) Error() string {
	return fmt.Sprintf("inventory: allocation for reservation %s: %s is %s in the reservation, %s in the allocation",
		e.ReservationID, e.Field, e.Reservation, e.Allocation)
}

// Is reports whether target is [ErrAllocationMismatch].
func (e *AllocationMismatchError) Is(target error) bool { return target == ErrAllocationMismatch }
