-- +goose Up
-- The inbox's BRIN indexes summarise each block range as soon as it
-- fills (autosummarize asks autovacuum to, at its next round) instead of
-- at the table's next VACUUM: until then a scan of the index reads every
-- range not yet summarised whole, as a possible match. The retention
-- statements read idx_inbox_created_brin by created_at; an audit of the
-- history reads idx_inbox_history_processed_brin, whose table only grows
-- (Archive appends to it) and is vacuumed rarely. Changing the option
-- takes a SHARE UPDATE EXCLUSIVE lock on the index, which lets reads and
-- writes go on.
ALTER INDEX idx_inbox_created_brin SET (autosummarize = on);

ALTER INDEX idx_inbox_history_processed_brin SET (autosummarize = on);
