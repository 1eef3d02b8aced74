package order

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgval"
)

// The statements of RecordPayment with Config.Citus: the order read and
// locked, then in a second round trip a plain INSERT … VALUES of the
// payment and an UPDATE … FROM of the order. Each is a shape Citus routes
// whole to the one node that holds the schema. paymentSQL, one statement
// whose data-modifying CTEs feed one another, is split by Citus into
// subplans whose results it ships between nodes, and the transaction then
// commits with two phases. (An INSERT … SELECT from orders, which would
// keep one round trip, is planned by Citus 13.2 for a schema's tables
// ("single-shard" tables) into an invalid statement: the worker reports a
// syntax error at "( IS NOT NULL)".)
const (
	lockForPaymentSQL = `SELECT {cols} FROM {schema}.orders WHERE order_id = $1 FOR NO KEY UPDATE`

	// Parameters: paymentArgs, then $10 the payment status decided from
	// the locked order.
	insertPaymentSQL = `INSERT INTO {schema}.payment_record (
		payment_id, payment_request_id, order_id, provider, provider_trade_no, callback_id,
		amount, currency, status, raw_payload, paid_at)
	VALUES ($1, $2, $3, $4, $5, NULLIF($6::text, ''), $7, $8, $10, $9::jsonb, statement_timestamp())
	ON CONFLICT DO NOTHING
	RETURNING payment_id, status`

	// The order becomes PAID only through the SUCCEEDED payment $2 that
	// this transaction just inserted: a SUCCEEDED payment is only ever
	// inserted for a CREATED or PAYING order, together with this update,
	// so an older one never finds its order still unpaid.
	paidByPaymentSQL = `UPDATE {schema}.orders AS o
	SET status = 30,
		paid_at = statement_timestamp(),
		version = o.version + 1,
		updated_at = statement_timestamp()
	FROM {schema}.payment_record AS p
	WHERE o.order_id = $1 AND p.payment_id = $2 AND p.order_id = o.order_id
	  AND p.status = 20 AND o.status IN (10, 20)
	RETURNING {o.cols}`
)

// insertOrderRoutedSQL is the order insert of Create with Config.Citus:
// createSQL's first insert as a plain statement, returning the new order or
// nothing. The item line follows (insertItemOrAbortSQL) in a second round
// trip, only when the order was inserted; a conflict is classified by
// classifyCreateSQL instead, as on the default path. (createSQL feeds the
// item from the order insert's RETURNING in a CTE, which Citus splits; an
// INSERT … SELECT of the item from orders meets the Citus bug described
// above.)
const insertOrderRoutedSQL = insertOrderSQL + `
ON CONFLICT DO NOTHING
RETURNING {cols}`

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

// recordPaymentRouted is RecordPayment for Config.Citus: two round trips
// (the order locked and read, then the payment insert and the PAID
// update), with the same results.
func (s *Store) recordPaymentRouted(ctx context.Context, tx pgx.Tx, p Payment) (PaymentResult, error) {
	var cur Order
	err := scanOrder(tx.QueryRow(ctx, s.sql.lockForPayment, p.OrderID), &cur)
	if errors.Is(err, pgx.ErrNoRows) {
		return PaymentResult{}, notFound("RecordPayment", p.OrderID)
	}
	if err != nil {
		return PaymentResult{}, fmt.Errorf("order: record payment for order %d: %w", p.OrderID, err)
	}
	if err := mismatch("RecordPayment", p, cur, cur.TotalAmount == p.Amount, cur.Currency == p.Currency); err != nil {
		return PaymentResult{}, err
	}
	status := PaymentRefundPending
	if cur.Status == StatusCreated || cur.Status == StatusPaying {
		status = PaymentSucceeded
	}

	var (
		b         pgx.Batch
		payID     *uuid.UUID
		payStatus *PaymentStatus
		paid      Order
		changed   bool
	)
	b.Queue(s.sql.insertPayment, append(paymentArgs(p), int16(status))...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&payID, &payStatus); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	b.Queue(s.sql.paidByPayment, p.OrderID, pgval.UUID(p.PaymentID)).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			if err := scanOrder(rows, &paid); err != nil {
				return err
			}
			changed = true
		}
		return rows.Err()
	})
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return PaymentResult{}, fmt.Errorf("order: record payment for order %d: %w", p.OrderID, err)
	}
	if payID == nil {
		return s.classifyPayment(ctx, tx, p, cur)
	}
	res := PaymentResult{Order: cur}
	if changed {
		res.Order = paid
	}
	return res, decidePayment("RecordPayment", p, &res, changed, cur.Status, *payID, *payStatus)
}
