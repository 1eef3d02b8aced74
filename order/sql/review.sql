-- Store.RecordReview, Store.OpenReviews and Store.ResolveReview.

-- name: record_review
-- Records a payment to review once per provider, trade number and reason:
-- the new row (true), or the stored one (false).
-- $1 = provider (text)
-- $2 = provider_trade_no (text)
-- $3 = callback_id (text): '' for none (stored as NULL)
-- $4 = order_id (int8)
-- $5 = amount (int8)
-- $6 = currency (text)
-- $7 = reason (text)
-- $8 = raw_payload (jsonb)
-- index: uq_payment_review
WITH ins AS (
	INSERT INTO {schema}.payment_review (provider, provider_trade_no, callback_id, order_id, amount, currency, reason, raw_payload)
	VALUES ($1, $2, nullif($3, ''), $4, $5, $6, $7, $8)
	ON CONFLICT (provider, provider_trade_no, reason) DO NOTHING
	RETURNING review_id, provider, provider_trade_no, coalesce(callback_id, ''), order_id, amount, currency, reason,
	raw_payload, status = 10, coalesce(resolution, ''), coalesce(resolved_by, ''), resolved_at, created_at
)
SELECT true, * FROM ins
UNION ALL
SELECT false, review_id, provider, provider_trade_no, coalesce(callback_id, ''), order_id, amount, currency, reason,
	raw_payload, status = 10, coalesce(resolution, ''), coalesce(resolved_by, ''), resolved_at, created_at FROM {schema}.payment_review
 WHERE provider = $1 AND provider_trade_no = $2 AND reason = $7 AND NOT EXISTS (SELECT 1 FROM ins)

-- name: open_reviews
-- Up to $1 OPEN reviews, oldest first.
-- $1 = limit (int4)
-- index: idx_payment_review_open
SELECT review_id, provider, provider_trade_no, coalesce(callback_id, ''), order_id, amount, currency, reason,
	raw_payload, status = 10, coalesce(resolution, ''), coalesce(resolved_by, ''), resolved_at, created_at FROM {schema}.payment_review WHERE status = 0
 ORDER BY created_at, review_id LIMIT $1

-- name: resolve_review
-- Resolves an OPEN review; when nothing was updated, cur returns the row
-- as it is (locked, so a concurrent resolution is seen committed).
-- $1 = review_id (int8)
-- $2 = resolution (text)
-- $3 = resolved_by (text)
-- index: payment_review_pkey
WITH upd AS (
	UPDATE {schema}.payment_review
	   SET status = 10, resolution = $2, resolved_by = $3, resolved_at = statement_timestamp()
	 WHERE review_id = $1 AND status = 0
	RETURNING review_id, provider, provider_trade_no, coalesce(callback_id, ''), order_id, amount, currency, reason,
	raw_payload, status = 10, coalesce(resolution, ''), coalesce(resolved_by, ''), resolved_at, created_at
), cur AS (
	SELECT review_id, provider, provider_trade_no, coalesce(callback_id, ''), order_id, amount, currency, reason,
	raw_payload, status = 10, coalesce(resolution, ''), coalesce(resolved_by, ''), resolved_at, created_at
	  FROM {schema}.payment_review
	 WHERE review_id = $1 AND NOT EXISTS (SELECT 1 FROM upd)
	   FOR UPDATE
)
SELECT true, * FROM upd
UNION ALL
SELECT false, * FROM cur
