package order

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/internal/jsonb"
	"github.com/seckillkit/seckill/internal/textcheck"
	"github.com/seckillkit/seckill/pgtx"
)

// The review reasons, PaymentReview.Reason (mirrored by
// ck_payment_review_reason).
const (
	reviewUnknownOrder     = "UNKNOWN_ORDER"     // no order has the callback's order id
	reviewAmountMismatch   = "AMOUNT_MISMATCH"   // the amount differs from the order's
	reviewCurrencyMismatch = "CURRENCY_MISMATCH" // the currency differs from the order's
	reviewSecondTrade      = "SECOND_TRADE"      // another provider trade for an order already paid
)

// reviewReasonOf returns the review reason of a RecordPayment outcome: an
// error matching ErrNotFound or ErrMismatch, or a PaymentOnPaidOrder result
// with no error. ok is false for anything else (a result that needs no
// review, or an error that is not about the callback's content).
func reviewReasonOf(res PaymentResult, err error) (string, bool) {
	var e *Error
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, ErrNotFound):
		return reviewUnknownOrder, true
	case errors.Is(err, ErrMismatch):
		if errors.As(err, &e) && e.Err == ErrMismatch && e.Field == "currency" ||
			errors.As(err, &pgErr) && pgErr.Code == "SK105" {
			return reviewCurrencyMismatch, true
		}
		return reviewAmountMismatch, true
	case err == nil && res.Kind == PaymentOnPaidOrder:
		return reviewSecondTrade, true
	}
	return "", false
}

// PaymentReview is one callback kept for review (a payment_review row).
type PaymentReview struct {
	ReviewID int64 // review_id, an identity: increasing, with gaps that mean nothing
	// Provider, ProviderTradeNo and CallbackID are the callback's (see
	// [Payment]); CallbackID is "" when it had none.
	Provider, ProviderTradeNo, CallbackID string
	// OrderID and Amount are the callback's: the order id it names (no
	// order may have it, for ReviewUnknownOrder) and the amount in minor
	// units.
	OrderID, Amount int64
	Currency        string // the callback's currency, three upper-case letters
	// Reason says why the callback was kept, unique with Provider and
	// ProviderTradeNo: "UNKNOWN_ORDER" (no order has its order id),
	// "AMOUNT_MISMATCH" or "CURRENCY_MISMATCH" (it differs from the
	// order's), "SECOND_TRADE" (another provider trade for an order
	// already paid).
	Reason     string
	RawPayload json.RawMessage // the provider's payload as stored by jsonb; {} when none was given
	Resolved   bool            // status RESOLVED (10): a person decided; false while OPEN (0)
	// Resolution (what was decided) and ResolvedBy (who) are "" while
	// the review is open.
	Resolution, ResolvedBy string
	// ResolvedAt is zero while the review is open; CreatedAt is when the
	// callback was first recorded (the server's statement time).
	ResolvedAt, CreatedAt time.Time
}

func scanReview(row pgx.Row, r *PaymentReview, extra ...any) error {
	var resolvedAt *time.Time
	err := row.Scan(append(extra, &r.ReviewID, &r.Provider, &r.ProviderTradeNo, &r.CallbackID, &r.OrderID, &r.Amount, &r.Currency,
		&r.Reason, &r.RawPayload, &r.Resolved, &r.Resolution, &r.ResolvedBy, &resolvedAt, &r.CreatedAt)...)
	if resolvedAt != nil {
		r.ResolvedAt = *resolvedAt
	}
	return err
}

// RecordPaymentReview keeps the payment callback p for a human, with its
// raw payload, in one statement, when RecordPayment's outcome for it — res
// and cause, the error of RecordPayment or of the transaction that ran it
// — calls for review: cause matching [ErrNotFound] (reason UNKNOWN_ORDER)
// or [ErrMismatch] (AMOUNT_MISMATCH or CURRENCY_MISMATCH), or a
// [PaymentOnPaidOrder] result with a nil cause (SECOND_TRADE). Any other
// outcome needs no review: it sends nothing and returns a zero
// PaymentReview, false and nil.
//
// It is idempotent: the same provider trade with the same reason is
// recorded once, and a redelivery returns the existing row with created
// false. Run it in its own transaction (or on a pool) after the payment
// transaction was refused and rolled back; a second trade, which commits,
// can be kept in the payment's transaction.
func (s *Store) RecordPaymentReview(ctx context.Context, q pgtx.Querier, p Payment, res PaymentResult, cause error) (_ PaymentReview, created bool, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return PaymentReview{}, false, nilHandle("q")
	}
	reason, ok := reviewReasonOf(res, cause)
	if !ok {
		return PaymentReview{}, false, nil
	}
	if p.Currency == "" {
		p.Currency = s.currency
	}
	switch {
	case checkText("Payment.Provider", p.Provider, 32, true) != nil:
		return PaymentReview{}, false, checkText("Payment.Provider", p.Provider, 32, true)
	case checkText("Payment.ProviderTradeNo", p.ProviderTradeNo, 128, true) != nil:
		return PaymentReview{}, false, checkText("Payment.ProviderTradeNo", p.ProviderTradeNo, 128, true)
	case checkText("Payment.CallbackID", p.CallbackID, 128, false) != nil:
		return PaymentReview{}, false, checkText("Payment.CallbackID", p.CallbackID, 128, false)
	case len(p.Currency) != 3 || !textcheck.Storable(p.Currency):
		return PaymentReview{}, false, invalid("Payment.Currency", "3 characters")
	}
	raw := p.RawPayload
	if raw == nil {
		raw = json.RawMessage("{}")
	}
	if err := jsonb.Check(raw); err != nil {
		return PaymentReview{}, false, invalid("Payment.RawPayload", err.Error())
	}
	var out PaymentReview
	err = scanReview(q.QueryRow(ctx, s.sql.recordReview, p.Provider, p.ProviderTradeNo, p.CallbackID, p.OrderID, p.Amount,
		p.Currency, reason, string(raw)), &out, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		// Inserted concurrently and committed during the statement: read it.
		err = scanReview(q.QueryRow(ctx, s.sql.recordReview, p.Provider, p.ProviderTradeNo, p.CallbackID, p.OrderID, p.Amount,
			p.Currency, reason, string(raw)), &out, &created)
	}
	if err != nil {
		return PaymentReview{}, false, fmt.Errorf("order: record payment review: %w", err)
	}
	return out, created, nil
}

// OpenPaymentReviews lists up to limit (1..10,000) unresolved reviews,
// oldest first.
func (s *Store) OpenPaymentReviews(ctx context.Context, q pgtx.Querier, limit int) (_ []PaymentReview, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return nil, nilHandle("q")
	}
	if limit < 1 || limit > 10_000 {
		return nil, invalid("limit", "must be between 1 and 10000")
	}
	rows, err := q.Query(ctx, s.sql.openReviews, limit)
	if err != nil {
		return nil, fmt.Errorf("order: open payment reviews: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PaymentReview, error) {
		var r PaymentReview
		err := scanReview(row, &r)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("order: open payment reviews: %w", err)
	}
	return out, nil
}

// ResolvePaymentReview closes a review with what was done (resolution, up
// to 256 characters, e.g. "refunded manually, ticket 7") and who did it
// (up to 128). Unknown id: [ErrNotFound]; already resolved:
// [ErrReviewResolved] with the stored row; nothing is written then. A call
// that waited for a concurrent resolution gets ErrReviewResolved with the
// row that resolution committed.
func (s *Store) ResolvePaymentReview(ctx context.Context, q pgtx.Querier, reviewID int64, resolution, resolvedBy string) (_ PaymentReview, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return PaymentReview{}, nilHandle("q")
	}
	switch {
	case reviewID <= 0:
		return PaymentReview{}, invalid("reviewID", "must be > 0")
	case checkText("resolution", resolution, 256, true) != nil:
		return PaymentReview{}, checkText("resolution", resolution, 256, true)
	case checkText("resolvedBy", resolvedBy, 128, true) != nil:
		return PaymentReview{}, checkText("resolvedBy", resolvedBy, 128, true)
	}
	var (
		out     PaymentReview
		updated bool
	)
	err = scanReview(q.QueryRow(ctx, s.sql.resolveReview, reviewID, resolution, resolvedBy), &out, &updated)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return PaymentReview{}, fmt.Errorf("order: payment review %d: %w", reviewID, ErrNotFound)
	case err != nil:
		return PaymentReview{}, fmt.Errorf("order: resolve payment review %d: %w", reviewID, err)
	case !updated:
		return out, fmt.Errorf("order: payment review %d: %w", reviewID, ErrReviewResolved)
	}
	return out, nil
}
