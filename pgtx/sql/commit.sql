-- The statements around COMMIT: the transaction id read before it (for
-- Options.ResolveCommit) and the COMMIT that RunBatch queues itself
-- (RunInTx commits through pgx's Tx.Commit). The timeline is the first
-- eight hex digits of the name of the WAL file being written: on
-- PostgreSQL 15 and later it is the new timeline as soon as a promoted
-- standby accepts writes (the timeline of pg_control_checkpoint() changes
-- only at the next checkpoint). pg_walfile_name fails during recovery, so
-- it runs only when the transaction holds an id (which a standby never
-- gives).

-- name: capture_xid
-- RunInTx's read of the transaction id before COMMIT, with the server's
-- timeline: null, null when the transaction has no id yet.
-- index: none (reads no table)
SELECT x::text, CASE WHEN x IS NULL THEN NULL ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END
FROM (SELECT pg_current_xact_id_if_assigned() AS x) AS s

-- name: batch_capture_xid
-- RunBatch's read of the transaction id, queued just before COMMIT.
-- PostgreSQL sends nothing back before the batch's Sync unless its output
-- buffer (8 kB) fills, and a break during COMMIT's flush would then leave
-- the id unread: the second row, 16 kB of padding, fills the buffer, so
-- the first row leaves the server before COMMIT runs.
-- index: none (reads no table)
SELECT x::text, CASE WHEN x IS NULL THEN NULL ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END, NULL::text
FROM (SELECT pg_current_xact_id_if_assigned() AS x) AS s
UNION ALL SELECT NULL, NULL, repeat(' ', 16384)

-- name: commit
-- RunBatch's COMMIT, the last statement of its pipeline.
-- index: none (reads no table)
-- not explained: a transaction control statement has no plan
COMMIT
