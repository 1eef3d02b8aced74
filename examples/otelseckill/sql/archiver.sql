-- name: ServerAndArchiver
-- The server's version and the WAL archiver's counters (pg_stat_archiver,
-- one row).
SELECT current_setting('server_version_num')::int AS server_version_num,
       archived_count,
       failed_count,
       extract(epoch FROM last_failed_time)::float8 AS last_failed_epoch
FROM pg_catalog.pg_stat_archiver;
