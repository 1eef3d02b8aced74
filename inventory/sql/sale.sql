-- Store.SetSaleStatus and Store.SaleLog: a SKU's sale status, window and
-- the log of their changes.

-- name: sale_log
-- Store.SaleLog: a SKU's sale status changes, oldest first.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- index: idx_sale_log_sku
SELECT log_id, activity_id, sku_id, from_status, to_status, starts_at, ends_at, operator, reason, created_at, sale_version
  FROM {schema}.inventory_sale_log
 WHERE activity_id = $1 AND sku_id = $2
 ORDER BY log_id

-- name: set_sale
-- Store.SetSaleStatus: changes the SKU's sale status (and window) when
-- its current status is one of $6, bumps sale_version and writes the
-- inventory_sale_log row, returning the previous status with the new
-- version, log id and time (NULL version: not allowed from its status).
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = to (int2): the target sale status
-- $4 = starts_at (timestamptz)
-- $5 = ends_at (timestamptz)
-- $6 = from (int2[]): the statuses it may leave
-- $7 = operator (text)
-- $8 = reason (text)
-- index: pk_inventory_sku
WITH cur AS (
	SELECT sale_status
	  FROM {schema}.inventory_sku
	 WHERE activity_id = $1 AND sku_id = $2
	   FOR NO KEY UPDATE
), upd AS (
	UPDATE {schema}.inventory_sku AS s
	   SET sale_status = $3, sale_starts_at = $4, sale_ends_at = $5, sale_version = s.sale_version + 1
	  FROM cur AS c
	 WHERE s.activity_id = $1 AND s.sku_id = $2 AND c.sale_status = ANY ($6::smallint[])
	RETURNING s.sale_version
), log AS (
	INSERT INTO {schema}.inventory_sale_log (activity_id, sku_id, from_status, to_status, starts_at, ends_at, operator, reason, sale_version)
	SELECT $1, $2, c.sale_status, $3, $4, $5, $7, $8, upd.sale_version
	  FROM cur AS c, upd
	RETURNING log_id, created_at
)
SELECT c.sale_status, upd.sale_version, log.log_id, log.created_at
  FROM cur AS c
  LEFT JOIN upd ON true
  LEFT JOIN log ON true
