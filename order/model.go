package order

import (
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
)

// Order is one row of the orders table.
//
// The times are timestamptz values as pgx reads them (in the process's
// local time zone). ExpireAt is the caller's (NewOrder.ExpireAt); the
// others are the server's statement time of the write that set them.
type Order struct {
	// Request holds the purchase's ids as NewOrder gave them: OrderID
	// (order_id, the primary key), RequestID, ReservationID and MessageID
	// (request_id, reservation_id, source_message_id: each unique across
	// orders), ActivityID, SKUID and UserID (the one-order-per-user key),
	// Bucket (inventory_bucket, the stock bucket the order took its unit
	// from) and Quantity (always 1, ck_orders_quantity).
	seckill.Request
	OrderNo     string // order_no, the user-facing number (unique): NewOrder.OrderNo as the service gave it
	UnitPrice   int64  // minor units (e.g. fen)
	TotalAmount int64  // UnitPrice × Quantity
	Currency    string // three upper-case letters (ISO 4217), e.g. "CNY"
	Status      Status // the current status; it changes only through conditional transitions
	// ExpireAt is when an unpaid (CREATED or PAYING) order may be
	// cancelled by timeout; set at creation, never changed.
	ExpireAt     time.Time
	PaidAt       *time.Time // set exactly when the order was paid (PAID, REFUND_PENDING, CLOSED after payment)
	CancelledAt  *time.Time // set exactly when the order was cancelled (CANCELLED, CLOSED after cancel)
	CancelReason string     // set with CancelledAt
	Version      int64      // +1 on every transition
	CreatedAt    time.Time  // created_at: when the order was inserted
	UpdatedAt    time.Time  // updated_at: the last transition (CreatedAt when none)
}

// Result is the outcome of a write to one order that is not an error:
// [Store.Create], [Store.TransitionOrder], and each order of
// [Store.CancelExpired].
type Result struct {
	// Order is the order after the call: the inserted or updated row when
	// Changed, the existing row otherwise. It carries what a cancel needs
	// to release stock in the same transaction (ReservationID,
	// ActivityID, SKUID, UserID, Bucket, Quantity, TotalAmount).
	Order Order
	// From is the status the order had before a transition (0 for
	// Create).
	From Status
	// Changed is true when this call wrote the order: inserted it
	// (Create) or performed the transition. Exactly one caller ever sees
	// Changed for a given order and target, so "release stock when a
	// cancel Changed" releases it exactly once.
	Changed bool
	// Existing is true when nothing was written because the order already
	// was what the call asked for: Create found the order of the same
	// request (same request id, reservation id or message id, and the
	// same activity, SKU and user) — treat it as success of a retry;
	// TransitionOrder found the order already in the target status
	// (idempotent repeat: do not release stock again).
	Existing bool
}

// orderColumns lists the orders columns in the order scanOrder expects.
var orderColumns = []string{
	"order_id", "order_no", "request_id", "reservation_id", "source_message_id",
	"activity_id", "sku_id", "user_id", "inventory_bucket", "quantity",
	"unit_price", "total_amount", "currency", "status", "expire_at",
	"paid_at", "cancelled_at", "cancel_reason", "version", "created_at", "updated_at",
}

// orderDest returns scan destinations for the columns of orderColumns.
func orderDest(o *Order, reason **string) []any {
	return []any{
		&o.OrderID, &o.OrderNo, &o.RequestID, &o.ReservationID, &o.MessageID,
		&o.ActivityID, &o.SKUID, &o.UserID, &o.Bucket, &o.Quantity,
		&o.UnitPrice, &o.TotalAmount, &o.Currency, &o.Status, &o.ExpireAt,
		&o.PaidAt, &o.CancelledAt, reason, &o.Version, &o.CreatedAt, &o.UpdatedAt,
	}
}

// scanOrder scans orderColumns followed by extra destinations.
func scanOrder(row pgx.Row, o *Order, extra ...any) error {
	var reason *string
	if err := row.Scan(append(orderDest(o, &reason), extra...)...); err != nil {
		return err
	}
	o.CancelReason = ""
	if reason != nil {
		o.CancelReason = *reason
	}
	return nil
}

// item is one row of order_items (read by the tests).
type item struct {
	OrderID    int64     // the order the line belongs to
	LineNo     int16     // line_no, from 1 (Create writes one line, 1)
	ActivityID int64     // the order's activity
	SKUID      int64     // the SKU of the line
	SKUTitle   string    // the title snapshot taken at order time (NewOrder.SKUTitle), 1 to 256 characters
	Quantity   int16     // units on the line, at least 1
	UnitPrice  int64     // the price snapshot, minor units (e.g. fen)
	LineAmount int64     // UnitPrice × Quantity, minor units
	CreatedAt  time.Time // created_at: the server time of the inserting statement
}
