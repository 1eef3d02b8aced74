package inventory

import (
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/pgtx"
)

// The one-batch forms (Queue…OrAbort) raise instead of returning a
// classification: the statement that refuses raises an error whose
// SQLSTATE and message name the condition, which aborts the whole
// transaction, COMMIT included. Each form marks its statements as one
// call ([pgtx.NameCall]) that classifies the raised error, so the error
// [pgtx.RunBatch] returns (a *pgtx.StatementError naming the call) matches
// the condition's sentinel with errors.Is, and still unwraps to the
// *pgconn.PgError:
//
//	SQLSTATE  sentinel                 condition
//	SK001     ErrSoldOut               the bucket lacks the stock
//	SK002     ErrNotOnSale             the SKU is not ON_SALE, or outside its sale window
//	SK003     ErrUnknownBucket         no such bucket was provisioned
//	SK004     ErrUnknownSKU            the SKU was never provisioned
//	SK005     ErrAllocationMismatch    the reservation (or its ALLOCATE row) is not this allocation
//	SK006     ErrNotAllocated          a release found no ALLOCATE row
//	SK007     ErrInconsistent          the bucket holds less allocated stock than the release
//	SK008     ErrNotSoldOut            the bucket is not sold out (QueueSoldOutOrAbort)
//	SK009     ErrReservationNotFound   no reservation has the allocation's id
//	23505     ErrAlreadyApplied        the ledger row exists (uq_inventory_ledger_idempotency)
//	23505     ErrReservationExists     the reservation, its request id or its order id exists
//
// The SK codes are raised by the schema's function inventory_refuse
// (migration 006), which runs where the statement runs: on Citus, on the
// node that holds the schema, in the statement Citus routes there whole.
var (
	// ErrReservationExists: a one-batch insert of a reservation
	// ([Store.QueueInsertReservationOrAbort],
	// [Store.QueueInsertRejectedReservationOrAbort]) found the reservation,
	// its request id or its order id already recorded. Nothing committed;
	// [Store.AcquireReservation] in a new transaction tells what is there.
	ErrReservationExists = errors.New("inventory: reservation already recorded")

	// ErrNotSoldOut: [Store.QueueSoldOutOrAbort] found the bucket holding
	// the allocation's quantity: the allocation would not be refused as
	// sold out, so the rejection did not commit.
	ErrNotSoldOut = errors.New("inventory: not sold out")
)

// refusals maps the SQLSTATEs inventory_refuse raises to their sentinels.
var refusals = map[string]error{
	"SK001": ErrSoldOut,
	"SK002": ErrNotOnSale,
	"SK003": ErrUnknownBucket,
	"SK004": ErrUnknownSKU,
	"SK005": ErrAllocationMismatch,
	"SK006": ErrNotAllocated,
	"SK007": ErrInconsistent,
	"SK008": ErrNotSoldOut,
	"SK009": ErrReservationNotFound,
}

// abortError is the error of a one-batch refusal: the server's error (or
// the result callback's error that wraps it), matched to the sentinel of
// its condition.
type abortError struct {
	sentinel error
	err      error
}

// Error is the wrapped error's text: the server's message names the
// condition, with its SQLSTATE.
func (e *abortError) Error() string { return e.err.Error() }

// Is reports whether target is the condition's sentinel.
func (e *abortError) Is(target error) bool { return target == e.sentinel }

// Unwrap returns the server's error (or the callback's error wrapping it).
func (e *abortError) Unwrap() error { return e.err }

// classifyAbort matches the error a one-batch statement raised to its
// condition's sentinel; other errors come back as they are. It is
// idempotent.
func classifyAbort(err error) error {
	var ae *abortError
	var pgErr *pgconn.PgError
	if err == nil || errors.As(err, &ae) || !errors.As(err, &pgErr) {
		return err
	}
	if sentinel, ok := refusals[pgErr.Code]; ok {
		return &abortError{sentinel: sentinel, err: err}
	}
	switch c, _ := pgtx.UniqueViolationOf(err); c {
	case "":
	case "uq_inventory_ledger_idempotency":
		return &abortError{sentinel: ErrAlreadyApplied, err: err}
	case "inventory_reservation_pkey", "uq_reservation_request", "uq_reservation_order":
		return &abortError{sentinel: ErrReservationExists, err: err}
	}
	return err
}

// refused reports whether err (or an error it wraps) is a refusal that
// inventory_refuse raised (an SK SQLSTATE).
func refused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && refusals[pgErr.Code] != nil
}

// nameAbort marks the statements queued into b from position from as the
// one-batch call name, whose errors [classifyAbort] classifies.
func nameAbort(b *pgx.Batch, from int, name string) {
	pgtx.NameCall(b, from, name, classifyAbort)
}
