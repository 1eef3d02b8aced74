-- name: TableStats
-- The statistics of every table of one schema, from pg_stat_user_tables
-- (a view over the server's in-memory counters: no table is read).
-- $1 schema: the schema whose tables are reported.
SELECT relname,
       n_live_tup,
       n_dead_tup,
       autovacuum_count,
       extract(epoch FROM last_autovacuum)::float8 AS last_autovacuum_epoch
FROM pg_catalog.pg_stat_user_tables
WHERE schemaname = $1
ORDER BY relname;
