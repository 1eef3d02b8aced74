-- name: ReplicationStats
-- One row per WAL sender of this server (pg_stat_replication): the
-- standby's name, state and sync state, its write, flush and replay lags
-- in seconds (NULL once it has caught up and nothing is being written:
-- read as 0), and how many bytes of WAL it has yet to replay (NULL on a
-- standby, whose current WAL position cannot be read).
SELECT application_name,
       coalesce(state, '') AS state,
       coalesce(sync_state, '') AS sync_state,
       coalesce(extract(epoch FROM write_lag), 0)::float8 AS write_lag,
       coalesce(extract(epoch FROM flush_lag), 0)::float8 AS flush_lag,
       coalesce(extract(epoch FROM replay_lag), 0)::float8 AS replay_lag,
       CASE WHEN pg_is_in_recovery() THEN NULL
            ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint
       END AS replay_lag_bytes
FROM pg_catalog.pg_stat_replication
ORDER BY application_name, pid;
