-- +goose Up
-- ADJUST ledger rows are evidence for reconciliation: who made the adjustment
-- (operator), under which approval (approval_ref), and why (reason, which
-- every row has). A new ADJUST row without operator and approval reference
-- is refused by ck_ledger_adjust_evidence. The constraint is NOT VALID:
-- ADJUST rows written before this migration (rebalance moves) are kept as
-- they are, and Audit reports them as adjust_without_evidence.
ALTER TABLE inventory_ledger
    ADD COLUMN operator     VARCHAR(128),
    ADD COLUMN approval_ref VARCHAR(128);

-- A statement of its own: Citus runs ADD CONSTRAINT only as the
-- statement's sole subcommand.
ALTER TABLE inventory_ledger
    ADD CONSTRAINT ck_ledger_adjust_evidence
        CHECK (ledger_type <> 30
               OR (coalesce(operator, '') <> '' AND coalesce(approval_ref, '') <> ''))
        NOT VALID;
