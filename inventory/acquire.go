package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgval"
	"github.com/seckillkit/seckill/internal/twin"
	"github.com/seckillkit/seckill/pgtx"
)

// queueInsertOrAbort is [Store.QueueAcquireReservation] with
// [pgtx.Abort]: the plain insert (statement insert_reservation_abort, or
// insert_rejected_abort with r.FailureCode), returning the row when dst
// is not nil.
func (s *Store) queueInsertOrAbort(b *pgx.Batch, r NewReservation, dst *Acquired) error {
	if err := r.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	sql, returning, args := s.sql.insertReservationOrAbort, s.sql.insertReservationOrAbortReturning, acquireArgs(r)
	if r.FailureCode != "" {
		sql, returning, args[10] = s.sql.insertRejectedOrAbort, s.sql.insertRejectedOrAbortReturning, r.FailureCode
	}
	from := b.Len()
	if dst == nil {
		b.Queue(sql, args...)
	} else {
		b.Queue(returning, args...).QueryRow(func(row pgx.Row) error {
			var got Reservation
			if err := row.Scan(scanReservationInto(&got)...); err != nil {
				return err
			}
			*dst = Acquired{Reservation: got, Created: true}
			return nil
		})
	}
	s.nameAbort(b, from, "inventory.Store.QueueAcquireReservation(reservation "+r.ReservationID.String()+")")
	return nil
}

// NewReservation is what the front door recorded for one purchase: the
// input of [Store.AcquireReservation]. Of the embedded request it uses
// ReservationID, RequestID (unique across reservations) and MessageID (the
// message that first carried it, recorded as the row's FirstMessageID),
// all required; ActivityID, SKUID and UserID (> 0); Bucket (0..255: the
// bucket the front door chose); Quantity (>= 1); and OrderID with Ordered.
type NewReservation struct {
	seckill.Request
	ReservedAt time.Time // required: when the front door reserved
	ExpiresAt  time.Time // required, after ReservedAt

	// Ordered records a newly inserted reservation directly as ORDERED for
	// Request.OrderID (required then, > 0; ordered_at set) instead of
	// PENDING_DB: the happy path of an order transaction then needs no
	// later [Store.TransitionReservation] to ORDERED, one statement and
	// one row version fewer. Use it only when the same transaction creates
	// the order and allocates the stock, and rolls back if either fails (an
	// ORDERED reservation must have both). It changes nothing for an
	// existing reservation, which is returned as it is stored (Created
	// false; check its Status as usual). Another reservation holding the
	// order id is an [*Error] matching [ErrReservationConflict] with Field
	// "order_id". Without Ordered, OrderID is not used.
	Ordered bool

	// FailureCode, when not empty (up to 64 characters), records the new
	// reservation as REJECTED with this failure code: a refusal decided
	// before the transaction (for example by [Store.QueueCheckSoldOut] in
	// the same batch). The row is the one AcquireReservation followed by
	// [Store.TransitionReservation] to REJECTED leaves. Only
	// [Store.QueueAcquireReservation] with [pgtx.Abort] takes it (not with
	// Ordered); the other forms refuse it as invalid.
	FailureCode string
}

func (r NewReservation) validate() error {
	switch {
	case r.ReservationID == uuid.Nil:
		return invalid("ReservationID", "required")
	case r.RequestID == uuid.Nil:
		return invalid("RequestID", "required")
	case r.MessageID == uuid.Nil:
		return invalid("MessageID", "required")
	case r.ActivityID <= 0:
		return invalid("ActivityID", "must be positive")
	case r.SKUID <= 0:
		return invalid("SKUID", "must be positive")
	case r.UserID <= 0:
		return invalid("UserID", "must be positive")
	case r.Bucket < 0 || r.Bucket >= maxBuckets:
		return invalid("Bucket", fmt.Sprintf("must be between 0 and %d", maxBuckets-1))
	case r.Quantity < 1:
		return invalid("Quantity", "must be at least 1")
	case r.ReservedAt.IsZero():
		return invalid("ReservedAt", "required")
	case !r.ExpiresAt.After(r.ReservedAt):
		return invalid("ExpiresAt", "must be after ReservedAt")
	case r.OrderID < 0:
		return invalid("OrderID", "must not be negative")
	case r.Ordered && r.OrderID == 0:
		return invalid("OrderID", "required when Ordered")
	case r.Ordered && r.FailureCode != "":
		return invalid("FailureCode", "must be empty when Ordered")
	}
	return checkCode("FailureCode", r.FailureCode)
}

// orderID is the order id the insert records: Request.OrderID when
// Ordered, else 0 (PENDING_DB).
func (r NewReservation) orderID() int64 {
	if r.Ordered {
		return r.OrderID
	}
	return 0
}

// Acquired is the result of [Store.AcquireReservation].
type Acquired struct {
	Reservation Reservation // the row, locked FOR UPDATE until the transaction ends
	// Created is true when this call inserted the row (status PENDING_DB)
	// and false when it already existed (a redelivery): then check
	// Reservation.Status before doing anything else: the same reservation
	// re-sent under a new message id may have been decided already.
	Created bool
}

// AcquireReservation records a reservation as PENDING_DB (or, with
// r.OrderID, as ORDERED) unless it exists, and locks the row FOR UPDATE in
// either case, in one statement: the lock serialises different
// messages for the same reservation until tx ends. It must run in the
// caller's Read Committed transaction.
//
// An existing row with the same reservation id but a different activity,
// SKU, user, bucket or quantity, or another reservation holding the request
// id (or r.OrderID), gives a *Error (matching
// [ErrReservationConflict]) and writes nothing; the transaction stays
// usable. A different first message id is not a conflict (redelivery under
// a new message id).
//
// When a concurrent transaction inserts the same reservation and commits
// while the statement runs, the statement is run again (at most three
// times), since its snapshot could see neither its own insert nor the
// other one.
//
// With Config.Citus it is two statements sent as one batch (one round
// trip): the insert, then the look-up that locks the row (or finds the
// reservation holding the request id or order id) with a snapshot of its
// own, which needs no second run.
func (s *Store) AcquireReservation(ctx context.Context, tx pgx.Tx, r NewReservation) (_ Acquired, err error) {
	defer s.fail.Explain(&err)
	if tx == nil {
		return Acquired{}, nilHandle("tx")
	}
	if err := r.validate(); err != nil {
		return Acquired{}, err
	}
	if r.FailureCode != "" {
		return Acquired{}, invalid("FailureCode", "only with QueueAcquireReservation and pgtx.Abort")
	}
	for range 3 {
		var (
			out Acquired
			err error
		)
		if s.citus {
			out, err = s.acquireRouted(r).Run(ctx, tx)
		} else {
			out, err = s.acquireRow(r).Run(ctx, tx)
		}
		if errors.Is(err, ErrConcurrentInsert) {
			continue
		}
		return out, err
	}
	return Acquired{}, fmt.Errorf("inventory: acquire reservation %s: %w", r.ReservationID, ErrConcurrentInsert)
}

// QueueAcquireReservation queues the reservation r into b. The returned
// error is only for invalid input, in which case nothing is queued; dst,
// when not nil, receives the result when the batch results are read.
//
// With [pgtx.Return] it queues [Store.AcquireReservation]'s statement;
// the callback's error (returned by BatchResults.Close) is an [*Error]
// matching [ErrReservationConflict], [ErrConcurrentInsert] (a concurrent
// first insert of the same reservation committed during the statement:
// nothing written, run it again) or a driver error. r.FailureCode must be
// empty.
//
// With [pgtx.Abort] it queues the insert of the new reservation, for a
// transaction sent as one batch ([pgtx.RunBatch]) that commits only when
// the reservation is new. It records r as AcquireReservation does for a
// new row (PENDING_DB, ORDERED with r.Ordered, or REJECTED with
// r.FailureCode), and holds the row's lock as the inserter; but a
// reservation that exists is not returned for inspection: the insert
// raises unique_violation (SQLSTATE 23505; [pgtx.UniqueViolationOf] names
// the constraint: the primary key for the same reservation,
// uq_reservation_request for its request id, uq_reservation_order for
// the order id), which aborts the whole transaction, COMMIT included; the
// error [pgtx.RunBatch] returns names this call and matches
// [ErrReservationConflict]. A concurrent insert of the same reservation
// makes it wait, then raise if that transaction commits. Run the general
// path (AcquireReservation, in a new transaction) after an abort to learn
// what the reservation became. A non-nil dst receives the inserted row
// (Created true).
func (s *Store) QueueAcquireReservation(b *pgx.Batch, r NewReservation, dst *Acquired, on pgtx.OnRefusal) error {
	if on == pgtx.Abort {
		return s.queueInsertOrAbort(b, r, dst)
	}
	defer s.fail.Mark(b, "inventory.Store.QueueAcquireReservation")()
	if err := r.validate(); err != nil {
		return err
	}
	if r.FailureCode != "" {
		return invalid("FailureCode", "only with pgtx.Abort")
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	if dst == nil {
		dst = new(Acquired)
	}
	if s.citus {
		s.acquireRouted(r).Queue(b, dst)
	} else {
		s.acquireRow(r).Queue(b, dst)
	}
	return nil
}

// acquireRow is the reservation statement of a validated r, shared by
// [Store.AcquireReservation] and its Queue twin.
func (s *Store) acquireRow(r NewReservation) twin.Row[Acquired] {
	return twin.Row[Acquired]{SQL: s.sql.acquire, Args: acquireArgs(r),
		Scan: func(_ context.Context, _ bool, row pgx.Row, dst *Acquired) error {
			return s.scanAcquire(row, r, dst)
		}}
}

func acquireArgs(r NewReservation) []any {
	return []any{pgval.UUID(r.ReservationID), pgval.UUID(r.RequestID), pgval.UUID(r.MessageID), r.ActivityID, r.SKUID, r.UserID,
		r.Bucket, r.Quantity, r.ReservedAt, r.ExpiresAt, r.orderID()}
}

func (s *Store) scanAcquire(row pgx.Row, r NewReservation, dst *Acquired) error {
	var (
		kind string
		got  Reservation
		// The request-conflict row has NULLs where a reservation has
		// values; scan through nullable holders.
		fm                             *uuid.UUID
		act, sku, user, order, version *int64
		bucket, qty, status            *int16
		code                           *string
		resAt, expAt, ordAt, relAt     *time.Time
		crAt, upAt                     *time.Time
	)
	err := row.Scan(&kind, &got.ReservationID, &got.RequestID, &fm, &act, &sku, &user, &bucket, &qty, &order,
		&status, &code, &resAt, &expAt, &ordAt, &relAt, &version, &crAt, &upAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrConcurrentInsert
	}
	if err != nil {
		return fmt.Errorf("inventory: acquire reservation %s: %w", r.ReservationID, err)
	}
	switch kind {
	case "request_conflict":
		return &Error{Err: ErrReservationConflict, ReservationID: r.ReservationID, Field: "request_id", Reservation: got}
	case "order_conflict":
		got.OrderID = *order
		return &Error{Err: ErrReservationConflict, ReservationID: r.ReservationID, Field: "order_id", Reservation: got}
	}
	got.FirstMessageID, got.ActivityID, got.SKUID, got.UserID = *fm, *act, *sku, *user
	got.Bucket, got.Quantity, got.OrderID, got.Status = *bucket, *qty, *order, ReservationStatus(*status)
	got.FailureCode, got.ReservedAt, got.ExpiresAt, got.Version = *code, *resAt, *expAt, *version
	got.CreatedAt, got.UpdatedAt = *crAt, *upAt
	if ordAt != nil {
		got.OrderedAt = *ordAt
	}
	if relAt != nil {
		got.ReleasedAt = *relAt
	}
	if kind == "existing" {
		if field := reservationDiff(r, got); field != "" {
			return &Error{Err: ErrReservationConflict, ReservationID: r.ReservationID, Field: field, Reservation: got}
		}
	}
	*dst = Acquired{Reservation: got, Created: kind == "new"}
	return nil
}

// reservationDiff names the first business column in which the existing row
// differs from the requested one, or "".
func reservationDiff(r NewReservation, got Reservation) string {
	switch {
	case got.RequestID != r.RequestID:
		return "request_id"
	case got.ActivityID != r.ActivityID:
		return "activity_id"
	case got.SKUID != r.SKUID:
		return "sku_id"
	case got.UserID != r.UserID:
		return "user_id"
	case got.Bucket != r.Bucket:
		return "inventory_bucket"
	case got.Quantity != r.Quantity:
		return "quantity"
	}
	return ""
}

// acquireRouted is AcquireReservation's statement pair for Config.Citus.
// The insert's row answers when there is one; otherwise the second
// statement's, classified as the acquire statement's.
func (s *Store) acquireRouted(r NewReservation) twin.Batch[Acquired] {
	return twin.Batch[Acquired]{Add: func(_ context.Context, _ bool, b *pgx.Batch, dst *Acquired) {
		created := false
		b.Queue(s.sql.acquireInsert, acquireArgs(r)...).QueryRow(func(row pgx.Row) error {
			err := s.scanAcquire(row, r, dst)
			if errors.Is(err, ErrConcurrentInsert) {
				return nil // nothing inserted: the next statement tells why
			}
			created = err == nil
			return err
		})
		b.Queue(s.sql.acquireExisting, pgval.UUID(r.ReservationID), pgval.UUID(r.RequestID), r.orderID()).QueryRow(func(row pgx.Row) error {
			if created {
				var own Acquired // the row just inserted, locked again
				return s.scanAcquire(row, r, &own)
			}
			return s.scanAcquire(row, r, dst)
		})
	}}
}
