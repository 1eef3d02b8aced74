package seckill

import "github.com/google/uuid"

// Request is one purchase as the front door admitted it: the ids and the
// quantity every package's input about that purchase shares. A service
// fills it once, from the queue message, and the inputs of inventory and
// order embed it, so each id is written once:
//
//	req := seckill.Request{ /* from the message */ }
//	inventory.Allocation{Request: req}
//	order.NewOrder{Request: req, OrderNo: no, UnitPrice: price, ...}
//
// The front door assigns every id before the message is sent, and a
// redelivery carries the same ones: that is what makes the helpers
// idempotent. A field a helper needs and finds zero is a validation error
// of that helper, naming the field.
type Request struct {
	// RequestID identifies the buyer's click; unique per purchase.
	RequestID uuid.UUID
	// MessageID identifies the queue message carrying the request, the
	// same across its redeliveries: the inbox key and the source recorded
	// in the ledger and the order.
	MessageID uuid.UUID
	// ReservationID is the front door's stock reservation.
	ReservationID uuid.UUID
	// OrderID is the order's primary key, chosen by the front door.
	OrderID int64
	// ActivityID, SKUID and UserID name the sale, the item and the buyer
	// (all > 0); together they are the one-order-per-buyer key.
	ActivityID int64
	SKUID      int64 // see ActivityID
	UserID     int64 // see ActivityID
	// Bucket is the inventory bucket the front door reserved from, 0..255.
	Bucket int16
	// Quantity is the number of units, >= 1.
	Quantity int16
}
