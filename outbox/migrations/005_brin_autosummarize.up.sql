-- +goose Up
-- idx_outbox_history_sent_brin summarises each block range as soon as it
-- fills (autosummarize asks autovacuum to, at its next round) instead of
-- at the table's next VACUUM: until then a scan of the index reads every
-- range not yet summarised whole, as a possible match, and the history
-- table only grows (ArchiveSent appends to it) and is vacuumed rarely.
-- Changing the option takes a SHARE UPDATE EXCLUSIVE lock on the index,
-- which lets reads and writes go on.
ALTER INDEX idx_outbox_history_sent_brin SET (autosummarize = on);
