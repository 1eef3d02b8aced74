-- The resolution of a COMMIT whose outcome is unknown
-- (Options.ResolveCommit), asked on another connection.

-- name: resolve_xid
-- The status of transaction $1 (committed, aborted, in progress, or null
-- when too old to be known) and the timeline of the server asked: null
-- while it is in recovery (a standby, where pg_walfile_name fails), so
-- that the caller asks again; a timeline other than the one read with the
-- id means a failover since, after which the id says nothing.
-- $1 = xid (text): the transaction id read before COMMIT, a decimal xid8
-- index: none (reads no table)
SELECT pg_xact_status($1::text::xid8), CASE WHEN pg_is_in_recovery() THEN NULL ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END
