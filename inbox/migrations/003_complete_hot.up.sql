-- +goose Up
-- Complete's update (CLAIMED -> PROCESSED: status, result_code,
-- result_payload, processed_at) becomes a HOT update on every supported
-- PostgreSQL: no index of consumer_inbox covers a column it changes.
--
-- 001 indexed processed_at twice: idx_inbox_ref (ref, processed_at DESC) and
-- the BRIN idx_inbox_processed_brin, which before PostgreSQL 16 also keeps an
-- update from being HOT. So every Complete wrote its row again in every
-- index (the primary key, the ref index, the BRIN): in the example's whole
-- stack, about 3.4 primary-key records per order where 2 messages are
-- claimed. Both now use created_at, the claim time, which no statement
-- updates:
--
--   * idx_inbox_ref (ref, created_at DESC): a consumer's messages by its
--     business reference, newest claim first.
--   * idx_inbox_created_brin: the retention statements look for
--     processed_at < horizon, and ck_inbox_times (processed_at >=
--     created_at) makes created_at < horizon true of every such row, so
--     purge adds that condition and reads the BRIN by it.
--
-- fillfactor 90 (001) leaves room on the page for the updated row.
--
-- CREATE INDEX blocks writes to consumer_inbox while it builds; the table
-- holds the messages of the retention window only (Purge, Archive). On a
-- large inbox, build the two indexes by hand first, under other names, with
-- CREATE INDEX CONCURRENTLY, and rename them.
DROP INDEX idx_inbox_ref;

CREATE INDEX idx_inbox_ref
    ON consumer_inbox (ref, created_at DESC)
    WHERE ref IS NOT NULL;

DROP INDEX idx_inbox_processed_brin;

CREATE INDEX idx_inbox_created_brin
    ON consumer_inbox USING BRIN (created_at);
