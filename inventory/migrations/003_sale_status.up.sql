-- +goose Up
-- Sale status and sale window of a SKU (the stock UPDATE checks in one
-- statement that the stock suffices and the sale is on). AllocateBucket
-- decrements only while the SKU is ON_SALE and statement_timestamp() is
-- inside [sale_starts_at, sale_ends_at); NULL bounds are open. Existing SKUs stay ON_SALE with an open window.
--
-- 10 is ON_SALE (the default), 20 PAUSED and 30 ENDED. A SKU taken off
-- sale for good is ENDED.
ALTER TABLE inventory_sku
    ADD COLUMN sale_status    SMALLINT    NOT NULL DEFAULT 10,
    ADD COLUMN sale_starts_at TIMESTAMPTZ,
    ADD COLUMN sale_ends_at   TIMESTAMPTZ,
    ADD COLUMN sale_version   BIGINT      NOT NULL DEFAULT 0;

-- One constraint per ALTER TABLE: Citus runs ADD CONSTRAINT only as the
-- statement's sole subcommand.
ALTER TABLE inventory_sku
    ADD CONSTRAINT ck_inventory_sku_sale_status
        CHECK (sale_status IN (10, 20, 30));

ALTER TABLE inventory_sku
    ADD CONSTRAINT ck_inventory_sku_sale_window
        CHECK (sale_starts_at IS NULL OR sale_ends_at IS NULL OR sale_starts_at < sale_ends_at);

-- inventory_sale_log: every sale status or window change, who made it,
-- when and why (append-only; SetSaleStatus writes it in the same
-- statement as the change).
CREATE TABLE inventory_sale_log (
    log_id      BIGINT       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    activity_id BIGINT       NOT NULL,
    sku_id      BIGINT       NOT NULL,
    from_status SMALLINT     NOT NULL,
    to_status   SMALLINT     NOT NULL,
    starts_at   TIMESTAMPTZ,
    ends_at     TIMESTAMPTZ,
    operator    VARCHAR(128) NOT NULL,
    reason      VARCHAR(256) NOT NULL,
    created_at  TIMESTAMPTZ  NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT fk_sale_log_sku
        FOREIGN KEY (activity_id, sku_id)
        REFERENCES inventory_sku (activity_id, sku_id)
        ON DELETE RESTRICT,
    CONSTRAINT ck_sale_log_status
        CHECK (from_status IN (10, 20, 30) AND to_status IN (10, 20, 30)),
    CONSTRAINT ck_sale_log_operator
        CHECK (operator <> ''),
    CONSTRAINT ck_sale_log_reason
        CHECK (reason <> '')
);

CREATE INDEX idx_sale_log_sku
    ON inventory_sale_log (activity_id, sku_id, created_at);
