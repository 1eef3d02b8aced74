-- +goose Up
-- consumer_inbox_history: inbox rows moved out of consumer_inbox by
-- Inbox.Archive once they are older than the retention (the broker's
-- replay window plus the compensation and repair time), kept as evidence of
-- what each consumer did instead of deleted.
--
--   * LIKE consumer_inbox: the same columns, types, NOT NULLs, defaults and
--     CHECK constraints. A later migration that adds a column to
--     consumer_inbox adds it here too (a test compares the two tables).
--   * archived_at: when the row was moved.
--   * The same primary key: a message leaves consumer_inbox once. A row
--     here no longer deduplicates anything: a redelivery after the archive
--     is processed again, which is why the retention guard exists.
CREATE TABLE consumer_inbox_history (
    LIKE consumer_inbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    archived_at TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT pk_consumer_inbox_history PRIMARY KEY (consumer_group, message_id)
);

CREATE INDEX idx_inbox_history_ref
    ON consumer_inbox_history (ref, processed_at DESC)
    WHERE ref IS NOT NULL;

CREATE INDEX idx_inbox_history_processed_brin
    ON consumer_inbox_history USING BRIN (processed_at);
