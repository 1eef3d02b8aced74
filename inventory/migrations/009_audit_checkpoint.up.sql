-- +goose Up
-- The audit checkpoint: the ledger's summed deltas per bucket up to a
-- watermark, so that an audit during a sale (AuditIncremental) replays only
-- the ledger rows after it instead of the whole history.
--
-- inventory_audit_watermark holds one row: through_ledger_id, the ledger id
-- up to which inventory_audit_checkpoint holds the sums. Checkpoint moves it
-- (compare-and-set on the old value, in the statement that adds the new
-- rows' deltas to the sums), and only to an id below which every ledger
-- insert is decided, committed or rolled back: ledger ids are taken in
-- order but become visible out of order, and a row that committed below
-- the watermark after the sums were taken would be left out of every
-- incremental replay. 0 (the start) means no row is summed yet.
CREATE TABLE inventory_audit_watermark (
    singleton         BOOLEAN     NOT NULL DEFAULT true,
    through_ledger_id BIGINT      NOT NULL DEFAULT 0,
    advanced_at       TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT pk_inventory_audit_watermark
        PRIMARY KEY (singleton),
    CONSTRAINT ck_inventory_audit_watermark_singleton
        CHECK (singleton),
    CONSTRAINT ck_inventory_audit_watermark_id
        CHECK (through_ledger_id >= 0)
);

INSERT INTO inventory_audit_watermark (singleton) VALUES (true);

-- inventory_audit_checkpoint: per bucket, the sums of the deltas of every
-- ledger row with ledger_id <= the watermark. No foreign key: the sums are
-- evidence, kept even for a bucket that no longer exists (the audit then
-- reports it).
CREATE TABLE inventory_audit_checkpoint (
    activity_id BIGINT   NOT NULL,
    sku_id      BIGINT   NOT NULL,
    bucket_no   SMALLINT NOT NULL,
    available   BIGINT   NOT NULL,
    allocated   BIGINT   NOT NULL,
    total       BIGINT   NOT NULL,
    CONSTRAINT pk_inventory_audit_checkpoint
        PRIMARY KEY (activity_id, sku_id, bucket_no)
);
