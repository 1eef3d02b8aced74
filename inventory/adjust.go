package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// maxEvidenceLength bounds the operator and approval reference of an
// ADJUST ledger row (VARCHAR(128) columns).
const maxEvidenceLength = 128

func checkEvidence(field, v string, required bool) error {
	if v == "" && required {
		return invalid(field, "required for a stock adjustment")
	}
	return checkText(field, v, maxEvidenceLength, false)
}

// Adjustment asks [Store.AdjustStock] to change one bucket's stock by hand
// (stock found damaged, a supplier's late delivery, a counting error).
type Adjustment struct {
	ActivityID, SKUID int64 // > 0
	Bucket            int16 // 0..255
	// Delta is added to the bucket's available and total stock and to the
	// SKU's planned stock; not 0.
	Delta int32
	// Operator (who) and ApprovalRef (the approval it was made under, e.g.
	// a ticket id) are required, up to 128 characters; Reason
	// (why) is required, up to 64. An adjustment without them
	// is refused: the database also refuses an ADJUST row without operator
	// and approval (ck_ledger_adjust_evidence).
	Operator, ApprovalRef, Reason string
}

func (a Adjustment) validate() error {
	switch {
	case a.ActivityID <= 0:
		return invalid("ActivityID", "must be positive")
	case a.SKUID <= 0:
		return invalid("SKUID", "must be positive")
	case a.Bucket < 0 || a.Bucket >= maxBuckets:
		return invalid("Bucket", fmt.Sprintf("must be between 0 and %d", maxBuckets-1))
	case a.Delta == 0:
		return invalid("Delta", "must not be 0")
	case a.Reason == "":
		return invalid("Reason", "required for a stock adjustment")
	}
	if err := checkEvidence("Operator", a.Operator, true); err != nil {
		return err
	}
	if err := checkEvidence("ApprovalRef", a.ApprovalRef, true); err != nil {
		return err
	}
	return checkCode("Reason", a.Reason)
}

// adjustKey returns the ledger idempotency key of a manual adjustment:
// "ADJUST:MANUAL:<activity>:<sku>:<approval_ref>:<bucket>". One approval
// adjusts a SKU's bucket once; the same approval may adjust other SKUs.
func adjustKey(a Adjustment) string {
	return fmt.Sprintf("ADJUST:MANUAL:%d:%d:%s:%d", a.ActivityID, a.SKUID, a.ApprovalRef, a.Bucket)
}

// legacyAdjustKey is the key of a manual adjustment written before
// inventory migration 013, "ADJUST:MANUAL:<approval_ref>:<bucket>",
// without its SKU: the adjust statement takes a row with this key and
// the adjustment's activity and SKU as the same adjustment, so one
// retried across the upgrade is not applied twice.
func legacyAdjustKey(a Adjustment) string {
	return fmt.Sprintf("ADJUST:MANUAL:%s:%d", a.ApprovalRef, a.Bucket)
}

// AdjustStock applies a manual stock adjustment in the caller's
// transaction tx, in one statement: the bucket's available and total stock
// and the SKU's planned stock change by a.Delta, and an ADJUST ledger row
// (key "ADJUST:MANUAL:<activity>:<sku>:<approval ref>:<bucket>": one
// approval adjusts a SKU's bucket once) records operator, approval
// reference and reason. It returns that row. A row written before
// inventory migration 013 under the old key
// ("ADJUST:MANUAL:<approval ref>:<bucket>") for the same activity and SKU
// counts as the same adjustment.
//
// Errors: *Error (missing evidence, Delta 0, …; nothing sent);
// [ErrUnknownBucket]; *Error ([ErrSoldOut]) when a negative Delta
// exceeds the available stock; *Error ([ErrAlreadyApplied]) when
// this approval already adjusted the bucket. Nothing is written on any
// error; the transaction stays usable except for a concurrent duplicate
// (Error.TxAborted).
func (s *Store) AdjustStock(ctx context.Context, tx pgx.Tx, a Adjustment) (_ LedgerEntry, err error) {
	defer s.fail.Explain(&err)
	if tx == nil {
		return LedgerEntry{}, nilHandle("tx")
	}
	if err := a.validate(); err != nil {
		return LedgerEntry{}, err
	}
	key := adjustKey(a)
	var (
		ledgerID, appliedID    *int64
		createdAt              *time.Time
		before, after, planned *int32
		allocated              *int32
		curAvail               *int32
	)
	err = tx.QueryRow(ctx, s.sql.adjust, a.ActivityID, a.SKUID, a.Bucket, a.Delta, key, a.Reason, a.Operator, a.ApprovalRef, legacyAdjustKey(a)).
		Scan(&ledgerID, &createdAt, &before, &after, &planned, &allocated, &appliedID, &curAvail)
	switch {
	case err != nil && uniqueViolation(err, "uq_inventory_ledger_idempotency"):
		return LedgerEntry{}, &Error{Err: ErrAlreadyApplied, Key: key, TxAborted: true, Cause: err}
	case err != nil:
		return LedgerEntry{}, fmt.Errorf("inventory: adjust %s: %w", key, err)
	case ledgerID != nil:
		_ = planned // the SKU's new planned stock: read it with [Store.Stock]
		return LedgerEntry{LedgerID: *ledgerID, IdempotencyKey: key, Type: "ADJUST", ActivityID: a.ActivityID, SKUID: a.SKUID,
			Bucket: a.Bucket, TotalDelta: a.Delta, AvailableDelta: a.Delta, BeforeAvailable: *before, AfterAvailable: *after,
			BeforeAllocated: *allocated, AfterAllocated: *allocated, Reason: a.Reason, CreatedAt: *createdAt,
			Operator: a.Operator, ApprovalRef: a.ApprovalRef}, nil
	case appliedID != nil:
		return LedgerEntry{}, &Error{Err: ErrAlreadyApplied, Key: key, LedgerID: *appliedID}
	case curAvail == nil:
		return LedgerEntry{}, fmt.Errorf("inventory: adjust %s: activity %d sku %d bucket %d: %w", key, a.ActivityID, a.SKUID, a.Bucket, ErrUnknownBucket)
	}
	q := -a.Delta
	if q > 32767 {
		q = 32767
	}
	return LedgerEntry{}, &Error{Err: ErrSoldOut, ActivityID: a.ActivityID, SKUID: a.SKUID, Bucket: a.Bucket, Requested: int16(q), Available: *curAvail}
}

// Adjustments lists a SKU's ADJUST rows (manual adjustments and rebalance
// moves) with who made them (Operator), under which approval (ApprovalRef)
// and why (Reason), oldest first. The rows have no reservation, order,
// message or buyer.
func (s *Store) Adjustments(ctx context.Context, db pgtx.Querier, activityID, skuID int64) (_ []LedgerEntry, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return nil, nilHandle("db")
	}
	rows, err := db.Query(ctx, s.sql.adjustments, activityID, skuID)
	if err != nil {
		return nil, fmt.Errorf("inventory: adjustments: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (LedgerEntry, error) {
		e := LedgerEntry{Type: "ADJUST"}
		err := row.Scan(&e.LedgerID, &e.IdempotencyKey, &e.ActivityID, &e.SKUID, &e.Bucket, &e.TotalDelta, &e.AvailableDelta,
			&e.AllocatedDelta, &e.BeforeAvailable, &e.AfterAvailable, &e.BeforeAllocated, &e.AfterAllocated,
			&e.Operator, &e.ApprovalRef, &e.Reason, &e.CreatedAt)
		return e, err
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("inventory: adjustments: %w", err)
	}
	return out, nil
}
