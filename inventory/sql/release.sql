-- Store.ReleaseStock and Store.QueueReleaseStock: give a reservation's
-- allocated stock back to the bucket its ALLOCATE row names and write the
-- RELEASE ledger row (keyed RELEASE:<reservation_id>). release is the
-- default, one statement; with Config.Citus, allocation_of (a round trip of
-- its own) then release_placeholder and release_routed; with pgtx.Abort,
-- release_ledger (or release_ledger_returning) then release_abort.
-- release_abort and release_routed share the increment (a test checks).

-- name: allocation_of
-- allocation_of reads the ALLOCATE row ($1 its key) that ReleaseStock
-- with Config.Citus gives back.
-- $1 = allocate_key (text): ALLOCATE:<reservation_id>
-- index: uq_inventory_ledger_idempotency
SELECT activity_id, sku_id, inventory_bucket, allocated_delta::smallint, user_id, order_id, source_message_id
  FROM {schema}.inventory_ledger
 WHERE idempotency_key = $1

-- name: release
-- release is the mirror of allocate: it takes bucket,
-- quantity and buyer from the reservation's ALLOCATE ledger row, so a
-- release gives back exactly what was allocated, to the same bucket, and
-- there is no RELEASE without its ALLOCATE. Guards: allocated_stock >=
-- quantity and no RELEASE row yet; the unique index is the final guard
-- against a concurrent duplicate, and the zero-row branch re-reads the
-- RELEASE key with a fresh snapshot, as for allocate.
--
-- Token stock (migration 010): held locks the tokens the reservation
-- holds (FOR UPDATE, waiting for a concurrent release of them, after which
-- they are re-read as committed: freed ones no longer match; freed updates
-- them by the row addresses held locked, as allocate's claim), under upd's
-- guard on the RELEASE key; freed frees them when they are exactly the
-- ALLOCATE row's quantity (otherwise nothing: inconsistent, as a bucket
-- with less allocated stock). took is the one change either made; for
-- tokens the counters are those of the units freed (before_available = 0,
-- after_available = quantity, before_allocated = quantity,
-- after_allocated = 0) and the version the highest among them.
-- $1 = allocate_key (text): ALLOCATE:<reservation_id>
-- $2 = release_key (text): RELEASE:<reservation_id>
-- $3 = order_id (int8): NULL to keep the ALLOCATE row's
-- $4 = message_id (uuid): NULL to keep the ALLOCATE row's
-- $5 = reason (text): the ledger reason
-- index: uq_inventory_ledger_idempotency, pk_sku_inventory, idx_token_reservation
WITH a AS (
	SELECT reservation_id, activity_id, sku_id, inventory_bucket, user_id, order_id,
	       source_message_id, allocated_delta AS qty
	  FROM {schema}.inventory_ledger
	 WHERE idempotency_key = $1
), upd AS (
	UPDATE {schema}.sku_inventory AS s
	   SET available_stock = s.available_stock + a.qty,
	       allocated_stock = s.allocated_stock - a.qty,
	       version = s.version + 1,
	       updated_at = statement_timestamp()
	  FROM a
	 WHERE s.activity_id = a.activity_id AND s.sku_id = a.sku_id AND s.bucket_no = a.inventory_bucket
	   AND s.allocated_stock >= a.qty
	   AND NOT EXISTS (SELECT 1 FROM {schema}.inventory_ledger WHERE idempotency_key = $2)
	RETURNING a.reservation_id, a.activity_id, a.sku_id, a.inventory_bucket, a.user_id, a.order_id,
	          a.source_message_id, a.qty,
	          s.available_stock - a.qty AS before_available, s.available_stock AS after_available,
	          s.allocated_stock + a.qty AS before_allocated, s.allocated_stock AS after_allocated, s.version
), held AS (
	SELECT t.ctid
	  FROM {schema}.inventory_token AS t
	  JOIN a ON t.reservation_id = a.reservation_id AND t.activity_id = a.activity_id AND t.sku_id = a.sku_id
	 WHERE a.inventory_bucket = 0
	   AND NOT EXISTS (SELECT 1 FROM {schema}.inventory_ledger WHERE idempotency_key = $2)
	   FOR UPDATE OF t
), freed AS (
	UPDATE {schema}.inventory_token AS t
	   SET reservation_id = NULL, version = t.version + 1, updated_at = statement_timestamp()
	  FROM a
	 WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM held))
	   AND (SELECT count(*) FROM held) = a.qty
	RETURNING t.version
), took AS (
	SELECT reservation_id, activity_id, sku_id, inventory_bucket, user_id, order_id, source_message_id, qty,
	       before_available, after_available, before_allocated, after_allocated, version
	  FROM upd
	UNION ALL
	SELECT a.reservation_id, a.activity_id, a.sku_id, a.inventory_bucket, a.user_id, a.order_id,
	       a.source_message_id, a.qty, 0, a.qty, a.qty, 0, f.version
	  FROM a, (SELECT max(version) AS version FROM freed HAVING count(*) > 0) AS f
), led AS (
	INSERT INTO {schema}.inventory_ledger (
		idempotency_key, reservation_id, order_id, source_message_id,
		activity_id, sku_id, user_id, inventory_bucket, ledger_type,
		total_delta, available_delta, allocated_delta,
		before_available, after_available, before_allocated, after_allocated, reason)
	SELECT $2, u.reservation_id, coalesce($3, u.order_id), coalesce($4, u.source_message_id),
	       u.activity_id, u.sku_id, u.user_id, u.inventory_bucket, 20,
	       0, u.qty, -u.qty,
	       u.before_available, u.after_available, u.before_allocated, u.after_allocated, $5
	  FROM took AS u
	RETURNING ledger_id, created_at
)
SELECT l.ledger_id, l.created_at, a.activity_id, a.sku_id, a.inventory_bucket, a.qty::smallint,
       u.before_available, u.after_available, u.before_allocated, u.after_allocated, u.version,
       CASE WHEN l.ledger_id IS NULL THEN {schema}.inventory_ledger_id_now($2) END
  FROM (VALUES (1)) AS one (x)
  LEFT JOIN a ON true
  LEFT JOIN took AS u ON true
  LEFT JOIN led AS l ON true

-- name: release_ledger
-- release_ledger inserts the RELEASE ledger row of
-- [Store.QueueReleaseStock] with [pgtx.Abort] before the bucket is touched, as a plain
-- INSERT … VALUES (see allocation_ledger for why), with placeholder
-- counters that satisfy the table's checks (before_available = 0,
-- after_available = quantity, before_allocated = quantity,
-- after_allocated = 0); release_abort overwrites them in the same
-- transaction. A RELEASE row with the same key raises unique_violation.
-- Parameters as allocate, with $5 the RELEASE key.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2): the bucket of the ALLOCATE row
-- $4 = quantity (int4): the units given back
-- $5 = ledger_key (text): the idempotency key, RELEASE:<reservation_id>
-- $6 = reservation_id (uuid)
-- $7 = order_id (int8): NULL for none
-- $8 = message_id (uuid): the message being processed
-- $9 = user_id (int8): the buyer
-- $10 = reason (text): the ledger reason
-- index: none (one INSERT … VALUES: it reads no table; the unique indexes check it as it inserts)
INSERT INTO {schema}.inventory_ledger (
	idempotency_key, reservation_id, order_id, source_message_id,
	activity_id, sku_id, user_id, inventory_bucket, ledger_type,
	total_delta, available_delta, allocated_delta,
	before_available, after_available, before_allocated, after_allocated, reason)
VALUES ($5, $6, $7, $8, $1, $2, $9, $3, 20,
        0, $4::int, -$4::int,
        0, $4::int, $4::int, 0, $10)

-- name: release_ledger_returning
-- release_ledger inserts the RELEASE ledger row of
-- [Store.QueueReleaseStock] with [pgtx.Abort] before the bucket is touched, as a plain
-- INSERT … VALUES (see allocation_ledger for why), with placeholder
-- counters that satisfy the table's checks (before_available = 0,
-- after_available = quantity, before_allocated = quantity,
-- after_allocated = 0); release_abort overwrites them in the same
-- transaction. A RELEASE row with the same key raises unique_violation.
-- Parameters as allocate, with $5 the RELEASE key.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2): the bucket of the ALLOCATE row
-- $4 = quantity (int4): the units given back
-- $5 = ledger_key (text): the idempotency key, RELEASE:<reservation_id>
-- $6 = reservation_id (uuid)
-- $7 = order_id (int8): NULL for none
-- $8 = message_id (uuid): the message being processed
-- $9 = user_id (int8): the buyer
-- $10 = reason (text): the ledger reason
-- index: none (one INSERT … VALUES: it reads no table; the unique indexes check it as it inserts)
INSERT INTO {schema}.inventory_ledger (
	idempotency_key, reservation_id, order_id, source_message_id,
	activity_id, sku_id, user_id, inventory_bucket, ledger_type,
	total_delta, available_delta, allocated_delta,
	before_available, after_available, before_allocated, after_allocated, reason)
VALUES ($5, $6, $7, $8, $1, $2, $9, $3, 20,
        0, $4::int, -$4::int,
        0, $4::int, $4::int, 0, $10)
RETURNING ledger_id, created_at

-- name: release_abort
-- release_abort gives the quantity back to the bucket only when the
-- reservation's ALLOCATE row is there with exactly this activity, SKU,
-- bucket, quantity and buyer and the bucket's allocated stock covers it,
-- then writes the counters around the increment into the RELEASE row the
-- previous statement inserted. When the UPDATE takes nothing, the SELECT
-- calls inventory_refuse with the condition the release's refusal read finds (see
-- countersSelect). UPDATEs in CTEs read by a SELECT: routed whole to one
-- node on Citus. For a token SKU (migration 010) held and freed free the
-- tokens the ALLOCATE row's reservation holds, when they are exactly its
-- quantity, and took is the one change either made.
--
-- Parameters: $1 activity, $2 SKU, $3 bucket, $4 quantity, $5 the ALLOCATE
-- key, $6 the RELEASE key, $7 user.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2)
-- $4 = quantity (int4): the units given back
-- $5 = allocate_key (text): ALLOCATE:<reservation_id>
-- $6 = release_key (text): RELEASE:<reservation_id>
-- $7 = user_id (int8): the buyer
-- index: uq_inventory_ledger_idempotency, pk_sku_inventory
WITH upd AS (
	UPDATE {schema}.sku_inventory
	   SET available_stock = available_stock + $4::int,
	       allocated_stock = allocated_stock - $4::int,
	       version = version + 1,
	       updated_at = statement_timestamp()
	 WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3
	   AND allocated_stock >= $4::int
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_ledger AS l
	                WHERE l.idempotency_key = $5 AND l.activity_id = $1 AND l.sku_id = $2
	                  AND l.inventory_bucket = $3 AND l.allocated_delta = $4::int AND l.user_id = $7)
	RETURNING available_stock - $4::int AS before_available, available_stock AS after_available,
	          allocated_stock + $4::int AS before_allocated, allocated_stock AS after_allocated, version
), held AS (
	SELECT t.ctid
	  FROM {schema}.inventory_token AS t
	  JOIN {schema}.inventory_ledger AS l ON l.reservation_id = t.reservation_id
	 WHERE t.activity_id = $1 AND t.sku_id = $2 AND $3 = 0
	   AND l.idempotency_key = $5 AND l.activity_id = $1 AND l.sku_id = $2
	   AND l.inventory_bucket = $3 AND l.allocated_delta = $4::int AND l.user_id = $7
	   FOR UPDATE OF t
), freed AS (
	UPDATE {schema}.inventory_token AS t
	   SET reservation_id = NULL, version = t.version + 1, updated_at = statement_timestamp()
	 WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM held))
	   AND (SELECT count(*) FROM held) = $4::int
	RETURNING t.version
), took AS (
	SELECT before_available, after_available, before_allocated, after_allocated, version FROM upd
	UNION ALL
	SELECT 0, $4::int, $4::int, 0, max(version) FROM freed HAVING count(*) > 0
), led AS (
	UPDATE {schema}.inventory_ledger AS l
	   SET before_available = u.before_available, after_available = u.after_available,
	       before_allocated = u.before_allocated, after_allocated = u.after_allocated
	  FROM took AS u
	 WHERE l.idempotency_key = $6
)
SELECT coalesce(u.version, {schema}.inventory_refuse(w.code, $1, $2, $3, $4, $5::text)),
       u.before_available, u.after_available, u.before_allocated, u.after_allocated
  FROM (SELECT 1) AS one LEFT JOIN took AS u ON true
  LEFT JOIN LATERAL (
	SELECT CASE
	         WHEN l.ledger_id IS NULL THEN 'SK006'
	         WHEN NOT (l.activity_id = $1 AND l.sku_id = $2 AND l.inventory_bucket = $3
	                   AND l.allocated_delta = $4::int AND l.user_id = $7) THEN 'SK005'
	         ELSE 'SK007'
	       END AS code
	  FROM (SELECT 1) AS o
	  LEFT JOIN {schema}.inventory_ledger AS l ON l.idempotency_key = $5
	 WHERE u.version IS NULL) AS w ON true

-- name: release_placeholder
-- release_placeholder is release_ledger (the RELEASE row with
-- placeholder counters) with ON CONFLICT DO NOTHING; its reason is the
-- call's marker, as in allocation_placeholder.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2)
-- $4 = quantity (int4)
-- $5 = ledger_key (text): RELEASE:<reservation_id>
-- $6 = reservation_id (uuid)
-- $7 = order_id (int8): NULL for none
-- $8 = message_id (uuid)
-- $9 = user_id (int8)
-- $10 = marker (text): the placeholder reason, replaced by release_routed
-- index: none (one INSERT … VALUES: it reads no table; the unique indexes check it as it inserts)
INSERT INTO {schema}.inventory_ledger (
	idempotency_key, reservation_id, order_id, source_message_id,
	activity_id, sku_id, user_id, inventory_bucket, ledger_type,
	total_delta, available_delta, allocated_delta,
	before_available, after_available, before_allocated, after_allocated, reason)
VALUES ($5, $6, $7, $8, $1, $2, $9, $3, 20,
        0, $4::int, -$4::int,
        0, $4::int, $4::int, 0, $10)
ON CONFLICT DO NOTHING

-- name: release_routed
-- release_routed follows release_placeholder in the same batch: the
-- increment of release, guarded by the placeholder, the counters and
-- the real reason written into it (led), or the placeholder deleted when
-- the increment took nothing (del). It returns release's columns. For a
-- token SKU (migration 010) held and freed free the reservation's tokens
-- as release's do, and took is the one change either made.
--
-- Parameters: $1 activity, $2 SKU, $3 bucket, $4 quantity (the ALLOCATE
-- row's), $5 the RELEASE key, $6 reservation, $7 the placeholder's marker,
-- $8 reason (placeholderFilled's numbering).
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2)
-- $4 = quantity (int4)
-- $5 = ledger_key (text): RELEASE:<reservation_id>
-- $6 = reservation_id (uuid)
-- $7 = marker (text): the placeholder reason written by release_placeholder
-- $8 = reason (text): the ledger reason
-- (Its generic plan reads the placeholder guard by idx_ledger_reservation,
-- a reservation's two or three ledger rows; the rest by the key.)
-- index: uq_inventory_ledger_idempotency, pk_sku_inventory, idx_token_reservation
WITH upd AS (
	UPDATE {schema}.sku_inventory
	   SET available_stock = available_stock + $4::int,
	       allocated_stock = allocated_stock - $4::int,
	       version = version + 1,
	       updated_at = statement_timestamp()
	 WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3
	   AND allocated_stock >= $4::int
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_ledger
	                WHERE idempotency_key = $5 AND reason = $7 AND reservation_id = $6)
	RETURNING available_stock - $4::int AS before_available, available_stock AS after_available,
	          allocated_stock + $4::int AS before_allocated, allocated_stock AS after_allocated, version
), held AS (
	SELECT t.ctid
	  FROM {schema}.inventory_token AS t
	 WHERE t.reservation_id = $6 AND t.activity_id = $1 AND t.sku_id = $2 AND $3 = 0
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_ledger
	                WHERE idempotency_key = $5 AND reason = $7 AND reservation_id = $6)
	   FOR UPDATE OF t
), freed AS (
	UPDATE {schema}.inventory_token AS t
	   SET reservation_id = NULL, version = t.version + 1, updated_at = statement_timestamp()
	 WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM held))
	   AND (SELECT count(*) FROM held) = $4::int
	RETURNING t.version
), took AS (
	SELECT before_available, after_available, before_allocated, after_allocated, version FROM upd
	UNION ALL
	SELECT 0, $4::int, $4::int, 0, max(version) FROM freed HAVING count(*) > 0
), led AS (
	UPDATE {schema}.inventory_ledger AS l
	   SET before_available = u.before_available, after_available = u.after_available,
	       before_allocated = u.before_allocated, after_allocated = u.after_allocated,
	       reason = $8
	  FROM took AS u
	 WHERE l.idempotency_key = $5 AND l.reason = $7
	RETURNING l.ledger_id, l.created_at
), del AS (
	DELETE FROM {schema}.inventory_ledger
	 WHERE idempotency_key = $5 AND reason = $7 AND NOT EXISTS (SELECT 1 FROM took)
)
SELECT l.ledger_id, l.created_at, $1::int8, $2::int8, $3::int2, $4::int2,
       u.before_available, u.after_available, u.before_allocated, u.after_allocated, u.version,
       CASE WHEN l.ledger_id IS NULL THEN
         (SELECT x.ledger_id FROM {schema}.inventory_ledger AS x
           WHERE x.idempotency_key = $5 AND x.reason <> $7) END
  FROM (SELECT 1) AS one
  LEFT JOIN took AS u ON true
  LEFT JOIN led AS l ON true
