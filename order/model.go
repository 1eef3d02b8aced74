package order

import (
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Order is one row of the orders table.
type Order struct {
	OrderID         int64
	OrderNo         string
	RequestID       uuid.UUID
	ReservationID   uuid.UUID
	SourceMessageID uuid.UUID
	ActivityID      int64
	SKUID           int64
	UserID          int64
	Bucket          int16 // inventory_bucket: the stock bucket the order took its unit from
	Quantity        int16
	UnitPrice       int64 // minor units (e.g. fen)
	TotalAmount     int64 // UnitPrice × Quantity
	Currency        string
	Status          Status
	ExpireAt        time.Time
	PaidAt          *time.Time // set exactly when the order was paid (PAID, REFUND_PENDING, CLOSED after payment)
	CancelledAt     *time.Time // set exactly when the order was cancelled (CANCELLED, CLOSED after cancel)
	CancelReason    string     // set with CancelledAt
	Version         int64      // +1 on every transition
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// orderColumns lists the orders columns in the order scanOrder expects.
var orderColumns = []string{
	"order_id", "order_no", "request_id", "reservation_id", "source_message_id",
	"activity_id", "sku_id", "user_id", "inventory_bucket", "quantity",
	"unit_price", "total_amount", "currency", "status", "expire_at",
	"paid_at", "cancelled_at", "cancel_reason", "version", "created_at", "updated_at",
}

// cols returns the column list with each name prefixed (e.g. "o.").
func cols(prefix string) string {
	var b strings.Builder
	for i, c := range orderColumns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(prefix)
		b.WriteString(c)
	}
	return b.String()
}

// orderDest returns scan destinations for the columns of orderColumns.
func orderDest(o *Order, reason **string) []any {
	return []any{
		&o.OrderID, &o.OrderNo, &o.RequestID, &o.ReservationID, &o.SourceMessageID,
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

// Item is one row of order_items.
type Item struct {
	OrderID    int64
	LineNo     int16
	ActivityID int64
	SKUID      int64
	SKUTitle   string
	Quantity   int16
	UnitPrice  int64
	LineAmount int64
	CreatedAt  time.Time
}

// PaymentRecord is one row of payment_record (without raw_payload).
type PaymentRecord struct {
	PaymentID        uuid.UUID
	PaymentRequestID uuid.UUID
	OrderID          int64
	Provider         string
	ProviderTradeNo  string
	CallbackID       string
	Amount           int64
	Currency         string
	Status           PaymentStatus
	PaidAt           *time.Time
	CreatedAt        time.Time
}
