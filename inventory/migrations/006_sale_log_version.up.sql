-- +goose Up
-- inventory_sale_log.sale_version: the SKU's sale_version after the change
-- the row logs, the version SetSaleStatus returned with it. Every logged
-- change incremented sale_version by one from 0, and a SKU's changes are
-- logged one at a time under its row lock, so a row written before this
-- migration gets its position in its SKU's log.
ALTER TABLE inventory_sale_log
    ADD COLUMN sale_version BIGINT;

UPDATE inventory_sale_log AS l
   SET sale_version = n.v
  FROM (SELECT log_id, row_number() OVER (PARTITION BY activity_id, sku_id ORDER BY log_id) AS v
          FROM inventory_sale_log) AS n
 WHERE l.log_id = n.log_id;

ALTER TABLE inventory_sale_log
    ALTER COLUMN sale_version SET NOT NULL;
