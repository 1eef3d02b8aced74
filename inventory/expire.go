package inventory

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// defaultExpireCode is the failure code [Store.ExpireReservations] records.
const defaultExpireCode = "RESERVATION_EXPIRED"

// ExpireReservations moves up to limit PENDING_DB reservations whose
// expires_at has passed to EXPIRED (failure code "RESERVATION_EXPIRED" unless
// one is set), oldest first, and returns them. It runs in the caller's
// transaction tx: enqueue each one's compensation (the front-door release)
// in the same transaction, so an expiry is never without it. Call it until
// it returns fewer than limit.
//
// Races: a reservation locked by a transaction processing its order
// message is skipped (SKIP LOCKED); if that transaction orders it, it is
// never expired. A late order message for a reservation this sweep expired
// waits for the sweep's lock, then finds EXPIRED: [Store.AcquireReservation]
// returns it as is, [Store.TransitionReservation] to ORDERED is an
// *Error ([ErrIllegalTransition]) and [Store.AllocateBucket] an
// *Error (Field "status"). Reservations holding stock are
// ORDERED or later, never PENDING_DB, so an expiry releases nothing.
//
// limit must be between 1 and 10,000 (*Error otherwise).
func (s *Store) ExpireReservations(ctx context.Context, tx pgx.Tx, limit int) (_ []Reservation, err error) {
	defer s.fail.Explain(&err)
	if tx == nil {
		return nil, nilHandle("tx")
	}
	if limit < 1 || limit > 10_000 {
		return nil, invalid("limit", "must be between 1 and 10000")
	}
	rows, err := tx.Query(ctx, s.sql.expire, limit, defaultExpireCode)
	if err != nil {
		return nil, fmt.Errorf("inventory: expire reservations: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Reservation, error) {
		var r Reservation
		err := row.Scan(scanReservationInto(&r)...)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("inventory: expire reservations: %w", err)
	}
	return out, nil
}
