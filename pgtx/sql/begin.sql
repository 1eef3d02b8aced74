-- The statements that open a transaction of RunInTx and RunBatch. BEGIN
-- itself is pgx's: RunInTx passes the isolation, access and deferrable
-- modes as pgx.TxOptions, and pgx sends one of its fixed texts (BEGIN
-- ISOLATION LEVEL READ COMMITTED, … READ ONLY DEFERRABLE), chosen from
-- the closed set of pgx's constants that Options accepts. The timeouts
-- follow BEGIN in the same pipeline (one Sync, one round trip), as bind
-- parameters: set_config(name, value, true) is SET LOCAL, ended with the
-- transaction.

-- name: set_lock_timeout
-- SET LOCAL lock_timeout: a statement waiting longer for a lock fails with
-- 55P03 (Options.LockTimeout).
-- $1 = milliseconds (text): the timeout in whole milliseconds, at least 1
-- index: none (reads no table)
SELECT set_config('lock_timeout', $1, true)

-- name: set_statement_timeout
-- SET LOCAL statement_timeout: a statement running longer is cancelled
-- with 57014 (Options.StatementTimeout).
-- $1 = milliseconds (text): the timeout in whole milliseconds, at least 1
-- index: none (reads no table)
SELECT set_config('statement_timeout', $1, true)
