-- +goose Up
-- inventory: bucketed stock, reservations and the stock ledger.
--
-- Names are unqualified:
-- migrate.Apply runs this file with search_path set to the target schema
-- (goose / golang-migrate users: SET search_path TO <schema> first).
-- Every choice that is not obvious is explained where it is made.

-- =========================================================
-- inventory_sku: what the inventory needs to know of a SKU: the planned
-- total and the bucket count of one SKU of one activity. The activity and
-- SKU configuration (prices, titles, per-user limits) belongs to the
-- service, not to this package; sku_inventory references this table, so that
-- "sum of bucket totals = planned stock" has an anchor inventory owns.
-- =========================================================
CREATE TABLE inventory_sku (
    activity_id   BIGINT      NOT NULL,
    sku_id        BIGINT      NOT NULL,
    planned_stock INTEGER     NOT NULL,
    bucket_count  SMALLINT    NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT pk_inventory_sku
        PRIMARY KEY (activity_id, sku_id),
    CONSTRAINT ck_inventory_sku_ids
        CHECK (activity_id > 0 AND sku_id > 0),
    CONSTRAINT ck_inventory_sku_stock
        CHECK (planned_stock >= 0),
    CONSTRAINT ck_inventory_sku_bucket_count
        CHECK (bucket_count BETWEEN 1 AND 256)
);

-- =========================================================
-- sku_inventory: the final stock, one row per bucket.
-- bucket_no = 0 alone is the unbucketed (bucket_count = 1) case.
-- Deviation: bucket_no is bounded by 255 (bucket_count <= 256) and the
-- foreign key points at inventory_sku (see above). Updates never change the
-- key columns, so the foreign key costs nothing on the hot path.
-- =========================================================
CREATE TABLE sku_inventory (
    activity_id     BIGINT      NOT NULL,
    sku_id          BIGINT      NOT NULL,
    bucket_no       SMALLINT    NOT NULL DEFAULT 0,
    total_stock     INTEGER     NOT NULL,
    available_stock INTEGER     NOT NULL,
    allocated_stock INTEGER     NOT NULL DEFAULT 0,
    version         BIGINT      NOT NULL DEFAULT 0,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT pk_sku_inventory
        PRIMARY KEY (activity_id, sku_id, bucket_no),
    CONSTRAINT fk_inventory_sku
        FOREIGN KEY (activity_id, sku_id)
        REFERENCES inventory_sku (activity_id, sku_id)
        ON DELETE RESTRICT,
    CONSTRAINT ck_inventory_bucket
        CHECK (bucket_no BETWEEN 0 AND 255),
    CONSTRAINT ck_inventory_nonnegative
        CHECK (
            total_stock >= 0
            AND available_stock >= 0
            AND allocated_stock >= 0
        ),
    CONSTRAINT ck_inventory_conservation
        CHECK (total_stock = available_stock + allocated_stock),
    CONSTRAINT ck_inventory_version
        CHECK (version >= 0)
)
WITH (fillfactor = 80);

-- =========================================================
-- inventory_reservation: the database record of a front-door reservation.
-- Quantity: one item per user is a business rule of the activity (the order
-- package enforces quantity = 1); the inventory mechanics are quantity-generic, so
-- the CHECK only demands a positive quantity. Bucket bounded like above.
-- =========================================================
CREATE TABLE inventory_reservation (
    reservation_id    UUID        PRIMARY KEY,
    request_id        UUID        NOT NULL,
    first_message_id  UUID        NOT NULL,
    activity_id       BIGINT      NOT NULL,
    sku_id            BIGINT      NOT NULL,
    user_id           BIGINT      NOT NULL,
    inventory_bucket  SMALLINT    NOT NULL,
    quantity          SMALLINT    NOT NULL DEFAULT 1,
    order_id          BIGINT,
    status            SMALLINT    NOT NULL DEFAULT 0,
    failure_code      VARCHAR(64),
    redis_reserved_at TIMESTAMPTZ NOT NULL,
    expires_at        TIMESTAMPTZ NOT NULL,
    ordered_at        TIMESTAMPTZ,
    released_at       TIMESTAMPTZ,
    version           BIGINT      NOT NULL DEFAULT 0,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT uq_reservation_request
        UNIQUE (request_id),
    CONSTRAINT uq_reservation_order
        UNIQUE (order_id),
    CONSTRAINT ck_reservation_status
        CHECK (status IN (0, 10, 20, 30, 40, 50, 60)),
    CONSTRAINT ck_reservation_quantity
        CHECK (quantity > 0),
    CONSTRAINT ck_reservation_bucket
        CHECK (inventory_bucket BETWEEN 0 AND 255),
    CONSTRAINT ck_reservation_time
        CHECK (redis_reserved_at < expires_at),
    CONSTRAINT ck_reservation_ordered
        CHECK (status <> 10 OR order_id IS NOT NULL),
    CONSTRAINT ck_reservation_released
        CHECK (status <> 40 OR released_at IS NOT NULL),
    CONSTRAINT ck_reservation_version
        CHECK (version >= 0)
);

CREATE INDEX idx_reservation_user_sku
    ON inventory_reservation (activity_id, sku_id, user_id, created_at DESC);

CREATE INDEX idx_reservation_pending_expire
    ON inventory_reservation (expires_at, reservation_id)
    WHERE status IN (0, 30);

-- =========================================================
-- inventory_ledger: append-only stock ledger; replaying it reproduces every
-- bucket's counters.
--
-- Ledger types: 10 ALLOCATE, 20 RELEASE, 30 ADJUST, 40 PROVISION. Choices:
--  * ledger_id is an identity column instead of an application-generated
--    id: unique across any number of processes by construction, no clock or
--    node-id coordination, no collision retry, and still increasing in
--    insertion order (the B-tree locality of time-ordered ids). Gaps after rollbacks are normal and carry no meaning.
--  * total_delta: PROVISION (initial stock) and ADJUST (a rebalance move
--    between buckets of one SKU) change a bucket's total, which
--    "available_delta + allocated_delta = 0" cannot express. The conservation
--    CHECK becomes available_delta + allocated_delta = total_delta, and
--    ck_ledger_total_delta keeps total_delta = 0 for ALLOCATE and RELEASE, so
--    for them "available_delta + allocated_delta = 0" still holds exactly.
--  * reservation_id, source_message_id and user_id are NULL for PROVISION
--    and ADJUST rows (no buyer behind them) and required for the others.
-- =========================================================
CREATE TABLE inventory_ledger (
    ledger_id         BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key   VARCHAR(160) NOT NULL,
    reservation_id    UUID,
    order_id          BIGINT,
    source_message_id UUID,
    activity_id       BIGINT      NOT NULL,
    sku_id            BIGINT      NOT NULL,
    user_id           BIGINT,
    inventory_bucket  SMALLINT    NOT NULL,
    ledger_type       SMALLINT    NOT NULL,
    total_delta       INTEGER     NOT NULL DEFAULT 0,
    available_delta   INTEGER     NOT NULL,
    allocated_delta   INTEGER     NOT NULL,
    before_available  INTEGER     NOT NULL,
    after_available   INTEGER     NOT NULL,
    before_allocated  INTEGER     NOT NULL,
    after_allocated   INTEGER     NOT NULL,
    reason            VARCHAR(64) NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT uq_inventory_ledger_idempotency
        UNIQUE (idempotency_key),
    CONSTRAINT ck_ledger_type
        CHECK (ledger_type IN (10, 20, 30, 40)),
    CONSTRAINT ck_ledger_conservation
        CHECK (available_delta + allocated_delta = total_delta),
    CONSTRAINT ck_ledger_total_delta
        CHECK (ledger_type IN (30, 40) OR total_delta = 0),
    CONSTRAINT ck_ledger_direction
        CHECK (
            (ledger_type = 10 AND available_delta < 0)
            OR (ledger_type = 20 AND available_delta > 0)
            OR (ledger_type = 30 AND allocated_delta = 0 AND available_delta <> 0)
            OR (ledger_type = 40 AND allocated_delta = 0 AND available_delta >= 0
                AND before_available = 0 AND before_allocated = 0)
        ),
    CONSTRAINT ck_ledger_reservation
        CHECK (
            ledger_type IN (30, 40)
            OR (reservation_id IS NOT NULL AND source_message_id IS NOT NULL AND user_id IS NOT NULL)
        ),
    CONSTRAINT ck_ledger_available
        CHECK (after_available = before_available + available_delta),
    CONSTRAINT ck_ledger_allocated
        CHECK (after_allocated = before_allocated + allocated_delta),
    CONSTRAINT ck_ledger_result_nonnegative
        CHECK (after_available >= 0 AND after_allocated >= 0)
);

CREATE INDEX idx_ledger_reservation
    ON inventory_ledger (reservation_id, created_at);

CREATE INDEX idx_ledger_order
    ON inventory_ledger (order_id, created_at)
    WHERE order_id IS NOT NULL;

CREATE INDEX idx_ledger_created_brin
    ON inventory_ledger USING BRIN (created_at);
