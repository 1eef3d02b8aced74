package inventory

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// TypeQuantity is one line of [Store.LedgerByType]: the ledger rows of one
// activity and SKU of one type.
type TypeQuantity struct {
	ActivityID, SKUID int64  // the SKU
	Type              string // the ledger type of the rows counted: "ALLOCATE", "RELEASE", "ADJUST" or "PROVISION"
	Rows              int64  // the number of rows (never 0: types without rows are absent)
	// Quantity is the units the rows moved: allocated for ALLOCATE,
	// released for RELEASE, the net total change for ADJUST and PROVISION.
	Quantity                                   int64
	AvailableDelta, AllocatedDelta, TotalDelta int64 // the sums of the rows' deltas
}

// LedgerByType is the inventory side of a reconciliation (with order's
// QuantitiesByStatus and outbox's EventsByStatus): the
// ledger's rows and quantities per type (ALLOCATE, RELEASE, ADJUST,
// PROVISION) for one activity and SKU (skuID 0: every SKU of the
// activity). Types without rows are absent. ALLOCATE minus RELEASE is the
// stock held by live orders; compare it with the order report.
func (s *Store) LedgerByType(ctx context.Context, db pgtx.Querier, activityID, skuID int64) (_ []TypeQuantity, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return nil, nilHandle("db")
	}
	if activityID <= 0 || skuID < 0 {
		return nil, invalid("activityID/skuID", "activity must be > 0, sku >= 0")
	}
	var sku *int64
	if skuID > 0 {
		sku = &skuID
	}
	rows, err := db.Query(ctx, s.sql.ledgerByType, activityID, sku)
	if err != nil {
		return nil, fmt.Errorf("inventory: ledger by type: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TypeQuantity, error) {
		var r TypeQuantity
		err := row.Scan(&r.ActivityID, &r.SKUID, ledgerTypeName{&r.Type}, &r.Rows, &r.Quantity, &r.AvailableDelta, &r.AllocatedDelta, &r.TotalDelta)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("inventory: ledger by type: %w", err)
	}
	return out, nil
}
