-- Store.Complete and Store.QueueComplete.

-- name: complete
-- Records the result of a message claimed earlier in the same
-- transaction (CLAIMED -> PROCESSED). cur reads the row and decides whether
-- this transaction inserted it: its xmin is still in progress (rebuilt as a
-- 64-bit xid from the transaction's own xid8; a frozen xmin is not ours; an
-- xid at or past the snapshot's xmax is ours). The transaction's xid and
-- snapshot are read in a LATERAL subquery of the row's query, not a CTE of
-- their own, so Citus routes the statement whole to the row's node. Returns
-- the row's status (NULL: no row), whether it is ours, and whether it was
-- updated.
-- $1 = consumer_group (text)
-- $2 = message_id (uuid)
-- $3 = result_code (text)
-- $4 = result_payload (jsonb): NULL for none
-- index: pk_consumer_inbox
WITH cur AS (
	SELECT i.status,
	       CASE WHEN i.xmin::text::int8 < 3 THEN false ELSE (
	         SELECT x.full >= me.nxt OR pg_xact_status(x.full::text::xid8) = 'in progress'
	           FROM (SELECT me.top + (((i.xmin::text::int8 - me.top % 4294967296) % 4294967296
	                                   + 6442450944) % 4294967296 - 2147483648) AS full) AS x) END AS mine
	FROM {schema}.consumer_inbox AS i,
	     LATERAL (SELECT pg_current_xact_id()::text::int8 AS top,
	                     pg_snapshot_xmax(pg_current_snapshot())::text::int8 AS nxt) AS me
	WHERE i.consumer_group = $1 AND i.message_id = $2
), upd AS (
	UPDATE {schema}.consumer_inbox
	SET status = 20, result_code = $3, result_payload = $4,
		processed_at = greatest(created_at, statement_timestamp())
	WHERE consumer_group = $1 AND message_id = $2 AND status = 10
	  AND (SELECT mine FROM cur)
	RETURNING 1
)
SELECT (SELECT status FROM cur), coalesce((SELECT mine FROM cur), false), EXISTS (SELECT FROM upd)
