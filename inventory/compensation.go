package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgval"
	"github.com/seckillkit/seckill/pgtx"
)

// CompensationFailure reports one failed attempt to give a RELEASE_PENDING
// reservation back to the front door, for [Store.RecordCompensationFailure].
type CompensationFailure struct {
	ReservationID uuid.UUID // required
	// MaxFailures is the number of failures after which the reservation
	// needs a human: it moves to MANUAL_REQUIRED. 1 to 1000.
	MaxFailures int
	// Code, up to 64 characters, is recorded as the failure
	// code when the reservation is escalated. Defaults to
	// "COMPENSATION_FAILED".
	Code string
}

// CompensationRecorded is the result of [Store.RecordCompensationFailure].
type CompensationRecorded struct {
	Reservation Reservation // the row after the call
	Failures    int         // failures counted so far
	// Escalated is true when this call moved the reservation to
	// MANUAL_REQUIRED.
	Escalated bool
}

// RecordCompensationFailure counts one failed front-door release of a
// RELEASE_PENDING reservation and, when the count reaches f.MaxFailures,
// moves it to MANUAL_REQUIRED (failure code f.Code): automatic handling
// stops there and a human takes over. One statement; the row is locked
// before the status is tested, and a call that waited behind a concurrent
// writer decides on, and reports, the row that writer committed. db is
// usually the transaction that handles the failure.
//
// Errors: [ErrReservationNotFound]; a *Error matching
// [ErrIllegalTransition] (or [ErrAlreadyInState] for MANUAL_REQUIRED) when
// the reservation is not RELEASE_PENDING, carrying the row; nothing is
// written then. *Error for bad input, nothing sent.
func (s *Store) RecordCompensationFailure(ctx context.Context, db pgtx.Querier, f CompensationFailure) (_ CompensationRecorded, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return CompensationRecorded{}, nilHandle("db")
	}
	switch {
	case f.ReservationID == uuid.Nil:
		return CompensationRecorded{}, invalid("ReservationID", "required")
	case f.MaxFailures < 1 || f.MaxFailures > 1000:
		return CompensationRecorded{}, invalid("MaxFailures", "must be between 1 and 1000")
	}
	if err := checkCode("Code", f.Code); err != nil {
		return CompensationRecorded{}, err
	}
	code := f.Code
	if code == "" {
		code = "COMPENSATION_FAILED"
	}
	var (
		out      CompensationRecorded
		updated  bool
		failures int16
	)
	err = db.QueryRow(ctx, s.sql.recordCompensation, pgval.UUID(f.ReservationID), f.MaxFailures, code).
		Scan(append(scanReservationInto(&out.Reservation, &updated), &failures)...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return CompensationRecorded{}, fmt.Errorf("inventory: reservation %s: %w", f.ReservationID, ErrReservationNotFound)
	case err != nil:
		return CompensationRecorded{}, fmt.Errorf("inventory: record compensation failure of %s: %w", f.ReservationID, err)
	case !updated:
		return CompensationRecorded{}, transitionError(f.ReservationID, out.Reservation, StatusManualRequired)
	}
	out.Failures = int(failures)
	out.Escalated = out.Reservation.Status == StatusManualRequired
	return out, nil
}
