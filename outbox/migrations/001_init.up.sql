-- +goose Up
-- event_outbox: the transactional outbox.
--
-- Choices, and why:
--   * seq: a BIGINT identity assigned at insert. Ordered mode publishes the
--     events of one ordering key in seq order; Enqueue takes a per-key
--     transaction advisory lock before the row gets its seq, so for one key
--     seq order is also commit order.
--   * ordering_key (nullable): events with the same non-NULL key are
--     published one at a time, in seq order. NULL means "no ordering".
--   * idx_outbox_ordering: serves the "is there an earlier unfinished event
--     of this key" probe of the claim. Partial: only ordered, unfinished
--     rows (SENT rows leave it).
--   * ck_outbox_retry also requires retry_count <= max_retry, and
--     ck_outbox_lock ties locked_by/locked_at to SENDING, ck_outbox_sent ties
--     sent_at to SENT: the states the code relies on are enforced.
CREATE TABLE event_outbox (
    event_id       UUID         PRIMARY KEY,
    seq            BIGINT       GENERATED ALWAYS AS IDENTITY,
    dedup_key      VARCHAR(160) NOT NULL,
    aggregate_type VARCHAR(64)  NOT NULL,
    aggregate_id   VARCHAR(128) NOT NULL,
    topic          VARCHAR(128) NOT NULL,
    tag            VARCHAR(64),
    message_key    VARCHAR(160) NOT NULL,
    ordering_key   VARCHAR(160),
    schema_version INTEGER      NOT NULL,
    payload        JSONB        NOT NULL,
    headers        JSONB        NOT NULL DEFAULT '{}'::jsonb,
    status         SMALLINT     NOT NULL DEFAULT 0,
    available_at   TIMESTAMPTZ  NOT NULL DEFAULT statement_timestamp(),
    retry_count    INTEGER      NOT NULL DEFAULT 0,
    max_retry      INTEGER      NOT NULL DEFAULT 16,
    locked_by      VARCHAR(128),
    locked_at      TIMESTAMPTZ,
    sent_at        TIMESTAMPTZ,
    last_error     TEXT,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT statement_timestamp(),
    updated_at     TIMESTAMPTZ  NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT uq_outbox_dedup
        UNIQUE (dedup_key),
    CONSTRAINT ck_outbox_status
        CHECK (status IN (0, 10, 20, 30, 40)),
    CONSTRAINT ck_outbox_retry
        CHECK (retry_count >= 0 AND max_retry > 0 AND retry_count <= max_retry),
    CONSTRAINT ck_outbox_schema
        CHECK (schema_version > 0),
    CONSTRAINT ck_outbox_lock
        CHECK ((status = 10) = (locked_by IS NOT NULL AND locked_at IS NOT NULL)),
    CONSTRAINT ck_outbox_sent
        CHECK ((status = 20) = (sent_at IS NOT NULL)),
    CONSTRAINT ck_outbox_last_error
        CHECK (octet_length(last_error) <= 4000)
)
WITH (fillfactor = 80);

-- The claim: ready rows, oldest first. Only PENDING/RETRY rows are indexed,
-- so the scan cost follows the backlog, not the SENT history.
CREATE INDEX idx_outbox_ready
    ON event_outbox (available_at, created_at, event_id)
    INCLUDE (topic, tag, message_key, aggregate_type, aggregate_id)
    WHERE status IN (0, 30);

-- Lease recovery: SENDING rows by lease start.
CREATE INDEX idx_outbox_stale_sending
    ON event_outbox (locked_at, event_id)
    WHERE status = 10;

-- Ordered mode: the unfinished events of each ordering key in seq order.
CREATE INDEX idx_outbox_ordering
    ON event_outbox (ordering_key, seq)
    INCLUDE (status)
    WHERE ordering_key IS NOT NULL AND status IN (0, 10, 30, 40);

-- Every event is inserted and updated at least once at the rate of orders:
-- vacuum and analyze this hot queue table early.
ALTER TABLE event_outbox SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 500,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_analyze_threshold = 500
);
