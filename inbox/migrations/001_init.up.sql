-- +goose Up
-- consumer_inbox: one row per (consumer group, message) that a consumer has
-- processed. The row is inserted by the consumer's own transaction, so it
-- exists only if that transaction committed.
--
-- Choices, and why:
--   * no reservation_id or order_id columns: they would tie the table to the
--     order flow. The generic replacement is ref (any business reference the
--     consumer wants to find messages by, e.g. a reservation id as text),
--     result_code and result_payload (jsonb: "what I did", returned to
--     duplicates). idx_inbox_ref is a partial index
--     on ref, so consumers that do not set ref pay nothing for it.
--   * message_key is optional (not every broker message has a key).
--   * status has two values instead of one: 10 CLAIMED (the processing
--     transaction committed without recording a result) and 20 PROCESSED
--     (result recorded). result_code is NULL exactly while CLAIMED.
--   * created_at is the claim time, processed_at the time the result was
--     recorded (equal to created_at for rows never completed), so retention
--     can work on processed_at alone (BRIN: tiny, and enough for a
--     column that grows with insertion order). On PostgreSQL 16+
--     BRIN is a summarizing index and does not prevent HOT updates, so
--     Complete's update usually stays on the page; fillfactor 90 leaves room
--     for that one update.
--   * CHECKs reject empty keys and mirror the Go validation, so a writer that
--     bypasses the Go package cannot store what the package would refuse.
CREATE TABLE consumer_inbox (
    consumer_group VARCHAR(128) NOT NULL,
    message_id     UUID         NOT NULL,
    topic          VARCHAR(128) NOT NULL,
    tag            VARCHAR(64),
    message_key    VARCHAR(160),
    ref            VARCHAR(160),
    payload_hash   BYTEA,
    status         SMALLINT     NOT NULL DEFAULT 10,
    result_code    VARCHAR(64),
    result_payload JSONB,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT statement_timestamp(),
    processed_at   TIMESTAMPTZ  NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT pk_consumer_inbox
        PRIMARY KEY (consumer_group, message_id),
    CONSTRAINT ck_inbox_status
        CHECK (status IN (10, 20)),
    CONSTRAINT ck_inbox_result
        CHECK ((status = 10 AND result_code IS NULL AND result_payload IS NULL)
            OR (status = 20 AND result_code IS NOT NULL AND result_code <> '')),
    CONSTRAINT ck_inbox_group
        CHECK (consumer_group <> ''),
    CONSTRAINT ck_inbox_topic
        CHECK (topic <> ''),
    CONSTRAINT ck_inbox_message_id
        CHECK (message_id <> '00000000-0000-0000-0000-000000000000'),
    CONSTRAINT ck_inbox_payload_hash
        CHECK (payload_hash IS NULL OR octet_length(payload_hash) BETWEEN 1 AND 64),
    CONSTRAINT ck_inbox_times
        CHECK (processed_at >= created_at)
) WITH (fillfactor = 90);

CREATE INDEX idx_inbox_ref
    ON consumer_inbox (ref, processed_at DESC)
    WHERE ref IS NOT NULL;

CREATE INDEX idx_inbox_processed_brin
    ON consumer_inbox USING BRIN (processed_at);
