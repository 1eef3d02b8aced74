package order

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgval"
	"github.com/seckillkit/seckill/pgtx"
)

// NewOrder is what Create inserts: one order of one unit of one SKU, plus
// its single item line (line_no 1).
type NewOrder struct {
	// Request holds the purchase's ids, all required: OrderID, the new
	// order's primary key (> 0; the id scheme is the service's:
	// time-ordered ids keep inserts at the right edge of the primary-key
	// index; an id already taken by another order is [ErrIDCollision]);
	// RequestID, ReservationID and MessageID (not uuid.Nil), each unique
	// in orders, which makes Create idempotent; ActivityID, SKUID and
	// UserID (> 0), the one-order-per-user key; Bucket (>= 0), the
	// inventory bucket the stock came from; Quantity, which must be 1
	// (ck_orders_quantity: one unit per user).
	seckill.Request
	// OrderNo is the user-facing order number (orders.order_no, unique):
	// required, 1 to 40 characters, chosen by the service. Derive it from
	// the request (not a counter) so a redelivery derives the same number.
	OrderNo string
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
	case in.MessageID == uuid.Nil:
		return in, invalid("NewOrder.MessageID", "required")
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
		in.OrderID, in.OrderNo, pgval.UUID(in.RequestID), pgval.UUID(in.ReservationID), pgval.UUID(in.MessageID),
		in.ActivityID, in.SKUID, in.UserID, in.Bucket, in.Quantity,
		in.UnitPrice, in.Currency, in.ExpireAt, in.SKUTitle,
	}
}

// Create inserts the order and its item line in the caller's transaction,
// with one statement when the order is new (with Config.Citus: two, in two
// round trips), and returns it with Changed set.
//
// When a unique constraint stops the insert, nothing is written and Create
// runs one more statement to classify the conflict, in this order:
//
//   - same request id, reservation id or message id (and the same
//     activity, SKU and user): the order exists already — result with
//     Existing set and the order's current status, nil error;
//   - same activity, SKU and user: [ErrUserAlreadyOrdered], the *Error
//     carrying the existing order;
//   - same order_id or order_no only: [ErrIDCollision];
//   - anything else (e.g. a request id reused for another user):
//     [ErrModel].
//
// None of these aborts the transaction: the caller can go on (e.g. reject
// the reservation and enqueue a compensation event) and commit. Called
// again with the same input after a queued insert conflicted
// ([ErrConflict]), it classifies that conflict. Invalid input returns an
// [ErrInvalidArgument] error before anything is sent. Create is meant for
// Read Committed; under Repeatable Read a conflict with a row committed
// after the snapshot raises serialization_failure (40001), which
// pgtx.RunInTx retries.
func (s *Store) Create(ctx context.Context, tx pgx.Tx, in NewOrder) (_ Result, err error) {
	defer s.fail.Explain(&err)
	if tx == nil {
		return Result{}, nilHandle("tx")
	}
	in, err = s.normalize(in)
	if err != nil {
		return Result{}, err
	}
	if s.citus {
		return s.createRouted(ctx, tx, in)
	}
	res := Result{Changed: true}
	err = scanOrder(tx.QueryRow(ctx, s.sql.create, createArgs(in)...), &res.Order)
	if err == nil {
		return res, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Result{}, fmt.Errorf("order: create %d: %w", in.OrderID, err)
	}
	return s.classifyCreate(ctx, tx, in)
}

// QueueCreate queues the insert of the new order in and its item line
// into b; the returned error only reports invalid input or a nil b (then
// nothing is queued). dst may be nil (the result is discarded). on says
// what a conflict does:
//
//   - [pgtx.Return]: Create's single insert statement. When the batch
//     runs, the callback fills dst with the new order (Changed) and
//     returns nil. When the insert conflicted it returns an *Error
//     matching [ErrConflict] instead — pgx then stops running the batch's
//     later callbacks, although the server did execute the later
//     statements — and the caller classifies the conflict by calling
//     [Store.Create] with the same input in the same transaction (and
//     usually rolls back if later statements depended on the insert).
//   - [pgtx.Abort]: for a transaction sent as one batch ([pgtx.RunBatch])
//     that commits only when the order is new. It writes what Create
//     writes for a new order (status CREATED), but a conflict is not
//     classified: the order insert raises unique_violation (SQLSTATE
//     23505; [pgtx.UniqueViolationOf] names the constraint:
//     uq_orders_user_sku when the buyer already ordered this SKU,
//     uq_orders_request, uq_orders_reservation or uq_orders_source_message
//     for the same request, the primary key or uq_orders_order_no for an
//     id in use), which aborts the whole transaction, COMMIT included. The
//     error pgtx.RunBatch returns names this call in its
//     [pgtx.StatementError.Call] and matches, with errors.Is,
//     [ErrUserAlreadyOrdered] (the buyer's one order per SKU),
//     [ErrIDCollision] (the order id or number) or [ErrConflict] (the same
//     request, reservation or message); it unwraps to the server's
//     *pgconn.PgError. A concurrent insert of a conflicting order makes it
//     wait, then raise if that transaction commits. Run Create in a new
//     transaction after an abort to classify the conflict. Its two plain
//     statements are routed whole by Citus with or without Config.Citus.
func (s *Store) QueueCreate(b *pgx.Batch, in NewOrder, dst *Result, on pgtx.OnRefusal) error {
	in, err := s.normalize(in)
	if err != nil {
		return err
	}
	if b == nil {
		return invalid("QueueCreate", "batch must not be nil")
	}
	if dst == nil {
		dst = new(Result)
	}
	if on == pgtx.Abort {
		s.queueCreateOrAbort(b, in, dst)
		return nil
	}
	defer s.fail.Mark(b, "order.Store.QueueCreate")()
	b.Queue(s.sql.create, createArgs(in)...).QueryRow(func(row pgx.Row) error {
		*dst = Result{}
		err := scanOrder(row, &dst.Order)
		switch {
		case err == nil:
			dst.Changed = true
			return nil
		case errors.Is(err, pgx.ErrNoRows):
			return &Error{Op: "QueueCreate", Err: ErrConflict, OrderID: in.OrderID}
		default:
			return fmt.Errorf("order: create %d: %w", in.OrderID, err)
		}
	})
	return nil
}

// classifyCreate explains why the insert of a normalised in inserted
// nothing, returning what Create returns on its conflict path. It reads
// only.
func (s *Store) classifyCreate(ctx context.Context, q pgtx.Querier, in NewOrder) (Result, error) {
	rows, err := q.Query(ctx, s.sql.classifyCreate,
		in.OrderID, in.OrderNo, pgval.UUID(in.RequestID), pgval.UUID(in.ReservationID), pgval.UUID(in.MessageID),
		in.ActivityID, in.SKUID, in.UserID)
	if err != nil {
		return Result{}, fmt.Errorf("order: classify create conflict %d: %w", in.OrderID, err)
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
			return Result{}, fmt.Errorf("order: classify create conflict %d: %w", in.OrderID, err)
		}
		ms = append(ms, m)
	}
	if err := rows.Err(); err != nil {
		return Result{}, fmt.Errorf("order: classify create conflict %d: %w", in.OrderID, err)
	}
	// 1. The same request (reservation_id / request_id first).
	for _, m := range ms {
		if m.sameReq {
			if m.sameUser {
				return Result{Order: m.o, Existing: true}, nil
			}
			return Result{}, modelError("Create", m.o.OrderID, fmt.Sprintf(
				"request, reservation or message of new order %d already used by order %d for activity %d sku %d user %d",
				in.OrderID, m.o.OrderID, m.o.ActivityID, m.o.SKUID, m.o.UserID))
		}
	}
	// 2. One order per (activity, sku, user).
	for _, m := range ms {
		if m.sameUser {
			return Result{}, &Error{Op: "Create", Err: ErrUserAlreadyOrdered, OrderID: m.o.OrderID, Order: m.o}
		}
	}
	// 3. A generated id hit an unrelated order.
	for _, m := range ms {
		if m.sameID {
			return Result{}, &Error{Op: "Create", Err: ErrIDCollision, OrderID: in.OrderID, Field: "order_id", Value: strconv.FormatInt(in.OrderID, 10)}
		}
		if m.sameNo {
			return Result{}, &Error{Op: "Create", Err: ErrIDCollision, OrderID: in.OrderID, Field: "order_no", Value: in.OrderNo}
		}
	}
	// 4. Nothing explains the conflict.
	return Result{}, modelError("Create", in.OrderID, "insert conflicted but no conflicting order is visible")
}

// The statements of [Store.QueueCreate] with pgtx.Abort: the create statement's two inserts as
// two plain statements, without ON CONFLICT, so that any unique constraint
// of orders raises unique_violation and aborts the transaction. The item
// line needs no guard: it runs only when the order insert did not raise.
// (Two plain statements rather than one chain of data-modifying CTEs,
// which Citus splits into subplans.)

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

// createRouted is Create for Config.Citus (in normalized): two round trips
// for a new order (the order, then its item) and for a conflict (the
// insert, then its classification), with the same results.
func (s *Store) createRouted(ctx context.Context, tx pgx.Tx, in NewOrder) (Result, error) {
	res := Result{Changed: true}
	args := createArgs(in)
	err := scanOrder(tx.QueryRow(ctx, s.sql.insertOrderRouted, args[:13]...), &res.Order)
	if errors.Is(err, pgx.ErrNoRows) {
		return s.classifyCreate(ctx, tx, in)
	}
	if err != nil {
		return Result{}, fmt.Errorf("order: create %d: %w", in.OrderID, err)
	}
	if _, err := tx.Exec(ctx, s.sql.insertItemOrAbort, in.OrderID, in.ActivityID, in.SKUID, in.SKUTitle, in.Quantity, in.UnitPrice); err != nil {
		return Result{}, fmt.Errorf("order: create %d: item: %w", in.OrderID, err)
	}
	return res, nil
}
