package order

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

const (
	getByIDSQL      = `SELECT {cols} FROM {schema}.orders WHERE order_id = $1`
	getByRequestSQL = `SELECT {cols} FROM {schema}.orders WHERE request_id = $1`
	getByBuyerSQL   = `SELECT {cols} FROM {schema}.orders WHERE activity_id = $1 AND sku_id = $2 AND user_id = $3`
	itemsSQL        = `SELECT order_id, line_no, activity_id, sku_id, sku_title, quantity, unit_price, line_amount, created_at
FROM {schema}.order_items WHERE order_id = $1 ORDER BY line_no`
	paymentsSQL = `SELECT payment_id, payment_request_id, order_id, provider, coalesce(provider_trade_no, ''),
	coalesce(callback_id, ''), amount, currency, status, paid_at, created_at
FROM {schema}.payment_record WHERE order_id = $1 ORDER BY created_at, payment_id`
)

// Get returns the order with the given id, or a *NotFoundError
// ([ErrNotFound]). It reads without locking.
func (s *Store) Get(ctx context.Context, q pgtx.Querier, orderID int64) (_ Order, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return Order{}, nilHandle("q")
	}
	if orderID <= 0 {
		return Order{}, invalid("orderID", "must be > 0")
	}
	var o Order
	err = scanOrder(q.QueryRow(ctx, s.sql.getByID, orderID), &o)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, &NotFoundError{OrderID: orderID}
	}
	if err != nil {
		return Order{}, fmt.Errorf("order: get %d: %w", orderID, err)
	}
	return o, nil
}

// GetByBuyer returns the buyer's order of a SKU in an activity (unique:
// uq_orders_user_sku, one order per buyer, whatever its status), or an
// error matching [ErrNotFound]. It reads without locking. Use it to name
// the order that made a new one raise uq_orders_user_sku.
func (s *Store) GetByBuyer(ctx context.Context, q pgtx.Querier, activityID, skuID, userID int64) (_ Order, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return Order{}, nilHandle("q")
	}
	if activityID <= 0 || skuID <= 0 || userID <= 0 {
		return Order{}, invalid("GetByBuyer", "activity, SKU and user ids must be > 0")
	}
	var o Order
	err = scanOrder(q.QueryRow(ctx, s.sql.getByBuyer, activityID, skuID, userID), &o)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, fmt.Errorf("%w: no order of user %d for activity %d, SKU %d", ErrNotFound, userID, activityID, skuID)
	}
	if err != nil {
		return Order{}, fmt.Errorf("order: get by buyer %d/%d/%d: %w", activityID, skuID, userID, err)
	}
	return o, nil
}

// GetByRequest returns the order created for requestID (unique), or an
// error matching [ErrNotFound]. Use it to answer a client retrying a
// request whose commit outcome it did not learn.
func (s *Store) GetByRequest(ctx context.Context, q pgtx.Querier, requestID uuid.UUID) (_ Order, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return Order{}, nilHandle("q")
	}
	if requestID == uuid.Nil {
		return Order{}, invalid("requestID", "required")
	}
	var o Order
	err = scanOrder(q.QueryRow(ctx, s.sql.getByRequest, requestID), &o)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, fmt.Errorf("%w: no order for request %s", ErrNotFound, requestID)
	}
	if err != nil {
		return Order{}, fmt.Errorf("order: get by request %s: %w", requestID, err)
	}
	return o, nil
}

// Items returns the item lines of an order by line number (empty if the
// order has none or does not exist).
func (s *Store) Items(ctx context.Context, q pgtx.Querier, orderID int64) (_ []Item, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return nil, nilHandle("q")
	}
	if orderID <= 0 {
		return nil, invalid("orderID", "must be > 0")
	}
	rows, err := q.Query(ctx, s.sql.items, orderID)
	if err != nil {
		return nil, fmt.Errorf("order: items of %d: %w", orderID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Item, error) {
		var it Item
		err := r.Scan(&it.OrderID, &it.LineNo, &it.ActivityID, &it.SKUID, &it.SKUTitle,
			&it.Quantity, &it.UnitPrice, &it.LineAmount, &it.CreatedAt)
		return it, err
	})
	if err != nil {
		return nil, fmt.Errorf("order: items of %d: %w", orderID, err)
	}
	return out, nil
}

// Payments returns the payment records of an order, oldest first (empty
// if none).
func (s *Store) Payments(ctx context.Context, q pgtx.Querier, orderID int64) (_ []PaymentRecord, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return nil, nilHandle("q")
	}
	if orderID <= 0 {
		return nil, invalid("orderID", "must be > 0")
	}
	rows, err := q.Query(ctx, s.sql.payments, orderID)
	if err != nil {
		return nil, fmt.Errorf("order: payments of %d: %w", orderID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PaymentRecord, error) {
		var p PaymentRecord
		err := r.Scan(&p.PaymentID, &p.PaymentRequestID, &p.OrderID, &p.Provider, &p.ProviderTradeNo,
			&p.CallbackID, &p.Amount, &p.Currency, &p.Status, &p.PaidAt, &p.CreatedAt)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("order: payments of %d: %w", orderID, err)
	}
	return out, nil
}
