-- +goose Up
-- payment_review: payment callbacks that match nothing, kept for a human
-- instead of only refused: a callback for an unknown order, an amount or
-- currency that differs from the order's, a second provider trade for an
-- order already paid. One row per (provider, provider_trade_no, reason):
-- a redelivered callback is recorded once. status 0 OPEN, 10 RESOLVED.
-- order_id is not a foreign key: the order may not exist.
CREATE TABLE payment_review (
    review_id         BIGINT       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider          VARCHAR(32)  NOT NULL,
    provider_trade_no VARCHAR(128) NOT NULL,
    callback_id       VARCHAR(128),
    order_id          BIGINT       NOT NULL,
    amount            BIGINT       NOT NULL,
    currency          VARCHAR(3)   NOT NULL,
    reason            VARCHAR(32)  NOT NULL,
    raw_payload       JSONB        NOT NULL DEFAULT '{}'::jsonb,
    status            SMALLINT     NOT NULL DEFAULT 0,
    resolution        VARCHAR(256),
    resolved_by       VARCHAR(128),
    resolved_at       TIMESTAMPTZ,
    created_at        TIMESTAMPTZ  NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT uq_payment_review UNIQUE (provider, provider_trade_no, reason),
    CONSTRAINT ck_payment_review_status CHECK (status IN (0, 10)),
    CONSTRAINT ck_payment_review_reason
        CHECK (reason IN ('UNKNOWN_ORDER', 'AMOUNT_MISMATCH', 'CURRENCY_MISMATCH', 'SECOND_TRADE')),
    CONSTRAINT ck_payment_review_resolved
        CHECK ((status = 0 AND resolved_at IS NULL)
            OR (status = 10 AND resolved_at IS NOT NULL AND resolution <> '' AND resolved_by <> ''))
);

CREATE INDEX idx_payment_review_open
    ON payment_review (created_at, review_id)
    WHERE status = 0;
