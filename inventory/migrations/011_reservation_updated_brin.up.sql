-- +goose Up
-- A BRIN index on inventory_reservation.updated_at, for audits of what
-- changed since a moment (a live audit's watermark: the example service
-- checks the reservations changed since its last live audit against their
-- orders and events). Every statement of this package that writes a
-- reservation sets updated_at to its statement's start, and rows are
-- written, and rewritten, at the end of the table, so a range of
-- updated_at values maps to a few block ranges. The index is a few pages
-- for millions of rows; a row inserted into the table's last, unsummarised
-- block range costs it nothing. Every UPDATE of a reservation changes its
-- status, a column idx_reservation_pending_expire's predicate reads, so
-- none of them was HOT before this index either.
CREATE INDEX idx_reservation_updated_brin
    ON inventory_reservation USING brin (updated_at) WITH (autosummarize = on);
