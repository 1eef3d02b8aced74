-- +goose Up
-- inventory_refuse raises the error that names why a one-batch statement
-- (a Queue…OrAbort form) refused: its SQLSTATE and message name the
-- condition, and the client matches the SQLSTATE to the package's
-- sentinel error. The statements call it only when they refuse, with an
-- argument read from their own rows, so no planner folds the call into a
-- constant and no Citus coordinator evaluates it before routing the
-- statement: it runs where the statement runs (on Citus, the node holding
-- the schema).
--
--   SK001 sold out                SK006 nothing allocated to release
--   SK002 not on sale             SK007 inconsistent counters
--   SK003 unknown bucket          SK008 not sold out
--   SK004 unknown SKU             SK009 reservation not found
--   SK005 allocation does not match its reservation
--
-- ref is the reservation id or the ledger key the statement concerns
-- (NULL when none). It returns no value: it always raises.
-- +goose StatementBegin
CREATE FUNCTION inventory_refuse(code TEXT, activity_id BIGINT, sku_id BIGINT,
                                 bucket INTEGER, quantity INTEGER, ref TEXT)
RETURNS BIGINT
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = CASE code
        WHEN 'SK001' THEN format('inventory: sold out: activity %s sku %s bucket %s has fewer than %s units available',
                                 activity_id, sku_id, bucket, quantity)
        WHEN 'SK002' THEN format('inventory: not on sale: activity %s sku %s is not ON_SALE or outside its sale window',
                                 activity_id, sku_id)
        WHEN 'SK003' THEN format('inventory: unknown bucket: activity %s sku %s has no bucket %s',
                                 activity_id, sku_id, bucket)
        WHEN 'SK004' THEN format('inventory: unknown SKU: activity %s sku %s was never provisioned',
                                 activity_id, sku_id)
        WHEN 'SK005' THEN format('inventory: allocation does not match its reservation: %s is not recorded for activity %s sku %s bucket %s quantity %s and this buyer, or may no longer take stock',
                                 ref, activity_id, sku_id, bucket, quantity)
        WHEN 'SK006' THEN format('inventory: reservation has no allocation: no %s ledger row to release',
                                 ref)
        WHEN 'SK007' THEN format('inventory: inconsistent inventory state: activity %s sku %s bucket %s holds fewer than %s allocated units for %s',
                                 activity_id, sku_id, bucket, quantity, ref)
        WHEN 'SK008' THEN format('inventory: not sold out: activity %s sku %s bucket %s has %s or more units available',
                                 activity_id, sku_id, bucket, quantity)
        WHEN 'SK009' THEN format('inventory: reservation not found: %s', ref)
        ELSE format('inventory: refused (%s)', code)
    END;
END
$$;
-- +goose StatementEnd
