package inventory

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/internal/textcheck"
	"github.com/seckillkit/seckill/pgtx"
)

// Sentinel errors. Every error the package returns for one of these
// conditions matches the sentinel with errors.Is; the typed errors below
// carry the details.
var (
	// ErrInvalidArgument is matched by every *Error: bad input,
	// rejected before anything was sent to the database.
	ErrInvalidArgument = errors.New("inventory: invalid argument")

	// ErrSoldOut: the bucket has less available stock than requested. The
	// concrete type is *Error (for the abort of a one-batch form,
	// the classified server error: match it with errors.Is; the table of
	// one-batch conditions is at [ErrNotSoldOut]).
	ErrSoldOut = errors.New("inventory: sold out")

	// ErrUnknownBucket: no such bucket (or no such SKU) was provisioned.
	ErrUnknownBucket = errors.New("inventory: unknown bucket")

	// ErrUnknownSKU: the SKU was never provisioned.
	ErrUnknownSKU = errors.New("inventory: unknown SKU")

	// ErrAlreadyApplied: the ledger already holds the row this operation
	// would write (its idempotency key exists), so the counters were not
	// touched again. The concrete type is *Error.
	ErrAlreadyApplied = errors.New("inventory: already applied")

	// ErrNotAllocated: a release found no ALLOCATE ledger row for the
	// reservation; there is nothing to give back.
	ErrNotAllocated = errors.New("inventory: reservation has no allocation")

	// ErrInconsistent: the database contradicts an invariant the package
	// relies on (for example a bucket's allocated stock is smaller than an
	// allocation recorded in the ledger). Nothing was written; run [Store.Audit].
	ErrInconsistent = errors.New("inventory: inconsistent inventory state")

	// ErrProvisionConflict: the SKU is already provisioned with a different
	// stock, bucket count or mode (buckets or tokens). The concrete type is *Error.
	ErrProvisionConflict = errors.New("inventory: SKU provisioned differently")

	// ErrReservationNotFound: no reservation has the id.
	ErrReservationNotFound = errors.New("inventory: reservation not found")

	// ErrReservationConflict: the reservation id (or its request id, or
	// the order id of an Ordered reservation) is already recorded with
	// different data: the concrete type is *Error. For the insert of
	// [Store.QueueAcquireReservation] with [pgtx.Abort] it is the
	// classified server error, already recorded at all (the same data
	// included): nothing committed; [Store.AcquireReservation] in a new
	// transaction tells what is there.
	ErrReservationConflict = errors.New("inventory: reservation conflict")

	// ErrAlreadyInState: a transition found the reservation already in the
	// target status. The concrete type is *Error.
	ErrAlreadyInState = errors.New("inventory: reservation already in target status")

	// ErrIllegalTransition: a transition found the reservation in a status
	// the target may not be entered from, or a sale status change is not
	// allowed (from ENDED). The concrete type is *Error.
	ErrIllegalTransition = errors.New("inventory: illegal reservation transition")

	// ErrAllocationMismatch: an allocation does not match its reservation
	// (another activity, SKU, bucket, quantity or buyer), or the
	// reservation may no longer take stock. Nothing was written. The
	// concrete type is *Error.
	ErrAllocationMismatch = errors.New("inventory: allocation does not match its reservation")

	// ErrConcurrentInsert: a concurrent transaction inserted the same row and
	// committed while the statement ran, so the statement's snapshot could
	// neither insert nor see it. Nothing was written; running the statement
	// again resolves it ([Store.AcquireReservation] and [Store.Provision]
	// do so themselves; batch forms return this error).
	ErrConcurrentInsert = errors.New("inventory: concurrent insert, run the statement again")

	// ErrNotOnSale: the SKU is not ON_SALE, or the time is outside its
	// sale window. The concrete type is *Error.
	ErrNotOnSale = errors.New("inventory: not on sale")
)

// Error is every refusal of the package that carries data: it names the
// condition (Err, a sentinel of this package, which it unwraps to, so
// errors.Is matches it) and holds what the statement found. Only the
// fields of its condition are set:
//
//   - [ErrInvalidArgument]: Field and Reason (nothing was sent).
//   - [ErrSoldOut]: ActivityID, SKUID, Bucket, Requested (the allocation's
//     quantity, or for [Store.AdjustStock] the units a negative Delta takes
//     away, at most 32767) and Available, the bucket's available stock when
//     the statement refused, read after any wait for the bucket's row lock.
//   - [ErrAlreadyApplied]: Key, the idempotency key, and LedgerID, the
//     existing row; or TxAborted when the duplicate was a concurrent one,
//     caught by the unique index uq_inventory_ledger_idempotency instead of
//     the statement's guard: PostgreSQL raised unique_violation, the
//     caller's transaction is aborted and must be rolled back, and Cause is
//     the driver error (Unwrap gives it too). Running the whole transaction
//     again sees the committed row and gets TxAborted false.
//   - [ErrAllocationMismatch]: ReservationID, Field (the reservation column
//     that disagrees: "activity_id", "sku_id", "inventory_bucket",
//     "quantity", "user_id", or "status" when the reservation is neither
//     PENDING_DB nor ORDERED), Found (the reservation's value) and Asked
//     (the allocation's; for "status" the allowed statuses), as text.
//   - [ErrProvisionConflict]: ActivityID, SKUID, ExistingStock,
//     ExistingBuckets (what the database holds), RequestedStock and
//     RequestedBuckets (what the call asked for); when the mode differs,
//     also Field "token_stock" with Found and Asked "tokens" or "buckets".
//   - [ErrReservationConflict]: ReservationID (the id asked for), Field
//     ("request_id" when another reservation holds the request id,
//     "order_id" when another holds the order id of an Ordered
//     [NewReservation], otherwise the first differing column of the
//     existing row: "activity_id", "sku_id", "user_id", "inventory_bucket",
//     "quantity") and Reservation, the existing row (for a request id or
//     order id conflict only its ReservationID, RequestID and OrderID).
//   - [ErrAlreadyInState] and [ErrIllegalTransition]: ReservationID,
//     Current (the status found, after waiting for concurrent writers),
//     Target (the status asked for) and Reservation, the row as found
//     (locked FOR UPDATE; for an ORDERED reservation its OrderID names the
//     existing order).
//   - [ErrNotOnSale]: ActivityID, SKUID, Status (the sale status at the
//     statement's time), StartsAt and EndsAt (the sale window; zero: open)
//     and At (the statement's time the window was tested against): the sale
//     has not started when Status is ON_SALE and At is before StartsAt; it
//     has ended when Status is ENDED or At is not before a set EndsAt.
//   - [ErrIllegalTransition] from [Store.SetSaleStatus]: ActivityID, SKUID,
//     From (the current sale status) and To (the one asked for, never 0).
//
// Nothing was written for any of them, and except for TxAborted the
// transaction stays usable.
type Error struct {
	Err   error // the sentinel: [ErrSoldOut], [ErrAlreadyApplied], …
	Cause error // the driver error of a concurrent duplicate (TxAborted)

	ReservationID     uuid.UUID // the reservation asked for
	ActivityID, SKUID int64     // the SKU
	Bucket            int16     // the bucket that lacked stock
	Field, Reason     string    // the offending input field and what is wrong with it, or the column that disagrees
	Requested         int16     // sold out: the units asked
	Available         int32     // sold out: the bucket's available stock
	Key               string    // already applied: the idempotency key, e.g. "ALLOCATE:<reservation_id>"
	LedgerID          int64     // already applied: the existing row; 0 when TxAborted
	TxAborted         bool      // already applied: a concurrent duplicate aborted the transaction
	Found, Asked      string    // allocation mismatch: the reservation's and the allocation's value

	ExistingStock, RequestedStock     int32 // provision conflict: the stock held and asked for
	ExistingBuckets, RequestedBuckets int16 // provision conflict: the bucket counts held and asked for

	Reservation     Reservation       // the row found (reservation conflict, transition)
	Current, Target ReservationStatus // transition: the status found and the one asked for

	Status           SaleStatus // not on sale: the SKU's sale status
	StartsAt, EndsAt time.Time  // not on sale: the sale window; zero means open
	At               time.Time  // not on sale: the statement's time
	From, To         SaleStatus // illegal sale change: the current status and the one asked for
}

// Error describes the refusal with the data of its condition.
func (e *Error) Error() string {
	switch e.Err {
	case ErrInvalidArgument:
		return textcheck.Message("inventory", e.Field, e.Reason)
	case ErrSoldOut:
		return fmt.Sprintf("inventory: sold out: activity %d sku %d bucket %d has %d available, %d requested",
			e.ActivityID, e.SKUID, e.Bucket, e.Available, e.Requested)
	case ErrAlreadyApplied:
		if e.TxAborted {
			return fmt.Sprintf("inventory: already applied: %s (concurrent duplicate, transaction aborted): %v", e.Key, e.Cause)
		}
		return fmt.Sprintf("inventory: already applied: %s (ledger %d)", e.Key, e.LedgerID)
	case ErrAllocationMismatch:
		return fmt.Sprintf("inventory: allocation for reservation %s: %s is %s in the reservation, %s in the allocation",
			e.ReservationID, e.Field, e.Found, e.Asked)
	case ErrProvisionConflict:
		if e.Field == "token_stock" {
			return fmt.Sprintf("inventory: activity %d sku %d is provisioned with %s, not %s",
				e.ActivityID, e.SKUID, e.Found, e.Asked)
		}
		return fmt.Sprintf("inventory: activity %d sku %d is provisioned with stock %d in %d buckets, not stock %d in %d buckets",
			e.ActivityID, e.SKUID, e.ExistingStock, e.ExistingBuckets, e.RequestedStock, e.RequestedBuckets)
	case ErrReservationConflict:
		switch e.Field {
		case "request_id":
			return fmt.Sprintf("inventory: reservation %s: request id %s already belongs to reservation %s",
				e.ReservationID, e.Reservation.RequestID, e.Reservation.ReservationID)
		case "order_id":
			return fmt.Sprintf("inventory: reservation %s: order id %d already belongs to reservation %s",
				e.ReservationID, e.Reservation.OrderID, e.Reservation.ReservationID)
		}
		return fmt.Sprintf("inventory: reservation %s exists with a different %s", e.ReservationID, e.Field)
	case ErrAlreadyInState:
		return fmt.Sprintf("inventory: reservation %s already %s", e.ReservationID, e.Target)
	case ErrIllegalTransition:
		if e.To != 0 {
			return fmt.Sprintf("inventory: activity %d sku %d: illegal sale change %s -> %s", e.ActivityID, e.SKUID, e.From, e.To)
		}
		return fmt.Sprintf("inventory: reservation %s: illegal transition %s -> %s", e.ReservationID, e.Current, e.Target)
	case ErrNotOnSale:
		why := e.Status.String()
		switch {
		case e.notStarted():
			why = "sale starts at " + e.StartsAt.UTC().Format(time.RFC3339)
		case e.Status == SaleOnSale && !e.EndsAt.IsZero() && !e.At.Before(e.EndsAt):
			why = "sale ended at " + e.EndsAt.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("inventory: activity %d sku %d not on sale: %s", e.ActivityID, e.SKUID, why)
	}
	if e.Err == nil {
		return "inventory: error"
	}
	return e.Err.Error()
}

// Unwrap returns the sentinel (Err) and the driver error (Cause) when
// there is one.
func (e *Error) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

func (e *Error) notStarted() bool {
	return e.Status == SaleOnSale && !e.StartsAt.IsZero() && e.At.Before(e.StartsAt)
}

func invalid(field, reason string) error {
	return &Error{Err: ErrInvalidArgument, Field: field, Reason: reason}
}

// checkText validates a value bound for a text column: storable text (see
// internal/textcheck), at most max characters, non-empty when required.
func checkText(field, v string, max int, required bool) error {
	if r := textcheck.Reason(v, max, required); r != "" {
		return invalid(field, r)
	}
	return nil
}

// checkCode validates a ledger reason or failure code: at most
// 64 characters of storable text ("" is fine: it means the
// default or none).
func checkCode(field, v string) error {
	return checkText(field, v, maxCodeLength, false)
}

// uniqueViolation reports whether err is a unique_violation of constraint.
func uniqueViolation(err error, constraint string) bool {
	c, ok := pgtx.UniqueViolationOf(err)
	return ok && c == constraint
}

// nilHandle rejects a nil transaction or connection handle (a
// *Error matching ErrInvalidArgument) instead of letting the call
// panic on it.
func nilHandle(name string) error { return invalid(name, "must not be nil") }

// transitionError reports a transition to target refused on the row r
// (locked): ErrAlreadyInState when r is in target, else ErrIllegalTransition.
func transitionError(id uuid.UUID, r Reservation, target ReservationStatus) *Error {
	e := &Error{Err: ErrIllegalTransition, ReservationID: id, Current: r.Status, Target: target, Reservation: r}
	if r.Status == target {
		e.Err = ErrAlreadyInState
	}
	return e
}
