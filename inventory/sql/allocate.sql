-- Store.AllocateBucket and Store.QueueAllocateBucket: take stock from one
-- bucket for one reservation and write its ALLOCATE ledger row (keyed
-- ALLOCATE:<reservation_id>). allocate is the default, one statement: the
-- decrement in a CTE feeding the ledger insert, guarded by allocate's reads
-- r (the reservation bound to the allocation) and sk (the sale) and by the
-- absence of the ALLOCATE row. With Config.Citus, allocation_placeholder,
-- allocate_routed and available_now do the same as statements Citus routes
-- whole: the ledger row first with placeholder counters, then the decrement
-- filling it in (or deleting it), then the bucket's available stock for a
-- refusal. With pgtx.Abort (one batch): with Config.Citus,
-- allocation_ledger (or allocation_ledger_returning) then decrement_abort;
-- without it, decrement_then_raise then allocation_ledger_from_bucket (or
-- its _returning form); a refusal raises SKnnn through inventory_refuse.
-- The decrement (the UPDATE of one sku_inventory row by its primary key,
-- which changes no indexed column: a HOT update, which a test checks), its
-- guards and the refusal reads are copies of one another across these
-- statements: a test checks that too.

-- name: allocate
-- allocate is the bucket decrement and its ledger row in one
-- statement. The UPDATE decrements
-- only when the bucket has the stock AND no ALLOCATE row exists for the
-- reservation; the ledger INSERT runs only for the updated row. When nothing
-- was updated the final SELECT classifies why: an existing ledger row, read
-- by inventory_ledger_id_now with a fresh snapshot (migration 002), then a
-- missing bucket, otherwise sold out. The available stock a refusal
-- reports is read by inventory_available_units_now (migration 010), which
-- counts a token SKU's free tokens.
--
-- Token stock (migration 010): for a SKU provisioned with tokens there is
-- no bucket row, and pick and claim take the place of upd: rlk locks the
-- reservation (FOR NO KEY UPDATE, a lock the order transaction already
-- holds) by its id alone, only for a token SKU and bucket 0 (its only
-- bucket), and so returns it as it is after any wait for that lock; rl
-- binds it to the allocation as upd's guard binds it, and the refusal
-- columns report rlk's row when there is one, so that a reservation
-- another transaction changed while this one waited is reported as it
-- now is (a mismatch), not as the snapshot saw it; pick takes $4 free tokens of
-- the SKU, locked with SKIP LOCKED by pick_from (and pick_before when
-- pick_from found fewer), under upd's guards on the ledger key and the
-- sale, in token order from the start of one of 64 lanes (equal ranges of
-- token numbers) chosen by a hash of the reservation, then from 0 up to
-- it: concurrent allocations claim in different lanes, each lane from its
-- start, so they rarely meet on a page and none walks every claimed
-- token before the first free one (the claimed tokens' entries stay in
-- idx_token_free until vacuum); no lane sells out on its own;
-- the guards are constant for the statement, so they are tested before a
-- token is locked. claim gives
-- them to the reservation when pick found all $4 (otherwise nothing is
-- claimed: sold out), by the row addresses (ctid) pick locked: the rows
-- stay where pick found them, locked, until claim updates them, and a TID
-- scan finds them whatever the planner estimates of a table whose tokens
-- were just provisioned (no other condition gives it an index to prefer). took is the one change either made, with the
-- counters the ledger row records: the bucket's, or for tokens those of the
-- units claimed (before_available = $4, after_available = 0,
-- before_allocated = 0, after_allocated = $4) and the highest version
-- among them. SKIP LOCKED never waits: a token locked by another
-- allocation is skipped, the lock of rlk is what a concurrent duplicate
-- waits for, and after that wait rlk re-reads the reservation as committed;
-- a duplicate then meets the unique index or, finding no token, the
-- ledger probe, as for a bucket. A token locked by an allocation that then
-- rolls back is skipped while it is locked: an allocation can be refused
-- as sold out while such a unit is about to come back; none is ever
-- claimed twice.
--
-- Binding to the reservation: the UPDATE decrements only when the
-- reservation row ($6) exists with exactly the caller's activity, SKU,
-- bucket, quantity and user, in PENDING_DB or ORDERED, so a caller cannot
-- take stock for a reservation from another bucket, in another quantity,
-- for another buyer, or for a reservation already rejected, expired or
-- released. Those columns never change after the insert; the status is
-- the caller's business to hold still (the reservation row lock).
--
-- Idempotency under concurrency: the NOT EXISTS guard sees the statement's
-- snapshot. A duplicate that commits before the statement starts is seen and
-- nothing is decremented. A duplicate that is still running is invisible to
-- the guard, so this statement may decrement too, but its ledger INSERT then
-- hits the unique index uq_inventory_ledger_idempotency, which waits for the
-- other transaction and raises unique_violation if it commits: the whole
-- statement, decrement included, fails, and the caller's transaction aborts.
-- The unique index is the final guard; the bucket is never decremented twice
-- for one reservation. A duplicate that waited for the bucket's row lock
-- while the other transaction took the last units finds, after that commit,
-- a bucket whose own condition fails; its snapshot still misses the other
-- ledger row, which is why the zero-row branch probes the ledger with a
-- snapshot of its own: every concurrent duplicate is classified as already
-- applied, whatever the bucket's stock.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2): the reservation's bucket
-- $4 = quantity (int4): the units taken
-- $5 = ledger_key (text): the idempotency key, ALLOCATE:<reservation_id>
-- $6 = reservation_id (uuid)
-- $7 = order_id (int8): NULL for none
-- $8 = message_id (uuid): the message being processed
-- $9 = user_id (int8): the buyer
-- $10 = reason (text): the ledger reason
-- index: pk_sku_inventory, inventory_reservation_pkey, pk_inventory_sku, uq_inventory_ledger_idempotency
WITH r AS (
	SELECT activity_id, sku_id, inventory_bucket, quantity, user_id, status
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $6
), sk AS (
	SELECT sale_status, sale_starts_at, sale_ends_at,
	       sale_status = 10
	       AND (sale_starts_at IS NULL OR sale_starts_at <= statement_timestamp())
	       AND (sale_ends_at IS NULL OR statement_timestamp() < sale_ends_at) AS selling,
	       statement_timestamp() AS at
	  FROM {schema}.inventory_sku
	 WHERE activity_id = $1 AND sku_id = $2
), upd AS (
	UPDATE {schema}.sku_inventory
	   SET available_stock = available_stock - $4::int,
	       allocated_stock = allocated_stock + $4::int,
	       version = version + 1,
	       updated_at = statement_timestamp()
	 WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3
	   AND available_stock >= $4::int
	   AND NOT EXISTS (SELECT 1 FROM {schema}.inventory_ledger WHERE idempotency_key = $5)
	   AND EXISTS (SELECT 1 FROM r
	                WHERE r.activity_id = $1 AND r.sku_id = $2 AND r.inventory_bucket = $3
	                  AND r.quantity = $4::int AND r.user_id = $9 AND r.status IN (0, 10))
	   AND (SELECT selling FROM sk)
	RETURNING available_stock + $4::int AS before_available, available_stock AS after_available,
	          allocated_stock - $4::int AS before_allocated, allocated_stock AS after_allocated, version
), rlk AS (
	SELECT r.reservation_id, r.activity_id, r.sku_id, r.inventory_bucket, r.quantity, r.user_id, r.status
	  FROM {schema}.inventory_reservation AS r
	 WHERE r.reservation_id = $6
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_sku AS k
	                WHERE k.activity_id = $1 AND k.sku_id = $2 AND k.token_stock AND $3 = 0)
	   FOR NO KEY UPDATE OF r
), rl AS (
	SELECT reservation_id
	  FROM rlk
	 WHERE activity_id = $1 AND sku_id = $2 AND inventory_bucket = $3
	   AND quantity = $4::int AND user_id = $9 AND status IN (0, 10)
), pick_from AS (
	SELECT t.ctid
	  FROM {schema}.inventory_token AS t
	 WHERE t.activity_id = $1 AND t.sku_id = $2 AND t.reservation_id IS NULL
	   AND t.token_no >= (SELECT (abs(hashtext($6::text)::int8) % 64) * k.planned_stock / 64
	                          FROM {schema}.inventory_sku AS k WHERE k.activity_id = $1 AND k.sku_id = $2)
	   AND EXISTS (SELECT 1 FROM rl)
	   AND NOT EXISTS (SELECT 1 FROM {schema}.inventory_ledger WHERE idempotency_key = $5)
	   AND (SELECT selling FROM sk)
	 ORDER BY t.token_no
	 LIMIT $4::int
	   FOR UPDATE OF t SKIP LOCKED
), pick_before AS (
	SELECT t.ctid
	  FROM {schema}.inventory_token AS t
	 WHERE t.activity_id = $1 AND t.sku_id = $2 AND t.reservation_id IS NULL
	   AND t.token_no < (SELECT (abs(hashtext($6::text)::int8) % 64) * k.planned_stock / 64
	                          FROM {schema}.inventory_sku AS k WHERE k.activity_id = $1 AND k.sku_id = $2)
	   AND EXISTS (SELECT 1 FROM rl)
	   AND NOT EXISTS (SELECT 1 FROM {schema}.inventory_ledger WHERE idempotency_key = $5)
	   AND (SELECT selling FROM sk)
	 ORDER BY t.token_no
	 LIMIT $4::int
	   FOR UPDATE OF t SKIP LOCKED
), pick AS (
	SELECT ctid FROM pick_from
	UNION ALL
	SELECT ctid FROM pick_before
	 LIMIT $4::int
), claim AS (
	UPDATE {schema}.inventory_token AS t
	   SET reservation_id = $6, version = t.version + 1, updated_at = statement_timestamp()
	 WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM pick)) AND t.reservation_id IS NULL
	   AND (SELECT count(*) FROM pick) = $4::int
	RETURNING t.version
), took AS (
	SELECT before_available, after_available, before_allocated, after_allocated, version FROM upd
	UNION ALL
	SELECT $4::int, 0, 0, $4::int, max(version) FROM claim HAVING count(*) > 0
), led AS (
	INSERT INTO {schema}.inventory_ledger (
		idempotency_key, reservation_id, order_id, source_message_id,
		activity_id, sku_id, user_id, inventory_bucket, ledger_type,
		total_delta, available_delta, allocated_delta,
		before_available, after_available, before_allocated, after_allocated, reason)
	SELECT $5, $6, $7, $8, $1, $2, $9, $3, 10,
	       0, -$4::int, $4::int,
	       u.before_available, u.after_available, u.before_allocated, u.after_allocated, $10
	  FROM took AS u
	RETURNING ledger_id, created_at
)
SELECT l.ledger_id, l.created_at,
       u.before_available, u.after_available, u.before_allocated, u.after_allocated, u.version,
       CASE WHEN l.ledger_id IS NULL THEN {schema}.inventory_ledger_id_now($5) END,
       CASE WHEN l.ledger_id IS NULL THEN
         {schema}.inventory_available_units_now($1, $2, $3::smallint) END,
       coalesce(rlk.activity_id, r.activity_id), coalesce(rlk.sku_id, r.sku_id),
       coalesce(rlk.inventory_bucket, r.inventory_bucket), coalesce(rlk.quantity, r.quantity),
       coalesce(rlk.user_id, r.user_id), coalesce(rlk.status, r.status),
       sk.sale_status, sk.sale_starts_at, sk.sale_ends_at, sk.selling, sk.at
  FROM (VALUES (1)) AS one (x)
  LEFT JOIN took AS u ON true
  LEFT JOIN led AS l ON true
  LEFT JOIN r ON true
  LEFT JOIN rlk ON true
  LEFT JOIN sk ON true

-- name: allocate_routed
-- allocate_routed follows allocation_placeholder in the same batch.
-- upd is allocate's conditional decrement, guarded by the placeholder
-- row instead of the absence of a ledger row; led writes the counters
-- around the decrement and the real reason into the placeholder; del
-- deletes the placeholder when upd took nothing, so a refused allocation
-- writes nothing. The outer SELECT returns allocate's columns: the
-- zero-row branch reads the ledger row of another call directly (this is
-- a new statement, whose snapshot already sees a duplicate that
-- committed while the placeholder insert waited). Its bucket read tells a
-- missing bucket from one without the stock; the available stock a refusal
-- reports comes from available_now, the batch's next statement (the
-- function allocate reads it with cannot run on a Citus worker: it
-- would query a distributed table from a shard's query). A token SKU
-- (migration 010) is served by allocate's rlk, rl, pick, claim and took,
-- guarded by the placeholder instead of the absence of a ledger row; the
-- bucket read is of inventory_stock_row, which has bucket 0 of a token SKU.
--
-- Parameters: $1 activity, $2 SKU, $3 bucket, $4 quantity, $5 ledger key,
-- $6 reservation, $7 the placeholder's marker, $8 reason, $9 user.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2)
-- $4 = quantity (int4)
-- $5 = ledger_key (text): ALLOCATE:<reservation_id>
-- $6 = reservation_id (uuid)
-- $7 = marker (text): the placeholder reason written by allocation_placeholder
-- $8 = reason (text): the ledger reason
-- $9 = user_id (int8): the buyer
-- index: pk_sku_inventory, inventory_reservation_pkey, pk_inventory_sku, uq_inventory_ledger_idempotency
WITH r AS (
	SELECT activity_id, sku_id, inventory_bucket, quantity, user_id, status
	  FROM {schema}.inventory_reservation
	 WHERE reservation_id = $6
), sk AS (
	SELECT sale_status, sale_starts_at, sale_ends_at,
	       sale_status = 10
	       AND (sale_starts_at IS NULL OR sale_starts_at <= statement_timestamp())
	       AND (sale_ends_at IS NULL OR statement_timestamp() < sale_ends_at) AS selling,
	       statement_timestamp() AS at
	  FROM {schema}.inventory_sku
	 WHERE activity_id = $1 AND sku_id = $2
), upd AS (
	UPDATE {schema}.sku_inventory
	   SET available_stock = available_stock - $4::int,
	       allocated_stock = allocated_stock + $4::int,
	       version = version + 1,
	       updated_at = statement_timestamp()
	 WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3
	   AND available_stock >= $4::int
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_ledger WHERE idempotency_key = $5 AND reason = $7)
	   AND EXISTS (SELECT 1 FROM r
	                WHERE r.activity_id = $1 AND r.sku_id = $2 AND r.inventory_bucket = $3
	                  AND r.quantity = $4::int AND r.user_id = $9 AND r.status IN (0, 10))
	   AND (SELECT selling FROM sk)
	RETURNING available_stock + $4::int AS before_available, available_stock AS after_available,
	          allocated_stock - $4::int AS before_allocated, allocated_stock AS after_allocated, version
), rlk AS (
	SELECT r.reservation_id, r.activity_id, r.sku_id, r.inventory_bucket, r.quantity, r.user_id, r.status
	  FROM {schema}.inventory_reservation AS r
	 WHERE r.reservation_id = $6
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_sku AS k
	                WHERE k.activity_id = $1 AND k.sku_id = $2 AND k.token_stock AND $3 = 0)
	   FOR NO KEY UPDATE OF r
), rl AS (
	SELECT reservation_id
	  FROM rlk
	 WHERE activity_id = $1 AND sku_id = $2 AND inventory_bucket = $3
	   AND quantity = $4::int AND user_id = $9 AND status IN (0, 10)
), pick_from AS (
	SELECT t.ctid
	  FROM {schema}.inventory_token AS t
	 WHERE t.activity_id = $1 AND t.sku_id = $2 AND t.reservation_id IS NULL
	   AND t.token_no >= (SELECT (abs(hashtext($6::text)::int8) % 64) * k.planned_stock / 64
	                          FROM {schema}.inventory_sku AS k WHERE k.activity_id = $1 AND k.sku_id = $2)
	   AND EXISTS (SELECT 1 FROM rl)
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_ledger WHERE idempotency_key = $5 AND reason = $7)
	   AND (SELECT selling FROM sk)
	 ORDER BY t.token_no
	 LIMIT $4::int
	   FOR UPDATE OF t SKIP LOCKED
), pick_before AS (
	SELECT t.ctid
	  FROM {schema}.inventory_token AS t
	 WHERE t.activity_id = $1 AND t.sku_id = $2 AND t.reservation_id IS NULL
	   AND t.token_no < (SELECT (abs(hashtext($6::text)::int8) % 64) * k.planned_stock / 64
	                          FROM {schema}.inventory_sku AS k WHERE k.activity_id = $1 AND k.sku_id = $2)
	   AND EXISTS (SELECT 1 FROM rl)
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_ledger WHERE idempotency_key = $5 AND reason = $7)
	   AND (SELECT selling FROM sk)
	 ORDER BY t.token_no
	 LIMIT $4::int
	   FOR UPDATE OF t SKIP LOCKED
), pick AS (
	SELECT ctid FROM pick_from
	UNION ALL
	SELECT ctid FROM pick_before
	 LIMIT $4::int
), claim AS (
	UPDATE {schema}.inventory_token AS t
	   SET reservation_id = $6, version = t.version + 1, updated_at = statement_timestamp()
	 WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM pick)) AND t.reservation_id IS NULL
	   AND (SELECT count(*) FROM pick) = $4::int
	RETURNING t.version
), took AS (
	SELECT before_available, after_available, before_allocated, after_allocated, version FROM upd
	UNION ALL
	SELECT $4::int, 0, 0, $4::int, max(version) FROM claim HAVING count(*) > 0
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
SELECT l.ledger_id, l.created_at,
       u.before_available, u.after_available, u.before_allocated, u.after_allocated, u.version,
       CASE WHEN l.ledger_id IS NULL THEN
         (SELECT x.ledger_id FROM {schema}.inventory_ledger AS x
           WHERE x.idempotency_key = $5 AND x.reason <> $7) END,
       CASE WHEN l.ledger_id IS NULL THEN
         (SELECT b.available_stock FROM {schema}.inventory_stock_row AS b
           WHERE b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3) END,
       coalesce(rlk.activity_id, r.activity_id), coalesce(rlk.sku_id, r.sku_id),
       coalesce(rlk.inventory_bucket, r.inventory_bucket), coalesce(rlk.quantity, r.quantity),
       coalesce(rlk.user_id, r.user_id), coalesce(rlk.status, r.status),
       sk.sale_status, sk.sale_starts_at, sk.sale_ends_at, sk.selling, sk.at
  FROM (SELECT 1) AS one
  LEFT JOIN took AS u ON true
  LEFT JOIN led AS l ON true
  LEFT JOIN r ON true
  LEFT JOIN rlk ON true
  LEFT JOIN sk ON true

-- name: allocation_ledger
-- allocation_ledger inserts the ALLOCATE ledger row of
-- [Store.QueueAllocateBucket] with [pgtx.Abort] before the bucket is touched, as a
-- plain INSERT … VALUES: a ledger row with the same key (a duplicate that
-- committed, or a concurrent one that commits while this insert waits for
-- it) raises unique_violation on uq_inventory_ledger_idempotency. The
-- counters it writes are placeholders that satisfy the table's checks
-- (before_available = quantity, after_available = 0, before_allocated = 0,
-- after_allocated = quantity); decrement_abort, the next statement,
-- overwrites them with the bucket's counters around the decrement in the
-- same transaction, so no other transaction ever sees them.
--
-- Why not INSERT … SELECT from the bucket row after the decrement: on Citus
-- an INSERT … SELECT into a table with an identity column (ledger_id) is
-- not pushed down to the worker ("pull to coordinator": nextval is
-- volatile); the row travels back as a COPY, and a transaction that wrote
-- through such a COPY commits with two phases. INSERT … VALUES is routed
-- to the one node as it is, here and on plain PostgreSQL.
--
-- Parameters as allocate. With dst, the statement returns ledger_id and
-- created_at.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2): the reservation's bucket
-- $4 = quantity (int4): the units taken
-- $5 = ledger_key (text): the idempotency key, ALLOCATE:<reservation_id>
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
VALUES ($5, $6, $7, $8, $1, $2, $9, $3, 10,
        0, -$4::int, $4::int,
        $4::int, 0, 0, $4::int, $10)

-- name: allocation_ledger_from_bucket
-- The ALLOCATE ledger row of the plain PostgreSQL one-batch allocation
-- (Store.QueueAllocateBucket with pgtx.Abort, without Config.Citus): an
-- INSERT … SELECT of the bucket's counters, which this second statement
-- of the batch reads after decrement_then_raise took the stock. Without a
-- guard on the ledger, a duplicate (committed, or concurrent and
-- committing first) decrements and then raises unique_violation on the
-- ledger key, which aborts the decrement with the rest. Its parameters
-- are allocate's.
-- For a token SKU (migration 010), which has no bucket row, the row
-- comes from inventory_sku with the counters of the tokens claimed
-- (before_available = quantity, after_available = 0, before_allocated = 0,
-- after_allocated = quantity): decrement_then_raise claimed them or raised.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2): the reservation's bucket
-- $4 = quantity (int4): the units taken
-- $5 = ledger_key (text): the idempotency key, ALLOCATE:<reservation_id>
-- $6 = reservation_id (uuid)
-- $7 = order_id (int8): NULL for none
-- $8 = message_id (uuid): the message being processed
-- $9 = user_id (int8): the buyer
-- $10 = reason (text): the ledger reason
-- index: pk_sku_inventory, pk_inventory_sku
INSERT INTO {schema}.inventory_ledger (
	idempotency_key, reservation_id, order_id, source_message_id,
	activity_id, sku_id, user_id, inventory_bucket, ledger_type,
	total_delta, available_delta, allocated_delta,
	before_available, after_available, before_allocated, after_allocated, reason)
SELECT $5, $6, $7, $8, $1, $2, $9, $3, 10,
       0, -$4::int, $4::int,
       b.available_stock + $4::int, b.available_stock, b.allocated_stock - $4::int, b.allocated_stock, $10
  FROM {schema}.sku_inventory AS b
 WHERE b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3
UNION ALL
SELECT $5::text, $6::uuid, $7::int8, $8::uuid, $1::int8, $2::int8, $9::int8, $3::int2, 10,
       0, -$4::int, $4::int,
       $4::int, 0, 0, $4::int, $10::text
  FROM {schema}.inventory_sku AS k
 WHERE k.activity_id = $1 AND k.sku_id = $2 AND k.token_stock AND $3 = 0

-- name: allocation_ledger_from_bucket_returning
-- allocation_ledger_from_bucket returning the ledger row's id, time and
-- counters (the queued form's dst is not nil).
-- For a token SKU (migration 010), which has no bucket row, the row
-- comes from inventory_sku with the counters of the tokens claimed
-- (before_available = quantity, after_available = 0, before_allocated = 0,
-- after_allocated = quantity): decrement_then_raise claimed them or raised.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2): the reservation's bucket
-- $4 = quantity (int4): the units taken
-- $5 = ledger_key (text): the idempotency key, ALLOCATE:<reservation_id>
-- $6 = reservation_id (uuid)
-- $7 = order_id (int8): NULL for none
-- $8 = message_id (uuid): the message being processed
-- $9 = user_id (int8): the buyer
-- $10 = reason (text): the ledger reason
-- index: pk_sku_inventory, pk_inventory_sku
INSERT INTO {schema}.inventory_ledger (
	idempotency_key, reservation_id, order_id, source_message_id,
	activity_id, sku_id, user_id, inventory_bucket, ledger_type,
	total_delta, available_delta, allocated_delta,
	before_available, after_available, before_allocated, after_allocated, reason)
SELECT $5, $6, $7, $8, $1, $2, $9, $3, 10,
       0, -$4::int, $4::int,
       b.available_stock + $4::int, b.available_stock, b.allocated_stock - $4::int, b.allocated_stock, $10
  FROM {schema}.sku_inventory AS b
 WHERE b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3
UNION ALL
SELECT $5::text, $6::uuid, $7::int8, $8::uuid, $1::int8, $2::int8, $9::int8, $3::int2, 10,
       0, -$4::int, $4::int,
       $4::int, 0, 0, $4::int, $10::text
  FROM {schema}.inventory_sku AS k
 WHERE k.activity_id = $1 AND k.sku_id = $2 AND k.token_stock AND $3 = 0
RETURNING ledger_id, created_at, before_available, after_available, before_allocated, after_allocated

-- name: allocation_ledger_returning
-- allocation_ledger inserts the ALLOCATE ledger row of
-- [Store.QueueAllocateBucket] with [pgtx.Abort] before the bucket is touched, as a
-- plain INSERT … VALUES: a ledger row with the same key (a duplicate that
-- committed, or a concurrent one that commits while this insert waits for
-- it) raises unique_violation on uq_inventory_ledger_idempotency. The
-- counters it writes are placeholders that satisfy the table's checks
-- (before_available = quantity, after_available = 0, before_allocated = 0,
-- after_allocated = quantity); decrement_abort, the next statement,
-- overwrites them with the bucket's counters around the decrement in the
-- same transaction, so no other transaction ever sees them.
--
-- Why not INSERT … SELECT from the bucket row after the decrement: on Citus
-- an INSERT … SELECT into a table with an identity column (ledger_id) is
-- not pushed down to the worker ("pull to coordinator": nextval is
-- volatile); the row travels back as a COPY, and a transaction that wrote
-- through such a COPY commits with two phases. INSERT … VALUES is routed
-- to the one node as it is, here and on plain PostgreSQL.
--
-- Parameters as allocate. With dst, the statement returns ledger_id and
-- created_at.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2): the reservation's bucket
-- $4 = quantity (int4): the units taken
-- $5 = ledger_key (text): the idempotency key, ALLOCATE:<reservation_id>
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
VALUES ($5, $6, $7, $8, $1, $2, $9, $3, 10,
        0, -$4::int, $4::int,
        $4::int, 0, 0, $4::int, $10)
RETURNING ledger_id, created_at

-- name: allocation_placeholder
-- allocation_placeholder inserts the ALLOCATE ledger row of
-- AllocateBucket with Config.Citus before the bucket is touched, as
-- allocation_ledger does for the one-batch path, but with ON CONFLICT
-- DO NOTHING: a row with the same key (a duplicate that committed, or a
-- concurrent one that commits while this insert waits for it) leaves the
-- transaction usable, and allocate_routed classifies it. Its reason
-- ($10) is a marker unique to the call (placeholderReason), by which the
-- next statement knows the row as the one this call inserted.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2): the reservation's bucket
-- $4 = quantity (int4): the units taken
-- $5 = ledger_key (text): the idempotency key, ALLOCATE:<reservation_id>
-- $6 = reservation_id (uuid)
-- $7 = order_id (int8): NULL for none
-- $8 = message_id (uuid): the message being processed
-- $9 = user_id (int8): the buyer
-- $10 = marker (text): the placeholder reason, replaced by the next statement
-- index: none (one INSERT … VALUES: it reads no table; the unique indexes check it as it inserts)
INSERT INTO {schema}.inventory_ledger (
	idempotency_key, reservation_id, order_id, source_message_id,
	activity_id, sku_id, user_id, inventory_bucket, ledger_type,
	total_delta, available_delta, allocated_delta,
	before_available, after_available, before_allocated, after_allocated, reason)
VALUES ($5, $6, $7, $8, $1, $2, $9, $3, 10,
        0, -$4::int, $4::int,
        $4::int, 0, 0, $4::int, $10)
ON CONFLICT DO NOTHING

-- name: available_now
-- available_now follows allocate_routed in its batch: the bucket's
-- available stock ($1 activity, $2 SKU, $3 bucket), read by a statement of
-- its own. Its snapshot is taken after allocate_routed ended, so it sees
-- what a transaction that statement waited for left (one row, NULL for a
-- missing bucket). For bucket 0 of a token SKU (migration 010) it counts
-- the free tokens, only when reservation $4 holds none (the allocation was
-- refused): a successful allocation does not pay for the count.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2)
-- $4 = reservation_id (uuid): the allocation's reservation
-- index: pk_sku_inventory, pk_inventory_sku
SELECT CASE WHEN k.token_stock AND $3 = 0 THEN
         CASE WHEN NOT EXISTS (SELECT 1 FROM {schema}.inventory_token AS h WHERE h.reservation_id = $4) THEN
           (SELECT count(*)::int FROM {schema}.inventory_token AS t
             WHERE t.activity_id = $1 AND t.sku_id = $2 AND t.reservation_id IS NULL) END
       ELSE (SELECT b.available_stock FROM {schema}.sku_inventory AS b
              WHERE b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3) END
  FROM (SELECT 1) AS o
  LEFT JOIN {schema}.inventory_sku AS k ON k.activity_id = $1 AND k.sku_id = $2
-- name: decrement_abort
-- decrement_abort is the decrement of allocate with the same guards
-- on the reservation and the sale (status and window), after
-- allocation_ledger inserted the ledger row: the uniqueness of that row
-- stands for allocate's NOT EXISTS guard on the ledger. The second CTE
-- writes the counters around the decrement into that ledger row (only
-- when the decrement took the stock). When the UPDATE takes nothing, the
-- outer SELECT calls inventory_refuse with the condition
-- the allocation's refusal read finds, which raises it and aborts the transaction.
-- It returns the bucket's new version and the counters.
--
-- Both CTEs are UPDATEs of tables in the same schema, read by a SELECT: one
-- statement that Citus routes to one node whole.
--
-- Token stock (migration 010): pick and claim are allocate's, under this
-- statement's guards (the reservation, the sale), and took is the one
-- change either made; the refusal read knows bucket 0 of a token SKU.
--
-- Parameters: $1 activity, $2 SKU, $3 bucket, $4 quantity, $5
-- reservation, $6 user, $7 ledger key.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2)
-- $4 = quantity (int4): the units taken
-- $5 = reservation_id (uuid)
-- $6 = user_id (int8): the buyer
-- $7 = ledger_key (text): ALLOCATE:<reservation_id>
-- (Its generic plan reads the reservation of the guard by
-- idx_reservation_user_sku, whose three equalities (activity, SKU, buyer)
-- find it as surely as the primary key; the refusal read uses the key.)
-- index: pk_sku_inventory, inventory_reservation_pkey, pk_inventory_sku, uq_inventory_ledger_idempotency
WITH upd AS (
	UPDATE {schema}.sku_inventory
	   SET available_stock = available_stock - $4::int,
	       allocated_stock = allocated_stock + $4::int,
	       version = version + 1,
	       updated_at = statement_timestamp()
	 WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3
	   AND available_stock >= $4::int
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_reservation AS r
	                WHERE r.reservation_id = $5 AND r.activity_id = $1 AND r.sku_id = $2
	                  AND r.inventory_bucket = $3 AND r.quantity = $4::int AND r.user_id = $6
	                  AND r.status IN (0, 10))
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_sku AS k
	                WHERE k.activity_id = $1 AND k.sku_id = $2 AND k.sale_status = 10
	                  AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                  AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at))
	RETURNING available_stock + $4::int AS before_available, available_stock AS after_available,
	          allocated_stock - $4::int AS before_allocated, allocated_stock AS after_allocated, version
), pick_from AS (
	SELECT t.ctid
	  FROM {schema}.inventory_token AS t
	 WHERE t.activity_id = $1 AND t.sku_id = $2 AND t.reservation_id IS NULL
	   AND t.token_no >= (SELECT (abs(hashtext($5::text)::int8) % 64) * k.planned_stock / 64
	                          FROM {schema}.inventory_sku AS k WHERE k.activity_id = $1 AND k.sku_id = $2)
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_reservation AS r
	                WHERE r.reservation_id = $5 AND r.activity_id = $1 AND r.sku_id = $2
	                  AND r.inventory_bucket = $3 AND r.quantity = $4::int AND r.user_id = $6
	                  AND r.status IN (0, 10))
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_sku AS k
	                WHERE k.activity_id = $1 AND k.sku_id = $2 AND k.sale_status = 10
	                  AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                  AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at))
	   AND $3 = 0
	 ORDER BY t.token_no
	 LIMIT $4::int
	   FOR UPDATE OF t SKIP LOCKED
), pick_before AS (
	SELECT t.ctid
	  FROM {schema}.inventory_token AS t
	 WHERE t.activity_id = $1 AND t.sku_id = $2 AND t.reservation_id IS NULL
	   AND t.token_no < (SELECT (abs(hashtext($5::text)::int8) % 64) * k.planned_stock / 64
	                          FROM {schema}.inventory_sku AS k WHERE k.activity_id = $1 AND k.sku_id = $2)
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_reservation AS r
	                WHERE r.reservation_id = $5 AND r.activity_id = $1 AND r.sku_id = $2
	                  AND r.inventory_bucket = $3 AND r.quantity = $4::int AND r.user_id = $6
	                  AND r.status IN (0, 10))
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_sku AS k
	                WHERE k.activity_id = $1 AND k.sku_id = $2 AND k.sale_status = 10
	                  AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                  AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at))
	   AND $3 = 0
	 ORDER BY t.token_no
	 LIMIT $4::int
	   FOR UPDATE OF t SKIP LOCKED
), pick AS (
	SELECT ctid FROM pick_from
	UNION ALL
	SELECT ctid FROM pick_before
	 LIMIT $4::int
), claim AS (
	UPDATE {schema}.inventory_token AS t
	   SET reservation_id = $5::uuid, version = t.version + 1, updated_at = statement_timestamp()
	 WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM pick)) AND t.reservation_id IS NULL
	   AND (SELECT count(*) FROM pick) = $4::int
	RETURNING t.version
), took AS (
	SELECT before_available, after_available, before_allocated, after_allocated, version FROM upd
	UNION ALL
	SELECT $4::int, 0, 0, $4::int, max(version) FROM claim HAVING count(*) > 0
), led AS (
	UPDATE {schema}.inventory_ledger AS l
	   SET before_available = u.before_available, after_available = u.after_available,
	       before_allocated = u.before_allocated, after_allocated = u.after_allocated
	  FROM took AS u
	 WHERE l.idempotency_key = $7
)
SELECT coalesce(u.version, {schema}.inventory_refuse(w.code, $1, $2, $3, $4, $5::text)),
       u.before_available, u.after_available, u.before_allocated, u.after_allocated
  FROM (SELECT 1) AS one LEFT JOIN took AS u ON true
  LEFT JOIN LATERAL (
	SELECT CASE
	         WHEN k.sku_id IS NULL THEN 'SK004'
	         WHEN NOT (k.sale_status = 10
	                   AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                   AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at)) THEN 'SK002'
	         WHEN r.reservation_id IS NULL THEN 'SK009'
	         WHEN NOT (r.activity_id = $1 AND r.sku_id = $2 AND r.inventory_bucket = $3 AND r.quantity = $4::int
	                   AND r.user_id = $6 AND r.status IN (0, 10)) THEN 'SK005'
	         WHEN NOT EXISTS (SELECT 1 FROM {schema}.sku_inventory AS b
	                           WHERE b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3)
	              AND NOT (k.token_stock AND $3 = 0) THEN 'SK003'
	         ELSE 'SK001'
	       END AS code
	  FROM (SELECT 1) AS o
	  LEFT JOIN {schema}.inventory_sku AS k ON k.activity_id = $1 AND k.sku_id = $2
	  LEFT JOIN {schema}.inventory_reservation AS r ON r.reservation_id = $5
	 WHERE u.version IS NULL) AS w ON true

-- name: decrement_then_raise
-- The guarded decrement of the plain PostgreSQL one-batch allocation
-- (Store.QueueAllocateBucket with pgtx.Abort, without Config.Citus),
-- sent before allocation_ledger_from_bucket: it raises the refusal's
-- condition (inventory_refuse) when it takes nothing and otherwise returns
-- the bucket's new version. The ledger row is then written once, with its
-- counters (the Citus pair writes it twice: a placeholder, then the
-- counters). Its parameters are decrement_abort's first six.
--
-- Token stock (migration 010): pick and claim are allocate's, under this
-- statement's guards (the reservation, the sale), and took is the one
-- change either made; the refusal read knows bucket 0 of a token SKU.
-- $1 = activity_id (int8)
-- $2 = sku_id (int8)
-- $3 = bucket (int2)
-- $4 = quantity (int4): the units taken
-- $5 = reservation_id (uuid)
-- $6 = user_id (int8): the buyer
-- (Its generic plan reads the reservation of the guard by
-- idx_reservation_user_sku, whose three equalities (activity, SKU, buyer)
-- find it as surely as the primary key; the refusal read uses the key.)
-- index: pk_sku_inventory, inventory_reservation_pkey, pk_inventory_sku
WITH upd AS (
	UPDATE {schema}.sku_inventory
	   SET available_stock = available_stock - $4::int,
	       allocated_stock = allocated_stock + $4::int,
	       version = version + 1,
	       updated_at = statement_timestamp()
	 WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3
	   AND available_stock >= $4::int
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_reservation AS r
	                WHERE r.reservation_id = $5 AND r.activity_id = $1 AND r.sku_id = $2
	                  AND r.inventory_bucket = $3 AND r.quantity = $4::int AND r.user_id = $6
	                  AND r.status IN (0, 10))
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_sku AS k
	                WHERE k.activity_id = $1 AND k.sku_id = $2 AND k.sale_status = 10
	                  AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                  AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at))
	RETURNING version
), pick_from AS (
	SELECT t.ctid
	  FROM {schema}.inventory_token AS t
	 WHERE t.activity_id = $1 AND t.sku_id = $2 AND t.reservation_id IS NULL
	   AND t.token_no >= (SELECT (abs(hashtext($5::text)::int8) % 64) * k.planned_stock / 64
	                          FROM {schema}.inventory_sku AS k WHERE k.activity_id = $1 AND k.sku_id = $2)
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_reservation AS r
	                WHERE r.reservation_id = $5 AND r.activity_id = $1 AND r.sku_id = $2
	                  AND r.inventory_bucket = $3 AND r.quantity = $4::int AND r.user_id = $6
	                  AND r.status IN (0, 10))
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_sku AS k
	                WHERE k.activity_id = $1 AND k.sku_id = $2 AND k.sale_status = 10
	                  AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                  AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at))
	   AND $3 = 0
	 ORDER BY t.token_no
	 LIMIT $4::int
	   FOR UPDATE OF t SKIP LOCKED
), pick_before AS (
	SELECT t.ctid
	  FROM {schema}.inventory_token AS t
	 WHERE t.activity_id = $1 AND t.sku_id = $2 AND t.reservation_id IS NULL
	   AND t.token_no < (SELECT (abs(hashtext($5::text)::int8) % 64) * k.planned_stock / 64
	                          FROM {schema}.inventory_sku AS k WHERE k.activity_id = $1 AND k.sku_id = $2)
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_reservation AS r
	                WHERE r.reservation_id = $5 AND r.activity_id = $1 AND r.sku_id = $2
	                  AND r.inventory_bucket = $3 AND r.quantity = $4::int AND r.user_id = $6
	                  AND r.status IN (0, 10))
	   AND EXISTS (SELECT 1 FROM {schema}.inventory_sku AS k
	                WHERE k.activity_id = $1 AND k.sku_id = $2 AND k.sale_status = 10
	                  AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                  AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at))
	   AND $3 = 0
	 ORDER BY t.token_no
	 LIMIT $4::int
	   FOR UPDATE OF t SKIP LOCKED
), pick AS (
	SELECT ctid FROM pick_from
	UNION ALL
	SELECT ctid FROM pick_before
	 LIMIT $4::int
), claim AS (
	UPDATE {schema}.inventory_token AS t
	   SET reservation_id = $5::uuid, version = t.version + 1, updated_at = statement_timestamp()
	 WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM pick)) AND t.reservation_id IS NULL
	   AND (SELECT count(*) FROM pick) = $4::int
	RETURNING t.version
), took AS (
	SELECT version FROM upd
	UNION ALL
	SELECT max(version) FROM claim HAVING count(*) > 0
)
SELECT coalesce(u.version, {schema}.inventory_refuse(w.code, $1, $2, $3, $4, $5::text))
  FROM (SELECT 1) AS one LEFT JOIN took AS u ON true
  LEFT JOIN LATERAL (
	SELECT CASE
	         WHEN k.sku_id IS NULL THEN 'SK004'
	         WHEN NOT (k.sale_status = 10
	                   AND (k.sale_starts_at IS NULL OR k.sale_starts_at <= statement_timestamp())
	                   AND (k.sale_ends_at IS NULL OR statement_timestamp() < k.sale_ends_at)) THEN 'SK002'
	         WHEN r.reservation_id IS NULL THEN 'SK009'
	         WHEN NOT (r.activity_id = $1 AND r.sku_id = $2 AND r.inventory_bucket = $3 AND r.quantity = $4::int
	                   AND r.user_id = $6 AND r.status IN (0, 10)) THEN 'SK005'
	         WHEN NOT EXISTS (SELECT 1 FROM {schema}.sku_inventory AS b
	                           WHERE b.activity_id = $1 AND b.sku_id = $2 AND b.bucket_no = $3)
	              AND NOT (k.token_stock AND $3 = 0) THEN 'SK003'
	         ELSE 'SK001'
	       END AS code
	  FROM (SELECT 1) AS o
	  LEFT JOIN {schema}.inventory_sku AS k ON k.activity_id = $1 AND k.sku_id = $2
	  LEFT JOIN {schema}.inventory_reservation AS r ON r.reservation_id = $5
	 WHERE u.version IS NULL) AS w ON true
