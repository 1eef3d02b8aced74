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

// maxCodeLength is the limit, in characters, of failure codes and ledger
// reasons (VARCHAR(64) columns).
const maxCodeLength = 64

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

const reservationCols = `reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
	inventory_bucket, quantity, coalesce(order_id, 0), status, coalesce(failure_code, ''),
	redis_reserved_at, expires_at, ordered_at, released_at, version, created_at, updated_at`

// qualifiedReservationCols is reservationCols for a statement that joins
// another table (the reservation aliased r).
const qualifiedReservationCols = `r.reservation_id, r.request_id, r.first_message_id, r.activity_id, r.sku_id, r.user_id,
	r.inventory_bucket, r.quantity, coalesce(r.order_id, 0), r.status, coalesce(r.failure_code, ''),
	r.redis_reserved_at, r.expires_at, r.ordered_at, r.released_at, r.version, r.created_at, r.updated_at`

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

// insertReservationSQL inserts reservation $1 (request $2, first message
// $3, activity $4, SKU $5, buyer $6, bucket $7, quantity $8, reserved at
// $9, expiring at $10) as PENDING_DB, or as ORDERED for order $11 when $11
// > 0. acquireSQL, insertReservationOrAbortSQL and acquireInsertSQL add
// their conflict handling to it.
const insertReservationSQL = `INSERT INTO {schema}.inventory_reservation (
		reservation_id, request_id, first_message_id, activity_id, sku_id, user_id,
		inventory_bucket, quantity, status, redis_reserved_at, expires_at, order_id, ordered_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $11::int8 > 0 THEN 10 ELSE 0 END, $9, $10,
	        nullif($11::int8, 0), CASE WHEN $11::int8 > 0 THEN statement_timestamp() END)`

// acquireSQL is one statement: insert PENDING_DB (or ORDERED
// for order $11 when $11 > 0) unless the reservation, its request id or the
// order id exists; otherwise lock the existing row FOR UPDATE (or report
// the reservation holding the request id or the order id).
const acquireSQL = `
WITH ins AS (
	` + insertReservationSQL + `
	ON CONFLICT DO NOTHING
	RETURNING ` + reservationCols + `
), cur AS (
	SELECT ` + reservationCols + `
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $1 AND NOT EXISTS (SELECT 1 FROM ins)
	   FOR UPDATE
), other AS (
	SELECT CASE WHEN request_id = $2 THEN 'request_conflict' ELSE 'order_conflict' END AS kind,
	       reservation_id, request_id, order_id
	  FROM {schema}.inventory_reservation
	 WHERE (request_id = $2 OR (order_id = $11::int8 AND $11::int8 > 0)) AND reservation_id <> $1
	   AND NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM cur)
	 ORDER BY 1 DESC
	 LIMIT 1
)
SELECT 'new', * FROM ins
UNION ALL
SELECT 'existing', * FROM cur
UNION ALL
SELECT kind, reservation_id, request_id, NULL, NULL, NULL, NULL, NULL, NULL, order_id,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
  FROM other`

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

const getReservationSQL = `SELECT ` + reservationCols + ` FROM {schema}.inventory_reservation WHERE reservation_id = $1`

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

// Transition asks [Store.TransitionReservation] to move a reservation to
// a status.
type Transition struct {
	ReservationID uuid.UUID         // required
	To            ReservationStatus // a target of the state machine (see [ReservationStatus])
	// OrderID is required (> 0) for StatusOrdered and recorded with it;
	// ignored otherwise.
	OrderID int64
	// FailureCode, up to 64 characters, is recorded when not
	// empty (e.g. "POSTGRES_SOLD_OUT" with StatusRejected).
	FailureCode string
}

func (t Transition) validate() error {
	switch {
	case t.ReservationID == uuid.Nil:
		return invalid("ReservationID", "required")
	case len(transitions[t.To]) == 0:
		return invalid("To", fmt.Sprintf("%s is not a transition target", t.To))
	case t.To == StatusOrdered && t.OrderID <= 0:
		return invalid("OrderID", "must be positive for ORDERED")
	case t.OrderID < 0:
		return invalid("OrderID", "must not be negative")
	}
	return checkCode("FailureCode", t.FailureCode)
}

// transitionSQL is the conditional transition plus its 0-row
// classification in the same statement: lock first, then decide.
//
// lk locks the row FOR UPDATE; being a locking read in Read Committed it
// waits for a concurrent writer and returns the row's latest committed
// version. The UPDATE's guard tests lk's status, not the status of the
// version the statement's snapshot holds: a guard on the snapshot's version
// would skip a row whose newest version allows the transition (a waiter
// behind PENDING_DB -> ORDERED asking for RELEASE_PENDING). The UPDATE then
// scans the older version and PostgreSQL re-applies it to the latest,
// locked one. When nothing was updated, cur reads that same locked version,
// so the reported status is the one that made the update fail.
const transitionSQL = `
WITH lk AS (
	SELECT status
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $1
	   FOR UPDATE
), upd AS (
	UPDATE {schema}.inventory_reservation
	   SET status = $2::smallint,
	       order_id = CASE WHEN $2::smallint = 10 THEN $3::bigint ELSE order_id END,
	       ordered_at = CASE WHEN $2::smallint = 10 THEN statement_timestamp() ELSE ordered_at END,
	       released_at = CASE WHEN $2::smallint = 40 THEN statement_timestamp() ELSE released_at END,
	       failure_code = coalesce($4::text, failure_code),
	       version = version + 1,
	       updated_at = statement_timestamp()
	 WHERE reservation_id = $1
	   AND (SELECT status FROM lk) = ANY ($5::smallint[])
	RETURNING ` + reservationCols + `
), cur AS (
	SELECT ` + reservationCols + `
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $1 AND NOT EXISTS (SELECT 1 FROM upd)
	   FOR UPDATE
)
SELECT true, * FROM upd
UNION ALL
SELECT false, * FROM cur`

// transitionOrAbortSQL is transitionSQL for [pgtx.Abort]: when the UPDATE
// moves nothing, the SELECT calls inventory_refuse with the condition the
// locked row shows (SK009 no reservation, SK010 already in the target
// status, SK011 a status the target may not be entered from), which raises
// it and aborts the transaction. Parameters as transitionSQL.
const transitionOrAbortSQL = `
WITH lk AS (
	SELECT status
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $1
	   FOR UPDATE
), upd AS (
	UPDATE {schema}.inventory_reservation
	   SET status = $2::smallint,
	       order_id = CASE WHEN $2::smallint = 10 THEN $3::bigint ELSE order_id END,
	       ordered_at = CASE WHEN $2::smallint = 10 THEN statement_timestamp() ELSE ordered_at END,
	       released_at = CASE WHEN $2::smallint = 40 THEN statement_timestamp() ELSE released_at END,
	       failure_code = coalesce($4::text, failure_code),
	       version = version + 1,
	       updated_at = statement_timestamp()
	 WHERE reservation_id = $1
	   AND (SELECT status FROM lk) = ANY ($5::smallint[])
	RETURNING ` + reservationCols + `
)
SELECT u.*, coalesce(u.version, {schema}.inventory_refuse(w.code, NULL, NULL, NULL, NULL, $1::text))
  FROM (SELECT 1) AS one
  LEFT JOIN upd AS u ON true
  LEFT JOIN LATERAL (
	SELECT CASE WHEN l.status IS NULL THEN 'SK009'
	            WHEN l.status = $2::smallint THEN 'SK010'
	            ELSE 'SK011' END AS code
	  FROM (SELECT 1) AS o
	  LEFT JOIN lk AS l ON true
	 WHERE u.version IS NULL) AS w ON true`

// TransitionReservation moves a reservation along the state machine
// of [ReservationStatus] with one conditional UPDATE (status in the allowed
// from-states), setting order_id and ordered_at for ORDERED, released_at
// for RELEASED, and failure_code when given. It returns the updated row.
//
// A zero-row update is classified, never silently ok: an unknown id gives
// [ErrReservationNotFound]; a reservation already in the target status or
// in a status the target may not be entered from gives a *Error
// (matching [ErrAlreadyInState] or [ErrIllegalTransition]) carrying the
// current row. Nothing is written then. The row is locked before the guard
// is tested, so a call that waits behind a concurrent writer decides on the
// status that writer committed: of twenty concurrent callers asking for one
// legal target, exactly one moves the row and the others get
// [ErrAlreadyInState]. An OrderID that another
// reservation already holds violates uq_reservation_order: the error
// matches [ErrReservationConflict] and the transaction is aborted.
//
// db is usually the caller's transaction (the transition belongs with the
// order and ledger writes); a pool works for stand-alone transitions.
func (s *Store) TransitionReservation(ctx context.Context, db pgtx.Querier, t Transition) (_ Reservation, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return Reservation{}, nilHandle("db")
	}
	if err := t.validate(); err != nil {
		return Reservation{}, err
	}
	return s.transitionRow(t).Run(ctx, db)
}

// QueueTransitionReservation queues the transition t into b; dst, when
// not nil, receives the updated row when the batch results are read. The
// returned error is only for invalid input, in which case nothing is
// queued.
//
// With [pgtx.Return] it queues [Store.TransitionReservation]'s statement:
// the callback's error (returned by BatchResults.Close) is classified as
// described there and the transaction stays usable. With [pgtx.Abort] the
// statement raises the refusal instead, which aborts the whole
// transaction, COMMIT included: [ErrReservationNotFound] (SQLSTATE
// SK009), [ErrAlreadyInState] (SK010) or [ErrIllegalTransition] (SK011);
// the error [pgtx.RunBatch] returns names this call and matches the
// sentinel with errors.Is. Run TransitionReservation in a new transaction
// for the row it found.
func (s *Store) QueueTransitionReservation(b *pgx.Batch, t Transition, dst *Reservation, on pgtx.OnRefusal) error {
	if on == pgtx.Abort {
		if err := t.validate(); err != nil {
			return err
		}
		if b == nil {
			return invalid("batch", "must not be nil")
		}
		from := b.Len()
		b.Queue(s.sql.transitionOrAbort, transitionArgs(t)...).QueryRow(func(row pgx.Row) error {
			var (
				r       Reservation
				version int64
			)
			if err := row.Scan(append(scanReservationInto(&r), &version)...); err != nil {
				return err
			}
			if dst != nil {
				*dst = r
			}
			return nil
		})
		s.nameAbort(b, from, "inventory.Store.QueueTransitionReservation(reservation "+t.ReservationID.String()+")")
		return nil
	}
	defer s.fail.Mark(b, "inventory.Store.QueueTransitionReservation")()
	if err := t.validate(); err != nil {
		return err
	}
	if b == nil {
		return invalid("batch", "must not be nil")
	}
	if dst == nil {
		dst = new(Reservation)
	}
	s.transitionRow(t).Queue(b, dst)
	return nil
}

// transitionRow is the transition statement of a validated t, shared by
// [Store.TransitionReservation] and its Queue twin.
func (s *Store) transitionRow(t Transition) twin.Row[Reservation] {
	return twin.Row[Reservation]{SQL: s.sql.transition, Args: transitionArgs(t),
		Scan: func(_ context.Context, _ bool, row pgx.Row, dst *Reservation) error {
			return scanTransition(row, t, dst)
		}}
}

func transitionArgs(t Transition) []any {
	var code *string
	if t.FailureCode != "" {
		code = &t.FailureCode
	}
	from := make([]int16, 0, len(transitions[t.To]))
	for _, f := range transitions[t.To] {
		from = append(from, int16(f))
	}
	return []any{pgval.UUID(t.ReservationID), int16(t.To), t.OrderID, code, from}
}

func scanTransition(row pgx.Row, t Transition, dst *Reservation) error {
	var (
		updated bool
		r       Reservation
	)
	err := row.Scan(scanReservationInto(&r, &updated)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("inventory: reservation %s: %w", t.ReservationID, ErrReservationNotFound)
	}
	if err != nil && uniqueViolation(err, "uq_reservation_order") {
		return fmt.Errorf("inventory: reservation %s: order id %d already belongs to another reservation (transaction aborted): %w: %w",
			t.ReservationID, t.OrderID, ErrReservationConflict, err)
	}
	if err != nil {
		return fmt.Errorf("inventory: transition reservation %s to %s: %w", t.ReservationID, t.To, err)
	}
	if !updated {
		return transitionError(t.ReservationID, r, t.To)
	}
	*dst = r
	return nil
}
