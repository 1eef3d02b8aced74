-- +goose Up
-- inventory_ledger_id_now: the ledger row holding an idempotency key, read
-- with a snapshot of its own.
--
-- AllocateBucket and Release decide in one statement, and in Read Committed
-- one statement reads one snapshot. When a concurrent duplicate (same
-- reservation) committed while the statement waited for the bucket's row
-- lock, PostgreSQL re-checks only the bucket row's own conditions: the
-- ledger probe still reads the old snapshot and misses the duplicate's row,
-- so a duplicate that finds the bucket emptied would look sold out (or, for
-- a release, inconsistent). A VOLATILE PL/pgSQL function takes a fresh
-- snapshot for each query it runs, so calling it in the statement's
-- zero-row branch (after the bucket's lock was waited for) sees the
-- duplicate's committed row. It runs only on that branch, never on the path
-- that changes stock.
--
-- SET search_path FROM CURRENT pins the schema the migration runs in
-- (migrate.Apply sets it; goose / golang-migrate users SET search_path TO
-- their schema first), so the unqualified table name always means this
-- schema's ledger.
-- +goose StatementBegin
CREATE FUNCTION inventory_ledger_id_now(p_key VARCHAR)
RETURNS BIGINT
LANGUAGE plpgsql
VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN (SELECT ledger_id FROM inventory_ledger WHERE idempotency_key = p_key);
END
$$;
-- +goose StatementEnd
