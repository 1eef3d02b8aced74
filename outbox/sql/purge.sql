-- Store.PurgeSent.

-- name: purge
-- Deletes up to $3 SENT events sent before $2 whose id is greater than
-- $1, walking the primary key (keyset), rows other transactions hold
-- skipped. Returns the number deleted, the number examined and the last id
-- examined (NULL when none).
-- $1 = after (uuid): the keyset cursor, the last id of the previous batch
-- $2 = sent_before (timestamptz)
-- $3 = batch_size (int4)
-- index: event_outbox_pkey
-- explain with: '00000000-0000-0000-0000-000000000000', now() - interval '1 day', 1000
WITH victims AS (
	SELECT event_id
	FROM {schema}.event_outbox
	WHERE event_id > $1
	  AND status = 20
	  AND sent_at < $2
	ORDER BY event_id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), del AS (
	DELETE FROM {schema}.event_outbox AS o
	USING victims AS v
	WHERE o.event_id = v.event_id
	  AND o.status = 20
	RETURNING o.event_id
)
SELECT (SELECT count(*) FROM del),
       (SELECT count(*) FROM victims),
       (SELECT event_id FROM victims ORDER BY event_id DESC LIMIT 1)
