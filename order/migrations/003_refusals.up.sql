-- +goose Up
-- order_refuse raises the error that names why a statement queued with
-- pgtx.Abort (QueueTransitionOrder, QueueRecordPayment) refused: its
-- SQLSTATE and message name the condition, and the client matches the
-- SQLSTATE to the package's sentinel error. The statements call it only
-- when they refuse, with an argument read from their own rows, so no
-- planner folds the call into a constant and no Citus coordinator
-- evaluates it before routing the statement: it runs where the statement
-- runs (on Citus, the node holding the schema).
--
--   SK101 order not found              SK104 payment amount mismatch
--   SK102 illegal status transition    SK105 payment currency mismatch
--   SK103 not yet expired              SK106 payment already recorded
--
-- status is the order's current status (NULL when none), detail the
-- requested status or the payment's value. It returns no value: it always
-- raises.
-- +goose StatementBegin
CREATE FUNCTION order_refuse(code TEXT, order_id BIGINT, status SMALLINT, detail TEXT)
RETURNS BIGINT
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = CASE code
        WHEN 'SK101' THEN format('order: order %s not found', order_id)
        WHEN 'SK102' THEN format('order: order %s cannot go from status %s to %s', order_id, status, detail)
        WHEN 'SK103' THEN format('order: order %s (status %s) has not expired yet', order_id, status)
        WHEN 'SK104' THEN format('order: payment amount %s does not match order %s', detail, order_id)
        WHEN 'SK105' THEN format('order: payment currency %s does not match order %s', detail, order_id)
        WHEN 'SK106' THEN format('order: payment %s for order %s already recorded', detail, order_id)
        ELSE format('order: refused (%s)', code)
    END;
END
$$;
-- +goose StatementEnd
