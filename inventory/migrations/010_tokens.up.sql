-- +goose Up
-- Inventory tokens: a SKU's stock as one row per unit instead of counters
-- in buckets. An allocation claims free tokens with FOR UPDATE SKIP LOCKED
-- (concurrent allocations take different rows and never wait for one
-- another); a release frees the tokens its reservation holds. The ledger
-- is the same: PROVISION, ALLOCATE and RELEASE rows of bucket 0, so that
-- replaying it per (activity, SKU, bucket) gives, for a token SKU, its free
-- and claimed token counts.
--
-- inventory_sku.token_stock marks a SKU provisioned with tokens (then its
-- bucket_count is 1 and it has no sku_inventory row). Existing SKUs keep
-- their buckets.
ALTER TABLE inventory_sku
    ADD COLUMN token_stock BOOLEAN NOT NULL DEFAULT false;

-- A statement of its own: Citus runs ADD CONSTRAINT only as the
-- statement's sole subcommand.
ALTER TABLE inventory_sku
    ADD CONSTRAINT ck_inventory_sku_token_stock
        CHECK (NOT token_stock OR bucket_count = 1);

-- inventory_token: one row per unit of a token SKU (token_no 0 .. planned
-- stock - 1); reservation_id is the reservation holding it, NULL while it
-- is free. The key starts with (activity_id, sku_id), as the buckets'
-- does: hash distribution by activity_id keeps a SKU's tokens on the node
-- of its buckets, reservations and ledger. Updates change reservation_id,
-- which the partial indexes below read, so they are not HOT; fillfactor
-- 50 leaves room on each page for the new version of each of its tokens, so
-- a claim or a release writes one page, not that one and the table's end
-- (which every concurrent claim would extend at once).
CREATE TABLE inventory_token (
    activity_id    BIGINT      NOT NULL,
    sku_id         BIGINT      NOT NULL,
    token_no       INTEGER     NOT NULL,
    reservation_id UUID,
    version        BIGINT      NOT NULL DEFAULT 0,
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT pk_inventory_token
        PRIMARY KEY (activity_id, sku_id, token_no),
    CONSTRAINT fk_inventory_token_sku
        FOREIGN KEY (activity_id, sku_id)
        REFERENCES inventory_sku (activity_id, sku_id)
        ON DELETE RESTRICT,
    CONSTRAINT ck_inventory_token_no
        CHECK (token_no >= 0),
    CONSTRAINT ck_inventory_token_version
        CHECK (version >= 0)
)
WITH (fillfactor = 50);

-- The free tokens of a SKU in token order: what an allocation claims.
CREATE INDEX idx_token_free
    ON inventory_token (activity_id, sku_id, token_no)
    WHERE reservation_id IS NULL;

-- The tokens a reservation holds: what a release frees.
CREATE INDEX idx_token_reservation
    ON inventory_token (reservation_id)
    WHERE reservation_id IS NOT NULL;

-- inventory_stock_row: the stock as buckets, for reading: every
-- sku_inventory row, and for each token SKU one row of bucket 0 with its
-- token counts (total, free = available, claimed = allocated; version the
-- sum of the tokens' versions, updated_at the latest). Stock, GetBucket and
-- the audits read it, so the audit invariants (conservation, SKU total,
-- bucket count, ledger replay) hold for token SKUs unchanged.
CREATE VIEW inventory_stock_row AS
SELECT activity_id, sku_id, bucket_no, total_stock, available_stock, allocated_stock, version, updated_at
  FROM sku_inventory
UNION ALL
SELECT k.activity_id, k.sku_id, 0::smallint,
       count(t.token_no)::int,
       (count(t.token_no) FILTER (WHERE t.reservation_id IS NULL))::int,
       (count(t.token_no) FILTER (WHERE t.reservation_id IS NOT NULL))::int,
       coalesce(sum(t.version), 0)::bigint,
       coalesce(max(t.updated_at), k.created_at)
  FROM inventory_sku AS k
  LEFT JOIN inventory_token AS t ON t.activity_id = k.activity_id AND t.sku_id = k.sku_id
 WHERE k.token_stock
 GROUP BY k.activity_id, k.sku_id;

-- inventory_available_units_now: inventory_available_now (migration 007)
-- that also answers for a token SKU: bucket 0's free tokens, read with a
-- snapshot of its own (the count a refused allocation reports; it runs
-- only on the refusal branch). AdjustStock keeps inventory_available_now:
-- a token SKU has no bucket row to adjust.
-- +goose StatementBegin
CREATE FUNCTION inventory_available_units_now(p_activity BIGINT, p_sku BIGINT, p_bucket SMALLINT)
RETURNS INTEGER
LANGUAGE plpgsql
VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_bucket = 0 AND EXISTS (SELECT 1 FROM inventory_sku
                                 WHERE activity_id = p_activity AND sku_id = p_sku AND token_stock) THEN
        RETURN (SELECT count(*) FROM inventory_token
                 WHERE activity_id = p_activity AND sku_id = p_sku AND reservation_id IS NULL);
    END IF;
    RETURN (SELECT available_stock FROM sku_inventory
             WHERE activity_id = p_activity AND sku_id = p_sku AND bucket_no = p_bucket);
END
$$;
-- +goose StatementEnd
