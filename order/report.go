package order

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// StatusQuantity is one line of [Store.QuantitiesByStatus]: the orders of
// one activity and SKU in one status.
type StatusQuantity struct {
	ActivityID, SKUID int64  // the SKU
	Status            Status // the status of the orders counted
	Orders            int64  // number of orders
	Quantity          int64  // sum of their quantities
	Amount            int64  // sum of their total amounts (minor units)
}

// QuantitiesByStatus is the order side of a reconciliation (with
// inventory's LedgerByType and outbox's EventsByStatus):
// the order count, quantity and amount per status, for one activity and
// SKU (skuID 0: every SKU of the activity). Statuses without orders are
// absent. One read; run it on a replica or in a Repeatable Read
// transaction to reconcile it with the other reports in one snapshot.
func (s *Store) QuantitiesByStatus(ctx context.Context, q pgtx.Querier, activityID, skuID int64) (_ []StatusQuantity, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return nil, nilHandle("q")
	}
	if activityID <= 0 || skuID < 0 {
		return nil, invalid("activityID/skuID", "activity must be > 0, sku >= 0")
	}
	var sku *int64
	if skuID > 0 {
		sku = &skuID
	}
	rows, err := q.Query(ctx, s.sql.quantitiesByStatus, activityID, sku)
	if err != nil {
		return nil, fmt.Errorf("order: quantities by status: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (StatusQuantity, error) {
		var r StatusQuantity
		err := row.Scan(&r.ActivityID, &r.SKUID, &r.Status, &r.Orders, &r.Quantity, &r.Amount)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("order: quantities by status: %w", err)
	}
	return out, nil
}
