package inventory

import (
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/internal/failure"
	"github.com/seckillkit/seckill/pgtx"
)

// The queued forms given [pgtx.Abort] raise instead of returning a
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
//	SK008     ErrNotSoldOut            the bucket is not sold out (QueueCheckSoldOut)
//	SK009     ErrReservationNotFound   no reservation has the allocation's (or the transition's) id
//	SK010     ErrAlreadyInState        the reservation is in the transition's target status
//	SK011     ErrIllegalTransition     the reservation's status may not enter the target
//	23505     ErrAlreadyApplied        the ledger row exists (uq_inventory_ledger_idempotency)
//	23505     ErrReservationConflict   the reservation, its request id or its order id exists
//
// The SK codes are raised by the schema's function inventory_refuse
// (migration 008), which runs where the statement runs: on Citus, on the
// node that holds the schema, in the statement Citus routes there whole.
var (
	// ErrNotSoldOut: [Store.QueueCheckSoldOut] found the bucket holding
	// the allocation's quantity: the allocation would not be refused as
	// sold out (with [pgtx.Abort], the rejection did not commit).
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
	"SK010": ErrAlreadyInState,
	"SK011": ErrIllegalTransition,
}

// abortClassifier classifies the errors of a Store's statements in
// schema: the refusals above, and a schema without the inventory tables
// (a *migrate.NotMigratedError).
func abortClassifier(schema string) *failure.Classifier {
	return &failure.Classifier{Schema: schema, Component: "inventory", Codes: refusals,
		Objects: []string{"inventory_sku", "sku_inventory", "inventory_reservation", "inventory_ledger",
			"inventory_sale_log", "inventory_ledger_id_now", "inventory_refuse", "inventory_token", "inventory_stock_row", "inventory_available_units_now"},
		Constraints: map[string]error{
			"uq_inventory_ledger_idempotency": ErrAlreadyApplied,
			"inventory_reservation_pkey":      ErrReservationConflict,
			"uq_reservation_request":          ErrReservationConflict,
			"uq_reservation_order":            ErrReservationConflict,
		}}
}

// refused reports whether err (or an error it wraps) is a refusal that
// inventory_refuse raised (an SK SQLSTATE).
func refused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && refusals[pgErr.Code] != nil
}

// nameAbort marks the statements queued into b from position from as the
// one-batch call name, whose errors s.fail classifies.
func (s *Store) nameAbort(b *pgx.Batch, from int, name string) {
	pgtx.NameCall(b, from, name, s.fail.Classify)
}
