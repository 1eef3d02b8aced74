package order

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/jsonb"
	"github.com/seckillkit/seckill/internal/textcheck"
	"github.com/seckillkit/seckill/pgtx"
)

// ReviewReason says why a payment callback was kept for review.
type ReviewReason string

// Review reasons (mirrored by ck_payment_review_reason).
const (
	ReviewUnknownOrder     ReviewReason = "UNKNOWN_ORDER"     // no order has the callback's order id
	ReviewAmountMismatch   ReviewReason = "AMOUNT_MISMATCH"   // the amount differs from the order's
	ReviewCurrencyMismatch ReviewReason = "CURRENCY_MISMATCH" // the currency differs from the order's
	ReviewSecondTrade      ReviewReason = "SECOND_TRADE"      // another provider trade for an order already paid
)

// ReviewReasonOf returns the review reason of a RecordPayment error or
// result: an error matching [ErrNotFound], [ErrAmountMismatch] or
// [ErrCurrencyMismatch], or a [PaymentOnPaidOrder] result. ok is false for
// anything else (a result that needs no review, or an error that is not
// about the callback's content).
func ReviewReasonOf(res PaymentResult, err error) (ReviewReason, bool) {
	switch {
	case errors.Is(err, ErrNotFound):
		return ReviewUnknownOrder, true
	case errors.Is(err, ErrAmountMismatch):
		return ReviewAmountMismatch, true
	case errors.Is(err, ErrCurrencyMismatch):
		return ReviewCurrencyMismatch, true
	case err == nil && res.Kind == PaymentOnPaidOrder:
		return ReviewSecondTrade, true
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
	Currency        string          // the callback's currency, three upper-case letters
	Reason          ReviewReason    // why the callback was kept; with Provider and ProviderTradeNo unique
	RawPayload      json.RawMessage // the provider's payload as stored by jsonb; {} when none was given
	Resolved        bool            // status RESOLVED (10): a person decided; false while OPEN (0)
	// Resolution (what was decided) and ResolvedBy (who) are "" while
	// the review is open.
	Resolution, ResolvedBy string
	// ResolvedAt is zero while the review is open; CreatedAt is when the
	// callback was first recorded (the server's statement time).
	ResolvedAt, CreatedAt time.Time
}

const reviewCols = `review_id, provider, provider_trade_no, coalesce(callback_id, ''), order_id, amount, currency, reason,
	raw_payload, status = 10, coalesce(resolution, ''), coalesce(resolved_by, ''), resolved_at, created_at`

const recordReviewSQL = `
WITH ins AS (
	INSERT INTO {schema}.payment_review (provider, provider_trade_no, callback_id, order_id, amount, currency, reason, raw_payload)
	VALUES ($1, $2, nullif($3, ''), $4, $5, $6, $7, $8)
	ON CONFLICT (provider, provider_trade_no, reason) DO NOTHING
	RETURNING ` + reviewCols + `
)
SELECT true, * FROM ins
UNION ALL
SELECT false, ` + reviewCols + ` FROM {schema}.payment_review
 WHERE provider = $1 AND provider_trade_no = $2 AND reason = $7 AND NOT EXISTS (SELECT 1 FROM ins)`

func scanReview(row pgx.Row, r *PaymentReview, extra ...any) error {
	var resolvedAt *time.Time
	var reason string
	err := row.Scan(append(extra, &r.ReviewID, &r.Provider, &r.ProviderTradeNo, &r.CallbackID, &r.OrderID, &r.Amount, &r.Currency,
		&reason, &r.RawPayload, &r.Resolved, &r.Resolution, &r.ResolvedBy, &resolvedAt, &r.CreatedAt)...)
	r.Reason = ReviewReason(reason)
	if resolvedAt != nil {
		r.ResolvedAt = *resolvedAt
	}
	return err
}

// RecordPaymentReview keeps a payment callback that matches nothing for a
// human (reason from [ReviewReasonOf]), with its raw payload, in one
// statement. It is idempotent: the same provider trade with the same reason
// is recorded once, and a redelivery returns the existing row with created
// false. Run it in its own transaction (or on a pool) after the payment
// transaction was refused and rolled back.
func (s *Store) RecordPaymentReview(ctx context.Context, q pgtx.Querier, p Payment, reason ReviewReason) (_ PaymentReview, _ bool, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return PaymentReview{}, false, nilHandle("q")
	}
	switch reason {
	case ReviewUnknownOrder, ReviewAmountMismatch, ReviewCurrencyMismatch, ReviewSecondTrade:
	default:
		return PaymentReview{}, false, invalid("reason", fmt.Sprintf("unknown review reason %q", reason))
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
	var (
		out     PaymentReview
		created bool
	)
	err = scanReview(q.QueryRow(ctx, s.sql.recordReview, p.Provider, p.ProviderTradeNo, p.CallbackID, p.OrderID, p.Amount,
		p.Currency, string(reason), string(raw)), &out, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		// Inserted concurrently and committed during the statement: read it.
		err = scanReview(q.QueryRow(ctx, s.sql.recordReview, p.Provider, p.ProviderTradeNo, p.CallbackID, p.OrderID, p.Amount,
			p.Currency, string(reason), string(raw)), &out, &created)
	}
	if err != nil {
		return PaymentReview{}, false, fmt.Errorf("order: record payment review: %w", err)
	}
	return out, created, nil
}

const openReviewsSQL = `SELECT ` + reviewCols + ` FROM {schema}.payment_review WHERE status = 0
 ORDER BY created_at, review_id LIMIT $1`

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

// resolveReviewSQL resolves an OPEN review; when nothing was updated, cur
// reads the review with a locking read, which waits for a concurrent
// resolver and returns the row it committed (the statement's snapshot
// would still show the review OPEN).
const resolveReviewSQL = `
WITH upd AS (
	UPDATE {schema}.payment_review
	   SET status = 10, resolution = $2, resolved_by = $3, resolved_at = statement_timestamp()
	 WHERE review_id = $1 AND status = 0
	RETURNING ` + reviewCols + `
), cur AS (
	SELECT ` + reviewCols + `
	  FROM {schema}.payment_review
	 WHERE review_id = $1 AND NOT EXISTS (SELECT 1 FROM upd)
	   FOR UPDATE
)
SELECT true, * FROM upd
UNION ALL
SELECT false, * FROM cur`

// ErrReviewResolved is matched when [Store.ResolvePaymentReview] finds the
// review already resolved; nothing is written (the first resolution
// stands).
var ErrReviewResolved = errors.New("order: payment review already resolved")

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
