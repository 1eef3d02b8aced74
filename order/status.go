package order

import "github.com/seckillkit/seckill/internal/enum"

// Status is an order's state, stored in orders.status. The values mirror the
// ck_orders_status CHECK constraint 1:1. The transition table
// ([Store.TransitionOrder]):
//
//	to              allowed from                       timestamps set
//	PAYING          CREATED                            -
//	PAID            CREATED, PAYING                    paid_at
//	CANCELLED       CREATED, PAYING                    cancelled_at, cancel_reason
//	                (timeout cancel also needs expire_at <= statement_timestamp())
//	REFUND_PENDING  PAID                               -
//	CLOSED          CANCELLED, PAID, REFUND_PENDING    -
type Status int16

// The order statuses.
const (
	// StatusCreated: the order exists and holds stock; not paid yet.
	StatusCreated Status = 10
	// StatusPaying: the user started paying; still cancellable on timeout.
	StatusPaying Status = 20
	// StatusPaid: paid (paid_at set). Never cancelled afterwards; a refund
	// goes through StatusRefundPending.
	StatusPaid Status = 30
	// StatusCancelled: cancelled before payment (cancelled_at and
	// cancel_reason set); its stock is released by the caller in the
	// cancelling transaction.
	StatusCancelled Status = 40
	// StatusClosed: terminal; reached from StatusCancelled, StatusPaid
	// (fulfilled) or StatusRefundPending (refunded).
	StatusClosed Status = 50
	// StatusRefundPending: a paid order whose refund is in progress.
	StatusRefundPending Status = 60
)

// String returns the name of s (e.g. "CREATED"), or "Status(n)" for
// an unknown value.
func (s Status) String() string { return statusSet.Name(s) }

func (s Status) valid() bool { return statusSet.Valid(s) }

var statusSet = enum.New("Status", map[Status]string{
	StatusCreated: "CREATED", StatusPaying: "PAYING", StatusPaid: "PAID",
	StatusCancelled: "CANCELLED", StatusClosed: "CLOSED", StatusRefundPending: "REFUND_PENDING",
})

// transitions is THE transition table (documented on [Status]): target
// status → the statuses it may be reached from. It is never modified.
// CREATED is no target (orders are born CREATED by Create).
var transitions = enum.Transitions[Status]{
	StatusPaying:        {StatusCreated},
	StatusPaid:          {StatusCreated, StatusPaying},
	StatusCancelled:     {StatusCreated, StatusPaying},
	StatusRefundPending: {StatusPaid},
	StatusClosed:        {StatusCancelled, StatusPaid, StatusRefundPending},
}

// PaymentStatus is the state of a payment_record row, mirroring the
// ck_payment_status CHECK constraint 1:1: 0 PENDING, 10 PROCESSING,
// 20 SUCCEEDED, 30 FAILED, 40 REFUND_PENDING, 50 REFUNDED. This package
// writes only the two below and changes none.
type PaymentStatus int16

// The payment statuses [Store.RecordPayment] writes.
const (
	// PaymentSucceeded: money received and applied to the order (paid_at set).
	PaymentSucceeded PaymentStatus = 20
	// PaymentRefundPending: money received but not applicable (the order
	// was cancelled, closed or already paid by another payment); it must be
	// refunded.
	PaymentRefundPending PaymentStatus = 40
)

var paymentStatusSet = enum.New("PaymentStatus", map[PaymentStatus]string{
	0: "PENDING", 10: "PROCESSING", PaymentSucceeded: "SUCCEEDED",
	30: "FAILED", PaymentRefundPending: "REFUND_PENDING", 50: "REFUNDED",
})
