-- Store.Audit, Store.ReservationLedger and Store.LedgerByType: the
-- inventory's invariants and its ledger, read.

-- name: audit
-- audit checks every inventory invariant in one statement, hence one
-- snapshot: the findings are consistent with each other even while
-- allocations run. $1/$2 restrict it to an activity / SKU when not NULL.
-- res_led joins the reservations with their ledger counts once, and the
-- three reservation checks filter it: a join of the two CTEs in each check
-- let the planner pick a nested loop over two CTE scans (it cannot
-- estimate their filters), quadratic in the reservations. inv reads
-- inventory_stock_row (migration 010), so a token SKU is checked as one
-- bucket with its token counts; tok counts the tokens each reservation
-- holds, which token_claim compares with its ledger (the ALLOCATE's
-- quantity while not released, else none).
-- $1 = activity_id (int8): NULL for every activity
-- $2 = sku_id (int8): NULL for every SKU
-- index: none (it replays the whole ledger of the SKUs it checks)
-- full scan: sku_inventory, inventory_token, inventory_sku, inventory_ledger, inventory_reservation (an audit checks every invariant of the SKUs it is given, or of all: the ledger has no index on its SKU)
WITH inv AS (
	SELECT * FROM {schema}.inventory_stock_row
	 WHERE ($1::bigint IS NULL OR activity_id = $1) AND ($2::bigint IS NULL OR sku_id = $2)
), sku AS (
	SELECT * FROM {schema}.inventory_sku
	 WHERE ($1::bigint IS NULL OR activity_id = $1) AND ($2::bigint IS NULL OR sku_id = $2)
), led AS (
	SELECT * FROM {schema}.inventory_ledger
	 WHERE ($1::bigint IS NULL OR activity_id = $1) AND ($2::bigint IS NULL OR sku_id = $2)
), res AS (
	SELECT * FROM {schema}.inventory_reservation
	 WHERE ($1::bigint IS NULL OR activity_id = $1) AND ($2::bigint IS NULL OR sku_id = $2)
), replay AS (
	SELECT activity_id, sku_id, inventory_bucket AS bucket_no,
	       sum(available_delta) AS available, sum(allocated_delta) AS allocated, sum(total_delta) AS total
	  FROM led GROUP BY 1, 2, 3
), per_res AS (
	SELECT reservation_id,
	       count(*) FILTER (WHERE ledger_type = 10) AS allocates,
	       count(*) FILTER (WHERE ledger_type = 20) AS releases,
	       max(activity_id) AS activity_id, max(sku_id) AS sku_id,
	       max(inventory_bucket) FILTER (WHERE ledger_type = 10) AS alloc_bucket,
	       max(inventory_bucket) FILTER (WHERE ledger_type = 20) AS rel_bucket,
	       sum(allocated_delta) FILTER (WHERE ledger_type = 10) AS alloc_qty,
	       sum(available_delta) FILTER (WHERE ledger_type = 20) AS rel_qty
	  FROM led WHERE reservation_id IS NOT NULL
	 GROUP BY reservation_id
), res_led AS (
	SELECT r.reservation_id, r.activity_id, r.sku_id, r.inventory_bucket, r.status,
	       coalesce(p.allocates, 0) AS allocates, coalesce(p.releases, 0) AS releases, p.alloc_qty
	  FROM res AS r LEFT JOIN per_res AS p USING (reservation_id)
), tok AS (
	SELECT reservation_id, activity_id, sku_id, count(*) AS n
	  FROM {schema}.inventory_token
	 WHERE reservation_id IS NOT NULL
	   AND ($1::bigint IS NULL OR activity_id = $1) AND ($2::bigint IS NULL OR sku_id = $2)
	 GROUP BY 1, 2, 3
)
SELECT 'bucket_conservation', activity_id, sku_id, bucket_no::int, NULL::uuid,
       available_stock::bigint + allocated_stock, total_stock::bigint
  FROM inv WHERE total_stock <> available_stock + allocated_stock
UNION ALL
SELECT 'negative_counter', activity_id, sku_id, bucket_no, NULL, 0,
       least(total_stock, available_stock, allocated_stock)
  FROM inv WHERE least(total_stock, available_stock, allocated_stock) < 0
UNION ALL
SELECT 'sku_total', k.activity_id, k.sku_id, -1, NULL, k.planned_stock, coalesce(sum(i.total_stock), 0)
  FROM sku AS k LEFT JOIN inv AS i USING (activity_id, sku_id)
 GROUP BY k.activity_id, k.sku_id, k.planned_stock
HAVING k.planned_stock <> coalesce(sum(i.total_stock), 0)
UNION ALL
SELECT 'bucket_count', k.activity_id, k.sku_id, -1, NULL, k.bucket_count, count(i.bucket_no)
  FROM sku AS k LEFT JOIN inv AS i USING (activity_id, sku_id)
 GROUP BY k.activity_id, k.sku_id, k.bucket_count
HAVING k.bucket_count <> count(i.bucket_no)
UNION ALL
SELECT 'bucket_count', i.activity_id, i.sku_id, i.bucket_no, NULL, k.bucket_count, i.bucket_no
  FROM inv AS i JOIN sku AS k USING (activity_id, sku_id)
 WHERE i.bucket_no >= k.bucket_count
UNION ALL
SELECT 'ledger_replay_available', i.activity_id, i.sku_id, i.bucket_no, NULL, coalesce(r.available, 0), i.available_stock
  FROM inv AS i LEFT JOIN replay AS r USING (activity_id, sku_id, bucket_no)
 WHERE coalesce(r.available, 0) <> i.available_stock
UNION ALL
SELECT 'ledger_replay_allocated', i.activity_id, i.sku_id, i.bucket_no, NULL, coalesce(r.allocated, 0), i.allocated_stock
  FROM inv AS i LEFT JOIN replay AS r USING (activity_id, sku_id, bucket_no)
 WHERE coalesce(r.allocated, 0) <> i.allocated_stock
UNION ALL
SELECT 'ledger_replay_total', i.activity_id, i.sku_id, i.bucket_no, NULL, coalesce(r.total, 0), i.total_stock
  FROM inv AS i LEFT JOIN replay AS r USING (activity_id, sku_id, bucket_no)
 WHERE coalesce(r.total, 0) <> i.total_stock
UNION ALL
SELECT 'ledger_replay_total', r.activity_id, r.sku_id, r.bucket_no, NULL, r.total, 0
  FROM replay AS r
 WHERE NOT EXISTS (SELECT 1 FROM inv AS i
                    WHERE i.activity_id = r.activity_id AND i.sku_id = r.sku_id AND i.bucket_no = r.bucket_no)
UNION ALL
SELECT 'duplicate_allocate', activity_id, sku_id, -1, reservation_id, 1, allocates
  FROM per_res WHERE allocates > 1
UNION ALL
SELECT 'duplicate_release', activity_id, sku_id, -1, reservation_id, 1, releases
  FROM per_res WHERE releases > 1
UNION ALL
SELECT 'release_without_allocate', activity_id, sku_id, rel_bucket, reservation_id, 1, 0
  FROM per_res WHERE releases > 0 AND allocates = 0
UNION ALL
SELECT 'release_mismatch', activity_id, sku_id, rel_bucket, reservation_id, alloc_qty, rel_qty
  FROM per_res
 WHERE allocates = 1 AND releases = 1 AND (alloc_qty <> rel_qty OR alloc_bucket <> rel_bucket)
UNION ALL
SELECT 'reservation_without_allocate', activity_id, sku_id, inventory_bucket, reservation_id, 1, 0
  FROM res_led
 WHERE status IN (10, 30, 40) AND allocates = 0
UNION ALL
SELECT 'reservation_without_release', activity_id, sku_id, inventory_bucket, reservation_id, 1, 0
  FROM res_led
 WHERE status = 40 AND releases = 0
UNION ALL
SELECT 'leaked_allocation', activity_id, sku_id, inventory_bucket, reservation_id, 0, alloc_qty
  FROM res_led
 WHERE status IN (0, 20, 50) AND allocates > 0 AND releases = 0
UNION ALL
SELECT 'token_claim', coalesce(t.activity_id, p.activity_id), coalesce(t.sku_id, p.sku_id), 0,
       coalesce(t.reservation_id, p.reservation_id), coalesce(p.held, 0), coalesce(t.n, 0)
  FROM tok AS t
  FULL JOIN (SELECT pr.reservation_id, pr.activity_id, pr.sku_id,
                    CASE WHEN pr.releases = 0 THEN pr.alloc_qty ELSE 0 END AS held
               FROM per_res AS pr JOIN sku AS k USING (activity_id, sku_id)
              WHERE k.token_stock AND pr.allocates > 0) AS p USING (reservation_id)
 WHERE coalesce(p.held, 0) <> coalesce(t.n, 0)
UNION ALL
SELECT 'adjust_without_evidence', activity_id, sku_id, inventory_bucket, NULL, 0, total_delta
  FROM led
 WHERE ledger_type = 30 AND (coalesce(operator, '') = '' OR coalesce(approval_ref, '') = '')
ORDER BY 1, 2, 3, 4, 5

-- name: ledger_by_reservation
-- Store.ReservationLedger: the ledger rows of one reservation, oldest first.
-- $1 = reservation_id (uuid)
-- index: idx_ledger_reservation
SELECT ledger_id, idempotency_key, ledger_type, reservation_id, coalesce(order_id, 0), source_message_id,
       activity_id, sku_id, coalesce(user_id, 0), inventory_bucket, total_delta, available_delta, allocated_delta,
       before_available, after_available, before_allocated, after_allocated, reason, created_at,
       coalesce(operator, ''), coalesce(approval_ref, '')
  FROM {schema}.inventory_ledger
 WHERE reservation_id = $1
 ORDER BY ledger_id

-- name: ledger_by_type
-- Store.LedgerByType: per SKU and ledger type, the count of rows and the
-- sums of their deltas.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8): NULL for every SKU of the activity
-- index: none (the ledger has no index on its SKU: a report, off the sale path)
-- full scan: inventory_ledger (no index on the ledger's SKU: a report, off the sale path)
SELECT activity_id, sku_id, ledger_type, count(*),
       coalesce(sum(CASE ledger_type WHEN 10 THEN allocated_delta WHEN 20 THEN available_delta ELSE total_delta END), 0),
       coalesce(sum(available_delta), 0), coalesce(sum(allocated_delta), 0), coalesce(sum(total_delta), 0)
  FROM {schema}.inventory_ledger
 WHERE activity_id = $1 AND ($2::bigint IS NULL OR sku_id = $2)
 GROUP BY activity_id, sku_id, ledger_type
 ORDER BY sku_id, ledger_type
