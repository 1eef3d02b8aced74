-- name: WALStats
-- The WAL bytes generated since the statistics were last reset
-- (pg_stat_wal, PostgreSQL 14 and later, one row).
SELECT wal_bytes::bigint AS wal_bytes
FROM pg_catalog.pg_stat_wal;
