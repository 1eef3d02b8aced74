-- RunBatch's ROLLBACK of the failed transaction a raising statement left
-- on the connection (the Sync after an error in an explicit transaction
-- leaves it open, in the failed state). RunInTx rolls back through pgx's
-- Tx.Rollback.

-- name: rollback
-- Ends the connection's failed transaction.
-- index: none (reads no table)
-- not explained: a transaction control statement has no plan
ROLLBACK
