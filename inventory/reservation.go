package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// maxCodeLength is the limit, in characters, of failure codes and ledger
// reasons (VARCHAR(64) columns).
const maxCodeLength = 64

// Reservation is one row of inventory_reservation.
//
// The times are timestamptz values as pgx reads them (in the process's
// local time zone); CreatedAt, UpdatedAt, OrderedAt and ReleasedAt are the
// server's statement time, ReservedAt and ExpiresAt the front door's.
type Reservation struct {
	ReservationID  uuid.UUID // reservation_id, the front door's id; the primary key
	RequestID      uuid.UUID // request_id: the buyer's request; unique across reservations
	FirstMessageID uuid.UUID // the message whose processing inserted the row; never updated
	ActivityID     int64     // the SKU's activity
	SKUID          int64     // the SKU
	UserID         int64     // the buyer
	// Bucket is inventory_bucket, the bucket the front door reserved from:
	// the only bucket [Store.AllocateBucket] takes this reservation's
	// stock from.
	Bucket      int16
	Quantity    int16             // units reserved, at least 1
	OrderID     int64             // 0 when none
	Status      ReservationStatus // the current status; it changes only through conditional transitions
	FailureCode string            // "" when none
	ReservedAt  time.Time         // redis_reserved_at: when the front door reserved
	// ExpiresAt is when the reservation lapses unless ordered:
	// [Store.ExpireReservations] moves a PENDING_DB reservation past it to
	// EXPIRED. Always after ReservedAt.
	ExpiresAt  time.Time
	OrderedAt  time.Time // zero when never ordered
	ReleasedAt time.Time // zero when never released
	Version    int64     // 0 at insert, incremented by every change of the row
	CreatedAt  time.Time // created_at: when the row was inserted
	UpdatedAt  time.Time // updated_at: the last change (CreatedAt when never changed)
}

// scanReservationInto returns extra followed by the destinations of the
// reservation columns, in the order every statement returning a
// reservation lists them (TestSharedSQLFragments checks the copies).
func scanReservationInto(r *Reservation, extra ...any) []any {
	return append(extra, &r.ReservationID, &r.RequestID, &r.FirstMessageID, &r.ActivityID, &r.SKUID, &r.UserID,
		&r.Bucket, &r.Quantity, &r.OrderID, &r.Status, &r.FailureCode,
		&r.ReservedAt, &r.ExpiresAt, &nullTime{&r.OrderedAt}, &nullTime{&r.ReleasedAt}, &r.Version, &r.CreatedAt, &r.UpdatedAt)
}

// nullTime scans a nullable timestamptz into a time.Time (zero for NULL).
type nullTime struct{ t *time.Time }

// Scan implements sql.Scanner.
func (n *nullTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*n.t = time.Time{}
	case time.Time:
		*n.t = v
	default:
		return fmt.Errorf("inventory: cannot scan %T into a time", src)
	}
	return nil
}

// GetReservation reads a reservation without locking it. An unknown id
// gives [ErrReservationNotFound].
func (s *Store) GetReservation(ctx context.Context, db pgtx.Querier, id uuid.UUID) (_ Reservation, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return Reservation{}, nilHandle("db")
	}
	var r Reservation
	err = db.QueryRow(ctx, s.sql.getReservation, id).Scan(scanReservationInto(&r)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Reservation{}, fmt.Errorf("inventory: reservation %s: %w", id, ErrReservationNotFound)
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("inventory: read reservation %s: %w", id, err)
	}
	return r, nil
}
