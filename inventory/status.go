package inventory

import "github.com/seckillkit/seckill/internal/enum"

// ReservationStatus is the status of an inventory_reservation row. The
// values mirror the CHECK constraint ck_reservation_status one to one.
type ReservationStatus int16

// Reservation statuses.
const (
	// StatusPendingDB: recorded in PostgreSQL, stock not yet decided.
	StatusPendingDB ReservationStatus = 0
	// StatusOrdered: stock allocated and an order created.
	StatusOrdered ReservationStatus = 10
	// StatusRejected: PostgreSQL refused it (sold out, duplicate buyer, …).
	StatusRejected ReservationStatus = 20
	// StatusReleasePending: the order is gone and the stock is to be released.
	StatusReleasePending ReservationStatus = 30
	// StatusReleased: the allocated stock was given back.
	StatusReleased ReservationStatus = 40
	// StatusExpired: never turned into an order before it expired.
	StatusExpired ReservationStatus = 50
	// StatusManualRequired: needs a human; no automatic transition leaves it.
	StatusManualRequired ReservationStatus = 60
)

// ReservationStatuses returns every reservation status in ascending order.
func ReservationStatuses() []ReservationStatus { return statusSet.Values() }

// String returns the name of the status, e.g. "PENDING_DB".
func (s ReservationStatus) String() string { return statusSet.Name(s) }

// Valid reports whether s is one of the defined statuses.
func (s ReservationStatus) Valid() bool { return statusSet.Valid(s) }

var statusSet = enum.New("ReservationStatus", map[ReservationStatus]string{
	StatusPendingDB: "PENDING_DB", StatusOrdered: "ORDERED", StatusRejected: "REJECTED",
	StatusReleasePending: "RELEASE_PENDING", StatusReleased: "RELEASED", StatusExpired: "EXPIRED",
	StatusManualRequired: "MANUAL_REQUIRED",
})

// transitions is the reservation state machine: for every status that can
// be a transition target, the statuses it may be entered from.
var transitions = enum.Transitions[ReservationStatus]{
	StatusOrdered:        {StatusPendingDB},
	StatusRejected:       {StatusPendingDB},
	StatusReleasePending: {StatusOrdered},
	StatusReleased:       {StatusOrdered, StatusReleasePending},
	StatusExpired:        {StatusPendingDB},
	StatusManualRequired: {StatusPendingDB, StatusOrdered, StatusReleasePending},
}

// AllowedFrom returns the statuses a reservation may enter status to from,
// in ascending order; nil when to is not a transition target
// (StatusPendingDB is only ever the initial status). This is the table
// [Store.TransitionReservation] enforces in its WHERE clause:
//
//	ORDERED          <- PENDING_DB
//	REJECTED         <- PENDING_DB
//	RELEASE_PENDING  <- ORDERED
//	RELEASED         <- ORDERED, RELEASE_PENDING
//	EXPIRED          <- PENDING_DB
//	MANUAL_REQUIRED  <- PENDING_DB, ORDERED, RELEASE_PENDING
//
// REJECTED, RELEASED, EXPIRED and MANUAL_REQUIRED are final.
func AllowedFrom(to ReservationStatus) []ReservationStatus { return transitions.AllowedFrom(to) }

// CanTransition reports whether the state machine allows from → to.
func CanTransition(from, to ReservationStatus) bool { return transitions.Can(from, to) }

// LedgerType is the kind of an inventory_ledger row. The values mirror the
// CHECK constraint ck_ledger_type one to one.
type LedgerType int16

// Ledger types.
const (
	// LedgerAllocate: available → allocated for one reservation
	// (idempotency key "ALLOCATE:<reservation_id>").
	LedgerAllocate LedgerType = 10
	// LedgerRelease: allocated → available for one reservation
	// (idempotency key "RELEASE:<reservation_id>").
	LedgerRelease LedgerType = 20
	// LedgerAdjust: available stock moved into or out of a bucket by
	// [Store.Rebalance]; changes the bucket's total.
	LedgerAdjust LedgerType = 30
	// LedgerProvision: a bucket's initial stock, written by [Store.Provision].
	LedgerProvision LedgerType = 40
)

// LedgerTypes returns every ledger type in ascending order.
func LedgerTypes() []LedgerType { return ledgerTypeSet.Values() }

// String returns the name of the ledger type, e.g. "ALLOCATE".
func (t LedgerType) String() string { return ledgerTypeSet.Name(t) }

var ledgerTypeSet = enum.New("LedgerType", map[LedgerType]string{
	LedgerAllocate: "ALLOCATE", LedgerRelease: "RELEASE", LedgerAdjust: "ADJUST", LedgerProvision: "PROVISION",
})
