package inventory

import (
	"fmt"

	"github.com/seckillkit/seckill/internal/enum"
)

// ReservationStatus is the status of an inventory_reservation row. The
// values mirror the CHECK constraint ck_reservation_status one to one.
// [Store.TransitionReservation] enforces the state machine, target <-
// the statuses it may be entered from, in its WHERE clause:
//
//	ORDERED          <- PENDING_DB
//	REJECTED         <- PENDING_DB
//	RELEASE_PENDING  <- ORDERED
//	RELEASED         <- ORDERED, RELEASE_PENDING
//	EXPIRED          <- PENDING_DB
//	MANUAL_REQUIRED  <- PENDING_DB, ORDERED, RELEASE_PENDING
//
// PENDING_DB is only ever the initial status; REJECTED, RELEASED, EXPIRED
// and MANUAL_REQUIRED are final.
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

// reservationStatuses returns every reservation status in ascending order.
func reservationStatuses() []ReservationStatus { return statusSet.Values() }

// String returns the name of the status, e.g. "PENDING_DB".
func (s ReservationStatus) String() string { return statusSet.Name(s) }

// valid reports whether s is one of the defined statuses.
func (s ReservationStatus) valid() bool { return statusSet.Valid(s) }

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

// allowedFrom returns the statuses a reservation may enter status to from,
// in ascending order; nil when to is not a transition target (the table
// at [ReservationStatus]).
func allowedFrom(to ReservationStatus) []ReservationStatus { return transitions.AllowedFrom(to) }

// canTransition reports whether the state machine allows from → to.
func canTransition(from, to ReservationStatus) bool { return transitions.Can(from, to) }

// ledgerType is the kind of an inventory_ledger row. The values mirror the
// CHECK constraint ck_ledger_type one to one; LedgerEntry.Type and
// TypeQuantity.Type carry their names.
type ledgerType int16

// Ledger types.
const (
	ledgerAllocate  ledgerType = 10 // available → allocated for one reservation ("ALLOCATE:<reservation_id>")
	ledgerRelease   ledgerType = 20 // allocated → available for one reservation ("RELEASE:<reservation_id>")
	ledgerAdjust    ledgerType = 30 // a manual adjustment or a rebalance move; changes the bucket's total
	ledgerProvision ledgerType = 40 // a bucket's initial stock, written by [Store.Provision]
)

var ledgerTypeSet = enum.New("LedgerType", map[ledgerType]string{
	ledgerAllocate: "ALLOCATE", ledgerRelease: "RELEASE", ledgerAdjust: "ADJUST", ledgerProvision: "PROVISION",
})

// ledgerTypeName scans a ledger_type column into its name ("ALLOCATE", …).
type ledgerTypeName struct{ s *string }

// Scan implements sql.Scanner.
func (n ledgerTypeName) Scan(src any) error {
	switch v := src.(type) {
	case int64:
		*n.s = ledgerTypeSet.Name(ledgerType(v))
	case int32:
		*n.s = ledgerTypeSet.Name(ledgerType(v))
	case int16:
		*n.s = ledgerTypeSet.Name(ledgerType(v))
	default:
		return fmt.Errorf("inventory: cannot scan %T into a ledger type", src)
	}
	return nil
}
