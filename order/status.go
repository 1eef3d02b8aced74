package order

import "github.com/seckillkit/seckill/internal/enum"

// Status is an order's state, stored in orders.status. The values mirror the
// ck_orders_status CHECK constraint 1:1.
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

// Statuses returns every order status in ascending order.
func Statuses() []Status { return statusSet.Values() }

// Valid reports whether s is one of the order statuses.
func (s Status) Valid() bool { return statusSet.Valid(s) }

// String returns the name of s (e.g. "CREATED"), or "Status(n)" for
// an unknown value.
func (s Status) String() string { return statusSet.Name(s) }

var statusSet = enum.New("Status", map[Status]string{
	StatusCreated: "CREATED", StatusPaying: "PAYING", StatusPaid: "PAID",
	StatusCancelled: "CANCELLED", StatusClosed: "CLOSED", StatusRefundPending: "REFUND_PENDING",
})

// transitions is THE transition table: target status → the statuses it may
// be reached from. It is never modified. CREATED is no target (orders are
// born CREATED by Create).
//
//	to              allowed from               timestamps set
//	PAYING          CREATED                    -
//	PAID            CREATED, PAYING            paid_at
//	CANCELLED       CREATED, PAYING            cancelled_at, cancel_reason
//	                (timeout cancel also needs expire_at <= statement_timestamp())
//	REFUND_PENDING  PAID                       -
//	CLOSED          CANCELLED, PAID, REFUND_PENDING  -
var transitions = enum.Transitions[Status]{
	StatusPaying:        {StatusCreated},
	StatusPaid:          {StatusCreated, StatusPaying},
	StatusCancelled:     {StatusCreated, StatusPaying},
	StatusRefundPending: {StatusPaid},
	StatusClosed:        {StatusCancelled, StatusPaid, StatusRefundPending},
}

// AllowedFrom returns the statuses from which an order may move to to, in
// ascending order; nil when to is no target of any transition (CREATED, or
// an unknown status). The result is a fresh slice.
func AllowedFrom(to Status) []Status { return transitions.AllowedFrom(to) }

// CanTransition reports whether the transition table allows from → to.
func CanTransition(from, to Status) bool { return transitions.Can(from, to) }

// PaymentStatus is the state of a payment_record row, mirroring the
// ck_payment_status CHECK constraint 1:1.
type PaymentStatus int16

// The payment statuses. [Store.RecordPayment] writes only
// PaymentSucceeded and PaymentRefundPending.
const (
	// PaymentPending: a payment attempt was created, no result yet.
	PaymentPending PaymentStatus = 0
	// PaymentProcessing: the provider is processing it.
	PaymentProcessing PaymentStatus = 10
	// PaymentSucceeded: money received and applied to the order (paid_at set).
	PaymentSucceeded PaymentStatus = 20
	// PaymentFailed: the provider reported failure.
	PaymentFailed PaymentStatus = 30
	// PaymentRefundPending: money received but not applicable (the order
	// was cancelled, closed or already paid by another payment); it must be
	// refunded.
	PaymentRefundPending PaymentStatus = 40
	// PaymentRefunded: the money went back to the payer.
	PaymentRefunded PaymentStatus = 50
)

// PaymentStatuses returns every payment status in ascending order.
func PaymentStatuses() []PaymentStatus { return paymentStatusSet.Values() }

// String returns the name of s (e.g. "SUCCEEDED"), or "PaymentStatus(n)".
func (s PaymentStatus) String() string { return paymentStatusSet.Name(s) }

var paymentStatusSet = enum.New("PaymentStatus", map[PaymentStatus]string{
	PaymentPending: "PENDING", PaymentProcessing: "PROCESSING", PaymentSucceeded: "SUCCEEDED",
	PaymentFailed: "FAILED", PaymentRefundPending: "REFUND_PENDING", PaymentRefunded: "REFUNDED",
})
