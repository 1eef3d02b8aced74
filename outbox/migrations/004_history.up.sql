-- +goose Up
-- event_outbox_history: SENT events moved out of event_outbox by
-- Store.ArchiveSent, kept for the audit period instead of deleted.
--
--   * LIKE event_outbox: the same columns, types, NOT NULLs, defaults and
--     CHECK constraints (seq becomes a plain BIGINT: it keeps the value the
--     event had). A later migration that adds a column to event_outbox adds
--     it here too (a test compares the two tables).
--   * archived_at: when the row was moved.
--   * The primary key is event_id; dedup_key is NOT unique here: once an
--     event has left event_outbox its dedup key may be enqueued again, and
--     that event is archived in its turn.
--   * No index serves a relay: nothing claims from this table. BRIN on
--     sent_at serves retention of the history itself (drop or detach old
--     ranges); the aggregate and dedup-key indexes serve an audit that looks
--     for the events of one order, or for the event a state change promises.
CREATE TABLE event_outbox_history (
    LIKE event_outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    archived_at TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT pk_outbox_history PRIMARY KEY (event_id)
);

CREATE INDEX idx_outbox_history_sent_brin
    ON event_outbox_history USING BRIN (sent_at);

CREATE INDEX idx_outbox_history_aggregate
    ON event_outbox_history (aggregate_type, aggregate_id);

CREATE INDEX idx_outbox_history_dedup
    ON event_outbox_history (dedup_key);
