-- Store.Checkpoint and Store.AuditIncremental: the audit checkpoint (the
-- ledger's sums per bucket up to a watermark) and the audit that replays
-- only the ledger rows after it.

-- name: checkpoint_candidate
-- Checkpoint's first step: the watermark in force, the candidate (the
-- highest ledger id this statement's snapshot sees), the isolation level,
-- the cache size of the ledger_id identity's sequence (a cache above 1
-- hands ids out of order across sessions), and the transactions that hold
-- a lock on the ledger now. Every ledger id
-- at or below the candidate was taken before this statement's snapshot, by
-- an INSERT that locked the ledger (ROW EXCLUSIVE, held to the end of its
-- transaction) before taking the id; pg_locks is read after the snapshot,
-- so such an insert whose outcome the snapshot does not know is either
-- listed here or already decided. Checkpoint waits for the listed ones.
-- Only ROW EXCLUSIVE holders are listed: every transaction that inserted
-- holds that mode (a stronger lock it also holds is a separate entry), and
-- a vacuum or an analyze of the ledger (SHARE UPDATE EXCLUSIVE), which
-- inserts nothing and may run for minutes, is not waited for.
-- $1 = ledger (text): the ledger's qualified, quoted name, as regclass
-- index: inventory_ledger_pkey
SELECT w.through_ledger_id,
       coalesce((SELECT max(ledger_id) FROM {schema}.inventory_ledger), 0),
       current_setting('transaction_isolation'),
       (SELECT q.seqcache FROM pg_catalog.pg_sequence AS q
         WHERE q.seqrelid = pg_catalog.pg_get_serial_sequence($1, 'ledger_id')::regclass),
       ARRAY(SELECT DISTINCT l.virtualtransaction FROM pg_catalog.pg_locks AS l
              WHERE l.locktype = 'relation' AND l.relation = $1::regclass AND l.mode = 'RowExclusiveLock'
                AND l.pid IS DISTINCT FROM pg_backend_pid())
  FROM {schema}.inventory_audit_watermark AS w
 WHERE w.singleton

-- name: checkpoint_pending
-- Checkpoint's wait: how many of the transactions checkpoint_candidate
-- listed still hold their ROW EXCLUSIVE lock on the ledger (a table lock is
-- held to the end of the transaction, prepared ones included).
-- $1 = ledger (text): the ledger's qualified, quoted name, as regclass
-- $2 = holders (text[]): the virtual transaction ids checkpoint_candidate listed
-- index: none (reads pg_locks, the server's lock table, no table of the schema)
SELECT count(*)
  FROM pg_catalog.pg_locks AS l
 WHERE l.locktype = 'relation' AND l.relation = $1::regclass AND l.mode = 'RowExclusiveLock'
   AND l.virtualtransaction = ANY ($2::text[])

-- name: checkpoint_advance
-- Checkpoint's last step, in a snapshot taken after the wait: moves the
-- watermark from $1 to $2 (compare-and-set: a concurrent Checkpoint that
-- moved it first wins, and this one changes nothing) and adds the deltas
-- of the ledger rows in ($1, $2] to the sums, in one statement. It returns
-- the watermark it set (NULL when it lost the race) and the buckets whose
-- sums changed.
-- $1 = from (int8): the watermark checkpoint_candidate read
-- $2 = through (int8): the candidate, every ledger id at or below it decided
-- index: inventory_ledger_pkey, pk_inventory_audit_checkpoint
WITH mv AS (
	UPDATE {schema}.inventory_audit_watermark
	   SET through_ledger_id = $2, advanced_at = statement_timestamp()
	 WHERE singleton AND through_ledger_id = $1 AND $2::bigint > $1::bigint
	RETURNING through_ledger_id
), d AS (
	SELECT activity_id, sku_id, inventory_bucket AS bucket_no,
	       sum(available_delta) AS available, sum(allocated_delta) AS allocated, sum(total_delta) AS total
	  FROM {schema}.inventory_ledger
	 WHERE ledger_id > $1 AND ledger_id <= $2 AND EXISTS (SELECT 1 FROM mv)
	 GROUP BY 1, 2, 3
), up AS (
	INSERT INTO {schema}.inventory_audit_checkpoint AS c (activity_id, sku_id, bucket_no, available, allocated, total)
	SELECT activity_id, sku_id, bucket_no, available, allocated, total FROM d
	ON CONFLICT (activity_id, sku_id, bucket_no) DO UPDATE
	   SET available = c.available + excluded.available,
	       allocated = c.allocated + excluded.allocated,
	       total = c.total + excluded.total
	RETURNING 1
)
SELECT (SELECT through_ledger_id FROM mv), (SELECT count(*) FROM up)

-- name: audit_incremental
-- Store.AuditIncremental: the checks of audit, in one statement (one
-- snapshot), with the ledger replay starting from the checkpoint: the
-- checkpoint's sums plus the ledger rows after the watermark (a range of
-- the primary key) must reproduce each bucket's counters. The
-- per-reservation checks cover the reservations with a ledger row after
-- the watermark (all their ledger rows, read by reservation), the ADJUST
-- evidence the rows after it. The bucket and SKU checks read every bucket
-- of the SKUs, as audit does. The upper bound on ledger_id only tells the
-- planner that the range is narrow (the watermark is not known when the
-- statement is planned): it excludes nothing. res_led joins the
-- reservations with their ledger counts once, as in audit. A token SKU's
-- counts are read whole (inventory_stock_row counts its tokens); tok and
-- token_claim check the tokens of the touched reservations.
-- $1 = activity_id (int8): NULL for every activity
-- $2 = sku_id (int8): NULL for every SKU
-- index: inventory_ledger_pkey, idx_ledger_reservation, inventory_reservation_pkey
-- full scan: sku_inventory, inventory_token, inventory_sku, inventory_audit_checkpoint (one row per bucket, or per token of a token SKU: the counters the replay is compared with)
WITH wm AS (
	SELECT through_ledger_id FROM {schema}.inventory_audit_watermark WHERE singleton
), inv AS (
	SELECT * FROM {schema}.inventory_stock_row
	 WHERE ($1::bigint IS NULL OR activity_id = $1) AND ($2::bigint IS NULL OR sku_id = $2)
), sku AS (
	SELECT * FROM {schema}.inventory_sku
	 WHERE ($1::bigint IS NULL OR activity_id = $1) AND ($2::bigint IS NULL OR sku_id = $2)
), led AS (
	SELECT * FROM {schema}.inventory_ledger
	 WHERE ledger_id > (SELECT through_ledger_id FROM wm) AND ledger_id < 9223372036854775807
	   AND ($1::bigint IS NULL OR activity_id = $1) AND ($2::bigint IS NULL OR sku_id = $2)
), cp AS (
	SELECT activity_id, sku_id, bucket_no, available, allocated, total FROM {schema}.inventory_audit_checkpoint
	 WHERE ($1::bigint IS NULL OR activity_id = $1) AND ($2::bigint IS NULL OR sku_id = $2)
), replay AS (
	SELECT activity_id, sku_id, bucket_no, sum(available) AS available, sum(allocated) AS allocated, sum(total) AS total
	  FROM (SELECT activity_id, sku_id, bucket_no, available, allocated, total FROM cp
	        UNION ALL
	        SELECT activity_id, sku_id, inventory_bucket, available_delta, allocated_delta, total_delta FROM led) AS u
	 GROUP BY 1, 2, 3
), touched AS (
	SELECT DISTINCT reservation_id FROM led WHERE reservation_id IS NOT NULL
), res AS (
	SELECT r.* FROM {schema}.inventory_reservation AS r
	 WHERE r.reservation_id IN (SELECT reservation_id FROM touched)
), per_res AS (
	SELECT reservation_id,
	       count(*) FILTER (WHERE ledger_type = 10) AS allocates,
	       count(*) FILTER (WHERE ledger_type = 20) AS releases,
	       max(activity_id) AS activity_id, max(sku_id) AS sku_id,
	       max(inventory_bucket) FILTER (WHERE ledger_type = 10) AS alloc_bucket,
	       max(inventory_bucket) FILTER (WHERE ledger_type = 20) AS rel_bucket,
	       sum(allocated_delta) FILTER (WHERE ledger_type = 10) AS alloc_qty,
	       sum(available_delta) FILTER (WHERE ledger_type = 20) AS rel_qty
	  FROM {schema}.inventory_ledger
	 WHERE reservation_id IN (SELECT reservation_id FROM touched)
	 GROUP BY reservation_id
), res_led AS (
	SELECT r.reservation_id, r.activity_id, r.sku_id, r.inventory_bucket, r.status,
	       coalesce(p.allocates, 0) AS allocates, coalesce(p.releases, 0) AS releases, p.alloc_qty
	  FROM res AS r LEFT JOIN per_res AS p USING (reservation_id)
), tok AS (
	SELECT reservation_id, activity_id, sku_id, count(*) AS n
	  FROM {schema}.inventory_token
	 WHERE reservation_id IN (SELECT reservation_id FROM touched) AND reservation_id IS NOT NULL
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
