package order

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgval"
	"github.com/seckillkit/seckill/pgtx"
)

// NewOrder is what Create inserts: one order of one unit of one SKU, plus
// its single item line (line_no 1).
type NewOrder struct {
	// OrderID is the new order's primary key; required (> 0). The id
	// scheme is the service's: time-ordered ids keep inserts at the right
	// edge of the primary-key index. Carry it in the message so
	// a redelivery reuses it; an id already taken by another order is
	// [ErrIDCollision].
	OrderID int64
	// OrderNo is the user-facing order number (orders.order_no, unique):
	// required, 1 to 40 characters, chosen by the service. Derive it from
	// the request (not a counter) so a redelivery derives the same number.
	OrderNo string
	// RequestID, ReservationID and SourceMessageID identify the purchase
	// request, the front door's stock reservation and the queue message
	// that carried it. All required (not uuid.Nil); each is unique in
	// orders, which makes Create idempotent.
	RequestID       uuid.UUID
	ReservationID   uuid.UUID // see RequestID
	SourceMessageID uuid.UUID // see RequestID
	// ActivityID, SKUID and UserID (all > 0) are the one-order-per-user
	// key.
	ActivityID int64
	SKUID      int64 // see ActivityID
	UserID     int64 // see ActivityID
	// Bucket is the inventory bucket the stock came from (>= 0).
	Bucket int16
	// Quantity must be 1 (ck_orders_quantity: one unit per user).
	Quantity int16
	// UnitPrice is the price snapshot in minor units (>= 0). The total is
	// UnitPrice × Quantity.
	UnitPrice int64
	// Currency: three upper-case ASCII letters (ISO 4217). "" takes
	// Config.DefaultCurrency; with no default configured it is required.
	Currency string
	// ExpireAt is when an unpaid order may be cancelled by timeout;
	// required.
	ExpireAt time.Time
	// SKUTitle is the item line's title snapshot: 1 to 256 characters.
	SKUTitle string
}

// CreateResult is the outcome of Create when it is not an error.
type CreateResult struct {
	// Order is the inserted order, or the existing one when Existing.
	Order Order
	// Existing is true when an order for the same request (same request
	// id, reservation id or source message id, and the same activity, SKU
	// and user) already existed: nothing was written and Order is that
	// order with its current status. Treat it as success of a retry.
	Existing bool
}

func (s *Store) normalize(in NewOrder) (NewOrder, error) {
	if in.Currency == "" {
		in.Currency = s.currency
	}
	switch {
	case in.OrderID <= 0:
		return in, invalid("NewOrder.OrderID", "must be > 0")
	case checkText("NewOrder.OrderNo", in.OrderNo, 40, true) != nil:
		return in, checkText("NewOrder.OrderNo", in.OrderNo, 40, true)
	case in.RequestID == uuid.Nil:
		return in, invalid("NewOrder.RequestID", "required")
	case in.ReservationID == uuid.Nil:
		return in, invalid("NewOrder.ReservationID", "required")
	case in.SourceMessageID == uuid.Nil:
		return in, invalid("NewOrder.SourceMessageID", "required")
	case in.ActivityID <= 0:
		return in, invalid("NewOrder.ActivityID", "must be > 0")
	case in.SKUID <= 0:
		return in, invalid("NewOrder.SKUID", "must be > 0")
	case in.UserID <= 0:
		return in, invalid("NewOrder.UserID", "must be > 0")
	case in.Bucket < 0:
		return in, invalid("NewOrder.Bucket", "must be >= 0")
	case in.Quantity != 1:
		return in, invalid("NewOrder.Quantity", "must be 1, got "+strconv.Itoa(int(in.Quantity)))
	case in.UnitPrice < 0:
		return in, invalid("NewOrder.UnitPrice", "must be >= 0")
	case in.Currency == "":
		return in, invalid("NewOrder.Currency", "required (or set Config.DefaultCurrency)")
	case !validCurrency(in.Currency):
		return in, invalid("NewOrder.Currency", "must be three upper-case ASCII letters")
	case in.ExpireAt.IsZero():
		return in, invalid("NewOrder.ExpireAt", "required")
	}
	return in, checkText("NewOrder.SKUTitle", in.SKUTitle, 256, true)
}

func createArgs(in NewOrder) []any {
	return []any{
		in.OrderID, in.OrderNo, pgval.UUID(in.RequestID), pgval.UUID(in.ReservationID), pgval.UUID(in.SourceMessageID),
		in.ActivityID, in.SKUID, in.UserID, in.Bucket, in.Quantity,
		in.UnitPrice, in.Currency, in.ExpireAt, in.SKUTitle,
	}
}

// createSQL inserts the order and, only when it was inserted, its item line,
// in one statement. ON CONFLICT DO
// NOTHING without a target covers every unique constraint of orders: the
// indexes decide; classifyCreateSQL only explains the decision afterwards.
const createSQL = `WITH ins AS (
	INSERT INTO {schema}.orders (
		order_id, order_no, request_id, reservation_id, source_message_id,
		activity_id, sku_id, user_id, inventory_bucket, quantity,
		unit_price, total_amount, currency, status, expire_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
		$11, $11::bigint * $10::smallint, $12, 10, $13)
	ON CONFLICT DO NOTHING
	RETURNING {cols}
), item AS (
	INSERT INTO {schema}.order_items (
		order_id, line_no, activity_id, sku_id, sku_title, quantity, unit_price, line_amount)
	SELECT order_id, 1, activity_id, sku_id, $14, quantity, unit_price, total_amount
	FROM ins
)
SELECT {cols} FROM ins`

// classifyCreateSQL finds the rows that made createSQL insert nothing. It
// runs as a separate statement on purpose: under Read Committed it takes a
// new snapshot, which contains the conflicting row (ON CONFLICT waited for
// its inserter to commit), whereas a read inside the INSERT statement would
// use the INSERT's older snapshot and could miss it.
const classifyCreateSQL = `SELECT {cols},
	(request_id = $3 OR reservation_id = $4 OR source_message_id = $5) AS same_request,
	(activity_id = $6 AND sku_id = $7 AND user_id = $8) AS same_user_sku,
	order_id = $1 AS same_id,
	order_no = $2 AS same_no
FROM {schema}.orders
WHERE order_id = $1 OR order_no = $2
	OR request_id = $3 OR reservation_id = $4 OR source_message_id = $5
	OR (activity_id = $6 AND sku_id = $7 AND user_id = $8)`

// Create inserts the order and its item line in the caller's transaction,
// with one statement when the order is new (with Config.Citus: two, in two
// round trips).
//
// When a unique constraint stops the insert, nothing is written and Create
// runs one more statement to classify the conflict, in this order:
//
//   - same request id, reservation id or source message id (and the same
//     activity, SKU and user): the order exists already — result with
//     Existing set and the order's current status, nil error;
//   - same activity, SKU and user: a *UserAlreadyOrderedError
//     ([ErrUserAlreadyOrdered]) carrying the existing order;
//   - same order_id or order_no only: *IDCollisionError ([ErrIDCollision]);
//   - anything else (e.g. a request id reused for another user): *ModelError
//     ([ErrModel]).
//
// None of these aborts the transaction: the caller can go on (e.g. reject
// the reservation and enqueue a compensation event) and commit. Invalid
// input returns a *ValidationError before anything is sent. Create is meant
// for Read Committed; under Repeatable Read a conflict with a row committed
// after the snapshot raises serialization_failure (40001), which
// pgtx.RunInTx retries.
func (s *Store) Create(ctx context.Context, tx pgx.Tx, in NewOrder) (CreateResult, error) {
	if tx == nil {
		return CreateResult{}, nilHandle("tx")
	}
	in, err := s.normalize(in)
	if err != nil {
		return CreateResult{}, err
	}
	if s.citus {
		return s.createRouted(ctx, tx, in)
	}
	var res CreateResult
	err = scanOrder(tx.QueryRow(ctx, s.sql.create, createArgs(in)...), &res.Order)
	if err == nil {
		return res, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return CreateResult{}, fmt.Errorf("order: create %d: %w", in.OrderID, err)
	}
	return s.classifyCreate(ctx, tx, in)
}

// QueueCreate queues Create's single insert statement into b; the returned
// error only reports invalid input (then nothing is queued). When the batch
// runs, the callback fills dst for a new order and returns nil. When the
// insert conflicted it returns a *ConflictError ([ErrConflict]) instead —
// pgx then stops running the batch's later callbacks, although the server
// did execute the later statements — and the caller classifies the
// conflict with [Store.ClassifyConflict] in the same transaction (and
// usually rolls back if later statements depended on the insert).
func (s *Store) QueueCreate(b *pgx.Batch, in NewOrder, dst *CreateResult) error {
	in, err := s.normalize(in)
	if err != nil {
		return err
	}
	if b == nil || dst == nil {
		return invalid("QueueCreate", "batch and dst must not be nil")
	}
	b.Queue(s.sql.create, createArgs(in)...).QueryRow(func(row pgx.Row) error {
		*dst = CreateResult{}
		err := scanOrder(row, &dst.Order)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, pgx.ErrNoRows):
			return &ConflictError{Op: "create", OrderID: in.OrderID}
		default:
			return fmt.Errorf("order: create %d: %w", in.OrderID, err)
		}
	})
	return nil
}

// ClassifyConflict explains why an insert of in (queued by QueueCreate)
// inserted nothing, returning exactly what Create returns on its conflict
// path. Run it in the transaction that ran the insert. It reads only.
func (s *Store) ClassifyConflict(ctx context.Context, q pgtx.Querier, in NewOrder) (CreateResult, error) {
	if q == nil {
		return CreateResult{}, nilHandle("q")
	}
	in, err := s.normalize(in)
	if err != nil {
		return CreateResult{}, err
	}
	return s.classifyCreate(ctx, q, in)
}

func (s *Store) classifyCreate(ctx context.Context, q pgtx.Querier, in NewOrder) (CreateResult, error) {
	rows, err := q.Query(ctx, s.sql.classifyCreate,
		in.OrderID, in.OrderNo, pgval.UUID(in.RequestID), pgval.UUID(in.ReservationID), pgval.UUID(in.SourceMessageID),
		in.ActivityID, in.SKUID, in.UserID)
	if err != nil {
		return CreateResult{}, fmt.Errorf("order: classify create conflict %d: %w", in.OrderID, err)
	}
	type match struct {
		o                                 Order
		sameReq, sameUser, sameID, sameNo bool
	}
	var ms []match
	for rows.Next() {
		var m match
		if err := scanOrder(rows, &m.o, &m.sameReq, &m.sameUser, &m.sameID, &m.sameNo); err != nil {
			rows.Close()
			return CreateResult{}, fmt.Errorf("order: classify create conflict %d: %w", in.OrderID, err)
		}
		ms = append(ms, m)
	}
	if err := rows.Err(); err != nil {
		return CreateResult{}, fmt.Errorf("order: classify create conflict %d: %w", in.OrderID, err)
	}
	// 1. The same request (reservation_id / request_id first).
	for _, m := range ms {
		if m.sameReq {
			if m.sameUser {
				return CreateResult{Order: m.o, Existing: true}, nil
			}
			return CreateResult{}, &ModelError{OrderID: m.o.OrderID, Reason: fmt.Sprintf(
				"request, reservation or source message of new order %d already used by order %d for activity %d sku %d user %d",
				in.OrderID, m.o.OrderID, m.o.ActivityID, m.o.SKUID, m.o.UserID)}
		}
	}
	// 2. One order per (activity, sku, user).
	for _, m := range ms {
		if m.sameUser {
			return CreateResult{}, &UserAlreadyOrderedError{Existing: m.o}
		}
	}
	// 3. A generated id hit an unrelated order.
	for _, m := range ms {
		if m.sameID {
			return CreateResult{}, &IDCollisionError{Column: "order_id", Value: strconv.FormatInt(in.OrderID, 10)}
		}
		if m.sameNo {
			return CreateResult{}, &IDCollisionError{Column: "order_no", Value: in.OrderNo}
		}
	}
	// 4. Nothing explains the conflict.
	return CreateResult{}, &ModelError{OrderID: in.OrderID, Reason: "insert conflicted but no conflicting order is visible"}
}
