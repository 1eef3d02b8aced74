package order

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/pgtx"
)

// Get returns the order that key names, or an error matching
// [ErrNotFound]. It reads without locking. The key is the first of, in
// this order:
//
//   - key.OrderID (> 0): the order with that id;
//   - key.RequestID (not uuid.Nil): the order created for that request —
//     to answer a client retrying a request whose commit outcome it did
//     not learn;
//   - key.ActivityID, SKUID and UserID (all > 0): the buyer's order of a
//     SKU in an activity (unique: uq_orders_user_sku, one order per buyer,
//     whatever its status) — to name the order that made a new one raise
//     uq_orders_user_sku.
//
// A key with none of them is an [ErrInvalidArgument] error.
func (s *Store) Get(ctx context.Context, q pgtx.Querier, key seckill.Request) (_ Order, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return Order{}, nilHandle("q")
	}
	return s.get(ctx, q, "Get", key)
}

func (s *Store) get(ctx context.Context, q pgtx.Querier, op string, key seckill.Request) (Order, error) {
	var (
		o    Order
		err  error
		what string
	)
	switch {
	case key.OrderID > 0:
		err = scanOrder(q.QueryRow(ctx, s.sql.getByID, key.OrderID), &o)
		if errors.Is(err, pgx.ErrNoRows) {
			return Order{}, notFound(op, key.OrderID)
		}
		what = fmt.Sprintf("get %d", key.OrderID)
	case key.RequestID != uuid.Nil:
		err = scanOrder(q.QueryRow(ctx, s.sql.getByRequest, key.RequestID), &o)
		if errors.Is(err, pgx.ErrNoRows) {
			return Order{}, fmt.Errorf("%w: no order for request %s", ErrNotFound, key.RequestID)
		}
		what = fmt.Sprintf("get by request %s", key.RequestID)
	case key.ActivityID > 0 && key.SKUID > 0 && key.UserID > 0:
		err = scanOrder(q.QueryRow(ctx, s.sql.getByBuyer, key.ActivityID, key.SKUID, key.UserID), &o)
		if errors.Is(err, pgx.ErrNoRows) {
			return Order{}, fmt.Errorf("%w: no order of user %d for activity %d, SKU %d", ErrNotFound, key.UserID, key.ActivityID, key.SKUID)
		}
		what = fmt.Sprintf("get by buyer %d/%d/%d", key.ActivityID, key.SKUID, key.UserID)
	default:
		return Order{}, invalid("key", "needs OrderID > 0, a RequestID, or ActivityID, SKUID and UserID > 0")
	}
	if err != nil {
		return Order{}, fmt.Errorf("order: %s: %w", what, err)
	}
	return o, nil
}

// items returns the item lines of an order by line number (empty if the
// order has none or does not exist). The tests read them.
func (s *Store) items(ctx context.Context, q pgtx.Querier, orderID int64) (_ []item, err error) {
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
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (item, error) {
		var it item
		err := r.Scan(&it.OrderID, &it.LineNo, &it.ActivityID, &it.SKUID, &it.SKUTitle,
			&it.Quantity, &it.UnitPrice, &it.LineAmount, &it.CreatedAt)
		return it, err
	})
	if err != nil {
		return nil, fmt.Errorf("order: items of %d: %w", orderID, err)
	}
	return out, nil
}

// Payments returns the payment_record rows of an order, oldest first
// (empty if none), without their raw payloads.
func (s *Store) Payments(ctx context.Context, q pgtx.Querier, orderID int64) (_ []Payment, err error) {
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
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Payment, error) {
		var p Payment
		err := r.Scan(&p.PaymentID, &p.PaymentRequestID, &p.OrderID, &p.Provider, &p.ProviderTradeNo,
			&p.CallbackID, &p.Amount, &p.Currency, &p.Status, &p.PaidAt, &p.CreatedAt)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("order: payments of %d: %w", orderID, err)
	}
	return out, nil
}
