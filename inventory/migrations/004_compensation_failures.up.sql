-- +goose Up
-- compensation_failures counts the failed attempts to give a
-- RELEASE_PENDING reservation back to the front door;
-- RecordCompensationFailure moves the reservation to MANUAL_REQUIRED when
-- the count reaches the caller's limit (a human takes over).
ALTER TABLE inventory_reservation
    ADD COLUMN compensation_failures SMALLINT NOT NULL DEFAULT 0;

-- A statement of its own: Citus runs ADD CONSTRAINT only as the
-- statement's sole subcommand.
ALTER TABLE inventory_reservation
    ADD CONSTRAINT ck_reservation_compensation_failures
        CHECK (compensation_failures >= 0);
