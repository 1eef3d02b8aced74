-- +goose Up
-- idx_outbox_ready without INCLUDE columns.
--
-- 001 carried topic, tag, message_key, aggregate_type and aggregate_id in the
-- index, as if the claim could read them from it. It cannot: the claim locks
-- its rows (FOR UPDATE SKIP LOCKED) and so visits the heap for every row
-- anyway. The columns only doubled the index (13 MB against 6.4 MB for 50,000
-- pending events) and the cost of writing it on every enqueue (a 50,000-row
-- insert took about 15% longer).
--
-- CREATE INDEX blocks writes to event_outbox while it builds; the table holds
-- only unpublished events and recent history (PurgeSent), so that is brief.
DROP INDEX idx_outbox_ready;

CREATE INDEX idx_outbox_ready
    ON event_outbox (available_at, created_at, event_id)
    WHERE status IN (0, 30);
