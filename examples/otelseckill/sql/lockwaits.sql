-- name: LockWaits
-- The sessions of the current database waiting for a heavyweight lock,
-- by the kind of lock awaited (pg_stat_activity): a row lock waited for
-- shows as transactionid (and tuple, for the waiters behind the first).
SELECT wait_event, count(*) AS waiting
FROM pg_catalog.pg_stat_activity
WHERE datname = current_database()
  AND wait_event_type = 'Lock'
GROUP BY wait_event
ORDER BY wait_event;
