-- +goose Up
-- idx_outbox_dead: the DEAD events, for Stats and for whoever reviews them.
--
-- Stats counts every status but SENT exactly, each through a partial index
-- that holds only that status's rows (idx_outbox_ready for PENDING and
-- RETRY, idx_outbox_stale_sending for SENDING, this one for DEAD), so its
-- cost follows the events still in flight or dead, not the SENT history a
-- busy outbox keeps until PurgeSent (ten million rows and more). DEAD rows
-- are few and never change again, so the index costs nearly nothing.
CREATE INDEX idx_outbox_dead
    ON event_outbox (created_at, event_id)
    WHERE status = 40;
