package order

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/jsonb"
	"github.com/seckillkit/seckill/internal/pgval"
	"github.com/seckillkit/seckill/internal/twin"
	"github.com/seckillkit/seckill/pgtx"
)

// Payment is a successful-payment callback that RecordPayment records, and
// a payment_record row as [Store.Payments] reads it (the last three fields,
// which RecordPayment ignores, and without RawPayload).
type Payment struct {
	// PaymentID is the payment_record primary key; required. Use
	// uuid.NewV7 (time-ordered).
	PaymentID uuid.UUID
	// PaymentRequestID identifies the payment request; required, unique.
	PaymentRequestID uuid.UUID
	// OrderID is the paid order; required (> 0).
	OrderID int64
	// Provider names the payment provider: 1 to 32 characters.
	Provider string
	// ProviderTradeNo is the provider's transaction number: 1 to 128
	// characters. (Provider, ProviderTradeNo) is unique: a second callback
	// with the same trade number is a duplicate.
	ProviderTradeNo string
	// CallbackID is the provider's callback/notification id, optional, at
	// most 128 characters. (Provider, CallbackID) is unique too.
	CallbackID string
	// Amount in minor units; must equal the order's total_amount.
	Amount int64
	// Currency must equal the order's currency. "" takes
	// Config.DefaultCurrency; with no default configured it is required.
	Currency string
	// RawPayload is the provider's payload as JSON; nil means {}.
	RawPayload json.RawMessage

	// Status is the row's status: RecordPayment writes SUCCEEDED, or
	// REFUND_PENDING for money to give back; this package changes it no
	// further. Read by Payments; ignored by RecordPayment.
	Status PaymentStatus
	// PaidAt is when RecordPayment recorded the money as received (set
	// for SUCCEEDED and REFUND_PENDING payments alike); nil when NULL in
	// the database (rows written otherwise). Read by Payments.
	PaidAt *time.Time
	// CreatedAt is the server time of the inserting statement. Read by
	// Payments.
	CreatedAt time.Time
}

// PaymentKind says what RecordPayment did.
type PaymentKind int

// The outcomes of RecordPayment that are not errors.
const (
	// PaymentPaid: the payment was recorded (SUCCEEDED) and the order moved
	// from CREATED or PAYING to PAID.
	PaymentPaid PaymentKind = iota + 1
	// PaymentDuplicate: the same payment (same provider trade number,
	// callback id or payment request id, for the same order) was recorded
	// before. Nothing was written; idempotent success. Any
	// refund was requested by the first call.
	PaymentDuplicate
	// PaymentAfterCancel: the order was CANCELLED or CLOSED before the money
	// arrived. The payment was recorded as REFUND_PENDING, the order was
	// left as it is (no paid_at on a cancelled order) and Refund says what
	// to refund.
	PaymentAfterCancel
	// PaymentOnPaidOrder: the order was already PAID (or REFUND_PENDING) by
	// another payment. This second payment was recorded as REFUND_PENDING
	// and Refund says what to refund.
	PaymentOnPaidOrder
)

// Refund is the data of a payment that must be given back: turn it into an
// outbox event (e.g. REFUND_REQUESTED) in the same transaction.
//
// Its fields are those of the payment just recorded as REFUND_PENDING.
type Refund struct {
	OrderID         int64     // the order the money was paid for
	PaymentID       uuid.UUID // the REFUND_PENDING payment_record row
	Provider        string    // the provider to refund through
	ProviderTradeNo string    // the provider's transaction number to refund
	Amount          int64     // the amount to give back, minor units (e.g. fen)
	Currency        string    // the payment's currency, e.g. "CNY"
}

// PaymentResult is the outcome of RecordPayment when it is not an error.
type PaymentResult struct {
	Kind PaymentKind // what RecordPayment did; the other fields follow from it
	// PaymentID is the recorded payment, or for PaymentDuplicate the one
	// recorded before.
	PaymentID uuid.UUID
	// PaymentStatus is that payment's status: SUCCEEDED or REFUND_PENDING.
	PaymentStatus PaymentStatus
	// Order is the order after the call (locked until the transaction ends).
	Order Order
	// Refund is non-nil exactly for PaymentAfterCancel and
	// PaymentOnPaidOrder.
	Refund *Refund
}

func (s *Store) normalizePayment(p Payment) (Payment, error) {
	if p.Currency == "" {
		p.Currency = s.currency
	}
	switch {
	case p.PaymentID == uuid.Nil:
		return p, invalid("Payment.PaymentID", "required")
	case p.PaymentRequestID == uuid.Nil:
		return p, invalid("Payment.PaymentRequestID", "required")
	case p.OrderID <= 0:
		return p, invalid("Payment.OrderID", "must be > 0")
	case checkText("Payment.Provider", p.Provider, 32, true) != nil:
		return p, checkText("Payment.Provider", p.Provider, 32, true)
	case checkText("Payment.ProviderTradeNo", p.ProviderTradeNo, 128, true) != nil:
		return p, checkText("Payment.ProviderTradeNo", p.ProviderTradeNo, 128, true)
	case checkText("Payment.CallbackID", p.CallbackID, 128, false) != nil:
		return p, checkText("Payment.CallbackID", p.CallbackID, 128, false)
	case p.Amount < 0:
		return p, invalid("Payment.Amount", "must be >= 0")
	case p.Currency == "":
		return p, invalid("Payment.Currency", "required (or set Config.DefaultCurrency)")
	case !validCurrency(p.Currency):
		return p, invalid("Payment.Currency", "must be three upper-case ASCII letters")
	case p.RawPayload != nil && !json.Valid(p.RawPayload):
		return p, invalid("Payment.RawPayload", "not valid JSON")
	}
	if p.RawPayload != nil {
		if err := jsonb.Check(p.RawPayload); err != nil {
			return p, invalid("Payment.RawPayload", err.Error())
		}
	}
	if p.RawPayload == nil {
		p.RawPayload = json.RawMessage(`{}`)
	}
	return p, nil
}

func paymentArgs(p Payment) []any {
	return []any{pgval.UUID(p.PaymentID), pgval.UUID(p.PaymentRequestID), p.OrderID, p.Provider, p.ProviderTradeNo,
		p.CallbackID, p.Amount, p.Currency, string(p.RawPayload)}
}

// RecordPayment records a successful payment for an order in the caller's
// transaction and applies it. Outcomes that are not errors are
// told by PaymentResult.Kind:
//
//   - PaymentPaid: payment SUCCEEDED, order CREATED/PAYING → PAID;
//   - PaymentDuplicate: this payment was seen before (same provider trade
//     number, callback id or payment request id, same order): nothing
//     written;
//   - PaymentAfterCancel: order CANCELLED or CLOSED: payment recorded as
//     REFUND_PENDING, order untouched (it never gets paid_at), Refund set;
//   - PaymentOnPaidOrder: order already paid by another payment: this one
//     is recorded as REFUND_PENDING, Refund set.
//
// Errors, each writing nothing: [ErrNotFound] for an unknown order;
// [ErrMismatch] when amount or currency differ from the order (the *Error
// says which, with the order); [ErrIDCollision] when only PaymentID
// collides; [ErrModel] when the provider reference belongs to another
// order; [ErrInvalidArgument] for bad input (nothing sent).
//
// A new payment costs one statement; a duplicate costs one more (the
// classification query), as does a call after a queued payment
// conflicted ([ErrConflict]), which it classifies. The order row stays
// locked until the transaction ends, so a concurrent timeout cancel of
// the same order waits and then sees PAID (or, if it won, this call sees
// CANCELLED): never both.
func (s *Store) RecordPayment(ctx context.Context, tx pgx.Tx, p Payment) (_ PaymentResult, err error) {
	defer s.fail.Explain(&err)
	if tx == nil {
		return PaymentResult{}, nilHandle("tx")
	}
	p, err = s.normalizePayment(p)
	if err != nil {
		return PaymentResult{}, err
	}
	if s.citus {
		return s.recordPaymentRouted(ctx, tx, p)
	}
	res, err := s.paymentRow(p, "RecordPayment").Run(ctx, tx)
	if errors.Is(err, ErrConflict) {
		return s.classifyPayment(ctx, tx, p, res.Order)
	}
	return res, err
}

// QueueRecordPayment queues RecordPayment's single statement into b; the
// returned error only reports invalid input or a nil b (nothing queued).
// dst may be nil (the result is discarded). When the batch runs, the
// callback fills dst; on says what a refusal does:
//
//   - [pgtx.Return]: the callback returns RecordPayment's classified
//     errors, except that a payment that inserted nothing (a duplicate)
//     is reported as an *Error matching [ErrConflict]: classify it by
//     calling [Store.RecordPayment] with the same payment in the same
//     transaction.
//   - [pgtx.Abort]: the statement raises the refusal on the server
//     (SQLSTATE SK101 [ErrNotFound], SK104 and SK105 [ErrMismatch], SK106
//     [ErrConflict] for a payment that inserted nothing), which aborts the
//     transaction, COMMIT included; the error [pgtx.RunBatch] returns
//     matches the sentinel and names this call in its
//     [pgtx.StatementError.Call]. Run RecordPayment in a new transaction
//     to classify a conflict.
func (s *Store) QueueRecordPayment(b *pgx.Batch, p Payment, dst *PaymentResult, on pgtx.OnRefusal) error {
	p, err := s.normalizePayment(p)
	if err != nil {
		return err
	}
	if b == nil {
		return invalid("QueueRecordPayment", "batch must not be nil")
	}
	if dst == nil {
		dst = new(PaymentResult)
	}
	if on == pgtx.Abort {
		from := b.Len()
		b.Queue(s.sql.paymentOrAbort, paymentArgs(p)...).QueryRow(func(row pgx.Row) error {
			*dst = PaymentResult{}
			var (
				changed, amountOK, currencyOK bool
				prev                          Status
				payID                         uuid.UUID
				payStatus                     PaymentStatus
				refused                       *int64
			)
			if err := scanOrder(row, &dst.Order, &changed, &prev, &amountOK, &currencyOK, &payID, &payStatus, &refused); err != nil {
				*dst = PaymentResult{}
				return fmt.Errorf("order: record payment for order %d: %w", p.OrderID, err)
			}
			return decidePayment("QueueRecordPayment", p, dst, changed, prev, payID, payStatus)
		})
		pgtx.NameCall(b, from, fmt.Sprintf("order.Store.QueueRecordPayment(order %d)", p.OrderID), s.fail.Classify)
		return nil
	}
	defer s.fail.Mark(b, "order.Store.QueueRecordPayment")()
	s.paymentRow(p, "QueueRecordPayment").Queue(b, dst)
	return nil
}

// paymentRow is the payment statement of a normalised p, shared by
// [Store.RecordPayment] and its queued form (op).
func (s *Store) paymentRow(p Payment, op string) twin.Row[PaymentResult] {
	return twin.Row[PaymentResult]{SQL: s.sql.payment, Args: paymentArgs(p),
		Scan: func(_ context.Context, _ bool, row pgx.Row, dst *PaymentResult) error {
			return scanPayment(row, p, op, dst)
		}}
}

func scanPayment(row pgx.Row, p Payment, op string, dst *PaymentResult) error {
	*dst = PaymentResult{}
	var (
		changed, amountOK, currencyOK bool
		prev                          Status
		payID                         *uuid.UUID
		payStatus                     *PaymentStatus
	)
	err := scanOrder(row, &dst.Order, &changed, &prev, &amountOK, &currencyOK, &payID, &payStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		*dst = PaymentResult{}
		return notFound(op, p.OrderID)
	}
	if err != nil {
		*dst = PaymentResult{}
		return fmt.Errorf("order: record payment for order %d: %w", p.OrderID, err)
	}
	if err := mismatch(op, p, dst.Order, amountOK, currencyOK); err != nil {
		return err
	}
	if payID == nil {
		return &Error{Op: op, Err: ErrConflict, OrderID: p.OrderID}
	}
	return decidePayment(op, p, dst, changed, prev, *payID, *payStatus)
}

// mismatch returns the ErrMismatch error of a payment p whose amount or
// currency differs from order o's, or nil.
func mismatch(op string, p Payment, o Order, amountOK, currencyOK bool) error {
	switch {
	case !amountOK:
		return &Error{Op: op, Err: ErrMismatch, OrderID: p.OrderID, Order: o, Field: "amount", Value: strconv.FormatInt(p.Amount, 10)}
	case !currencyOK:
		return &Error{Op: op, Err: ErrMismatch, OrderID: p.OrderID, Order: o, Field: "currency", Value: p.Currency}
	}
	return nil
}

// decidePayment fills dst's Kind, payment and refund from what the
// payment statements did: the payment payID inserted with payStatus, the
// order moved to PAID (changed) from status prev. dst.Order holds the
// order after the statements.
func decidePayment(op string, p Payment, dst *PaymentResult, changed bool, prev Status, payID uuid.UUID, payStatus PaymentStatus) error {
	o := dst.Order
	dst.PaymentID, dst.PaymentStatus = payID, payStatus
	switch {
	case changed:
		dst.Kind = PaymentPaid
		return nil
	case payStatus == PaymentRefundPending:
		dst.Kind = PaymentOnPaidOrder
		if prev == StatusCancelled || prev == StatusClosed && o.PaidAt == nil {
			dst.Kind = PaymentAfterCancel
		}
		dst.Refund = &Refund{OrderID: p.OrderID, PaymentID: p.PaymentID, Provider: p.Provider,
			ProviderTradeNo: p.ProviderTradeNo, Amount: p.Amount, Currency: p.Currency}
		return nil
	}
	return modelError(op, p.OrderID, fmt.Sprintf(
		"payment %s recorded as %s but order %s not moved to PAID", payID, paymentStatusSet.Name(payStatus), prev))
}

func (s *Store) classifyPayment(ctx context.Context, q pgtx.Querier, p Payment, o Order) (PaymentResult, error) {
	rows, err := q.Query(ctx, s.sql.classifyPayment, p.PaymentID, p.PaymentRequestID, p.Provider, p.ProviderTradeNo, p.CallbackID)
	if err != nil {
		return PaymentResult{}, fmt.Errorf("order: classify payment conflict for order %d: %w", p.OrderID, err)
	}
	type match struct {
		id                       uuid.UUID
		orderID                  int64
		status                   PaymentStatus
		sameID, sameReq, sameRef bool
	}
	var ms []match
	for rows.Next() {
		var m match
		if err := rows.Scan(&m.id, &m.orderID, &m.status, &m.sameID, &m.sameReq, &m.sameRef); err != nil {
			rows.Close()
			return PaymentResult{}, fmt.Errorf("order: classify payment conflict for order %d: %w", p.OrderID, err)
		}
		ms = append(ms, m)
	}
	if err := rows.Err(); err != nil {
		return PaymentResult{}, fmt.Errorf("order: classify payment conflict for order %d: %w", p.OrderID, err)
	}
	for _, m := range ms {
		if (m.sameRef || m.sameReq) && m.orderID == p.OrderID {
			return PaymentResult{Kind: PaymentDuplicate, PaymentID: m.id, PaymentStatus: m.status, Order: o}, nil
		}
	}
	for _, m := range ms {
		if m.sameRef || m.sameReq {
			return PaymentResult{}, modelError("RecordPayment", p.OrderID, fmt.Sprintf(
				"payment reference of provider %q trade %q already recorded for order %d", p.Provider, p.ProviderTradeNo, m.orderID))
		}
	}
	for _, m := range ms {
		if m.sameID {
			return PaymentResult{}, &Error{Op: "RecordPayment", Err: ErrIDCollision, OrderID: p.OrderID, Field: "payment_id", Value: p.PaymentID.String()}
		}
	}
	return PaymentResult{}, modelError("RecordPayment", p.OrderID, "payment insert conflicted but no conflicting payment is visible")
}

// The statements of RecordPayment with Config.Citus: the order read and
// locked, then in a second round trip a plain INSERT … VALUES of the
// payment and an UPDATE … FROM of the order. Each is a shape Citus routes
// whole to the one node that holds the schema. The payment statement, one statement
// whose data-modifying CTEs feed one another, is split by Citus into
// subplans whose results it ships between nodes, and the transaction then
// commits with two phases. (An INSERT … SELECT from orders, which would
// keep one round trip, is planned by Citus 13.2 for a schema's tables
// ("single-shard" tables) into an invalid statement: the worker reports a
// syntax error at "( IS NOT NULL)".)

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
