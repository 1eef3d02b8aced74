-- +goose Up
-- idx_ledger_created_brin summarises each block range as soon as it
-- fills (autosummarize asks autovacuum to, at its next round) instead of
-- at the table's next VACUUM: until then a scan of the index reads every
-- range not yet summarised whole, as a possible match, and the ledger only
-- grows (rows are inserted, never updated), so autovacuum visits it for
-- its inserts alone. Migration 011 creates its BRIN index so. Changing
-- the option takes a SHARE UPDATE EXCLUSIVE lock on the index, which lets
-- reads and writes go on.
ALTER INDEX idx_ledger_created_brin SET (autosummarize = on);
