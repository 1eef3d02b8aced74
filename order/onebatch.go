package order

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// The statements of [Store.QueueCreate] with pgtx.Abort: createSQL's two inserts as
// two plain statements, without ON CONFLICT, so that any unique constraint
// of orders raises unique_violation and aborts the transaction. The item
// line needs no guard: it runs only when the order insert did not raise.
// (Two plain statements rather than one chain of data-modifying CTEs,
// which Citus splits into subplans.)
const (
	insertOrderSQL = `
INSERT INTO {schema}.orders (
	order_id, order_no, request_id, reservation_id, source_message_id,
	activity_id, sku_id, user_id, inventory_bucket, quantity,
	unit_price, total_amount, currency, status, expire_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
	$11, $11::bigint * $10::smallint, $12, 10, $13)`

	// insertOrderOrAbortSQL returns the new row.
	insertOrderOrAbortSQL = insertOrderSQL + `
RETURNING {cols}`

	insertItemOrAbortSQL = `
INSERT INTO {schema}.order_items (
	order_id, line_no, activity_id, sku_id, sku_title, quantity, unit_price, line_amount)
VALUES ($1, 1, $2, $3, $4, $5, $6, $6::bigint * $5::smallint)`
)

// queueCreateOrAbort queues QueueCreate's pgtx.Abort form of a normalised
// in: the order insert (returning the new row into dst) and its item
// line, named as one call whose unique violations are classified.
func (s *Store) queueCreateOrAbort(b *pgx.Batch, in NewOrder, dst *Result) {
	args := createArgs(in)
	from := b.Len()
	b.Queue(s.sql.insertOrderOrAbort, args[:13]...).QueryRow(func(row pgx.Row) error {
		*dst = Result{Changed: true}
		return scanOrder(row, &dst.Order)
	})
	b.Queue(s.sql.insertItemOrAbort, in.OrderID, in.ActivityID, in.SKUID, in.SKUTitle, in.Quantity, in.UnitPrice)
	pgtx.NameCall(b, from, fmt.Sprintf("order.Store.QueueCreate(order %d)", in.OrderID), s.fail.Classify)
}
