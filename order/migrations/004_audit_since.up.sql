-- +goose Up
-- BRIN indexes for Store.AuditSince, the audit of what changed since a
-- moment (a live audit's watermark): every statement that writes an order
-- or a payment sets its updated_at, and rows are written, and rewritten,
-- at the end of the table, so a range of updated_at values maps to a few
-- block ranges. A BRIN index is a few pages for millions of rows; a row
-- inserted into the table's last, unsummarised block range costs it
-- nothing.
--
-- The package only inserts payments (updated_at = created_at). Every UPDATE
-- of an order writes updated_at and changes an indexed column already
-- (status), so none of them was HOT before this index either.
CREATE INDEX idx_orders_updated_brin
    ON orders USING brin (updated_at) WITH (autosummarize = on);

CREATE INDEX idx_payment_updated_brin
    ON payment_record USING brin (updated_at) WITH (autosummarize = on);
