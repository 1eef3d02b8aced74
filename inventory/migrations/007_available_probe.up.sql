-- +goose Up
-- inventory_available_now: a bucket's available stock read with a snapshot
-- of its own; NULL when the bucket does not exist.
--
-- AllocateBucket and AdjustStock report the bucket's available stock when
-- they refuse as sold out. When that refusal comes after waiting for the
-- bucket's row lock, the statement's snapshot still holds the bucket as it
-- was before the wait: a waiter behind the allocation of the last unit
-- would report that unit as available ("1 available, 1 requested"). Like
-- inventory_ledger_id_now (migration 002), this VOLATILE function takes a
-- fresh snapshot for its query, so the refusal reports the stock the
-- transaction it waited for left. It runs only on the refusal branch.
-- +goose StatementBegin
CREATE FUNCTION inventory_available_now(p_activity BIGINT, p_sku BIGINT, p_bucket SMALLINT)
RETURNS INTEGER
LANGUAGE plpgsql
VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN (SELECT available_stock FROM sku_inventory
             WHERE activity_id = p_activity AND sku_id = p_sku AND bucket_no = p_bucket);
END
$$;
-- +goose StatementEnd
