-- The statements that open a transaction of RunInTx and RunBatch. BEGIN
-- itself is pgx's: RunInTx passes the isolation, access and deferrable
-- modes as pgx.TxOptions, and pgx sends one of its fixed texts (BEGIN
-- ISOLATION LEVEL READ COMMITTED, … READ ONLY DEFERRABLE), chosen from
-- the closed set of pgx's constants that Options accepts. The timeouts
-- travel with BEGIN, in the same round trip, as SET LOCAL
-- (set_config(name, value, true), ended with the transaction). In a
-- pipeline (RunBatch, DeferBegin) they are queued behind BEGIN with the
-- milliseconds as a bind parameter. When BEGIN takes a round trip of its
-- own, BEGIN and the statements below go as one simple-protocol message,
-- which takes no bind parameters: $1 is then written as a quoted integer
-- literal (sqlfile's Inline, digits only), so that the timeouts cost no
-- round trip and no describe in any exec mode.

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
