package order

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// The statements of [Store.QueueCreateOrAbort]: createSQL's two inserts as
// two plain statements, without ON CONFLICT, so that any unique constraint
// of orders raises unique_violation and aborts the transaction. The item
// line needs no guard: it runs only when the order insert did not raise.
// (Two plain statements rather than one chain of data-modifying CTEs,
// which Citus splits into subplans.)
const (
	insertOrderOrAbortSQL = `
INSERT INTO {schema}.orders (
	order_id, order_no, request_id, reservation_id, source_message_id,
	activity_id, sku_id, user_id, inventory_bucket, quantity,
	unit_price, total_amount, currency, status, expire_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
	$11, $11::bigint * $10::smallint, $12, 10, $13)`

	insertItemOrAbortSQL = `
INSERT INTO {schema}.order_items (
	order_id, line_no, activity_id, sku_id, sku_title, quantity, unit_price, line_amount)
VALUES ($1, 1, $2, $3, $4, $5, $6, $6::bigint * $5::smallint)`
)

// QueueCreateOrAbort queues the insert of the new order in and its item
// line into b, for a transaction sent as one batch ([pgtx.RunBatch]) that
// commits only when the order is new. It writes what [Store.Create] writes
// for a new order (status CREATED), but a conflict is not classified: the
// order insert raises unique_violation (SQLSTATE 23505;
// [pgtx.UniqueViolationOf] names the constraint: uq_orders_user_sku when the
// buyer already ordered this SKU, uq_orders_request, uq_orders_reservation
// or uq_orders_source_message for the same request, the primary key or
// uq_orders_order_no for an id in use), which aborts the whole
// transaction, COMMIT included. The error [pgtx.RunBatch] returns names
// this call and matches, with errors.Is, [ErrUserAlreadyOrdered] (the
// buyer's one order per SKU), [ErrIDCollision] (the order id or number)
// or [ErrConflict] (the same request, reservation or source message); it
// unwraps to the server's *pgconn.PgError. A concurrent insert of a conflicting order
// makes it wait, then raise if that transaction commits. Run the general
// path (Create, in a new transaction) after an abort to classify the
// conflict.
//
// Invalid input returns a *ValidationError and queues nothing.
func (s *Store) QueueCreateOrAbort(b *pgx.Batch, in NewOrder) error {
	in, err := s.normalize(in)
	if err != nil {
		return err
	}
	if b == nil {
		return invalid("QueueCreateOrAbort", "batch must not be nil")
	}
	args := createArgs(in)
	from := b.Len()
	b.Queue(s.sql.insertOrderOrAbort, args[:13]...)
	b.Queue(s.sql.insertItemOrAbort, in.OrderID, in.ActivityID, in.SKUID, in.SKUTitle, in.Quantity, in.UnitPrice)
	pgtx.NameCall(b, from, fmt.Sprintf("order.Store.QueueCreateOrAbort(order %d)", in.OrderID), s.fail.Classify)
	return nil
}
