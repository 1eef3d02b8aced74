-- The claim: Store.ClaimMessage and Store.QueueClaimMessage (pgtx.Return
-- and pgtx.Abort, plain and Config.Citus). claim, claim_insert and
-- claim_abort share the same INSERT column list and VALUES: a test checks.

-- name: claim
-- Claims a message in ONE statement on the fresh path and on the common
-- duplicate path. ins tries the insert; ON CONFLICT DO NOTHING writes
-- nothing for a duplicate (no row version, no row lock, no WAL, so
-- duplicates never block each other). The second branch returns the stored
-- row when ins inserted nothing. When another transaction inserted the same
-- key and commits while this insert waits, the second branch (the
-- statement's older snapshot) returns NO row: the caller then runs lookup,
-- a new statement whose snapshot sees the committed row.
-- $1 = consumer_group (text)
-- $2 = message_id (uuid)
-- $3 = topic (text)
-- $4 = tag (text): NULL for none
-- $5 = message_key (text): NULL for none
-- $6 = ref (text): NULL for none
-- $7 = payload_hash (bytea): SHA-256 of the body, NULL for none
-- $8 = status (int2): 10 CLAIMED, or 20 PROCESSED with a result
-- $9 = result_code (text): NULL while CLAIMED
-- $10 = result_payload (jsonb): NULL while CLAIMED
-- index: pk_consumer_inbox
WITH ins AS (
	INSERT INTO {schema}.consumer_inbox
		(consumer_group, message_id, topic, tag, message_key, ref, payload_hash, status, result_code, result_payload)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
	ON CONFLICT (consumer_group, message_id) DO NOTHING
	RETURNING status, result_code, result_payload, payload_hash, created_at, processed_at
)
SELECT true, status, result_code, result_payload, payload_hash, created_at, processed_at
FROM ins
UNION ALL
SELECT false, status, result_code, result_payload, payload_hash, created_at, processed_at
FROM {schema}.consumer_inbox
WHERE consumer_group = $1 AND message_id = $2 AND NOT EXISTS (SELECT FROM ins)

-- name: claim_insert
-- The claim of Config.Citus: claim's insert alone, returning the new row,
-- or nothing for a duplicate. lookup, sent after it in the same batch,
-- reads the stored row with a new snapshot.
-- $1 = consumer_group (text)
-- $2 = message_id (uuid)
-- $3 = topic (text)
-- $4 = tag (text): NULL for none
-- $5 = message_key (text): NULL for none
-- $6 = ref (text): NULL for none
-- $7 = payload_hash (bytea): SHA-256 of the body, NULL for none
-- $8 = status (int2): 10 CLAIMED, or 20 PROCESSED with a result
-- $9 = result_code (text): NULL while CLAIMED
-- $10 = result_payload (jsonb): NULL while CLAIMED
-- index: pk_consumer_inbox
INSERT INTO {schema}.consumer_inbox
	(consumer_group, message_id, topic, tag, message_key, ref, payload_hash, status, result_code, result_payload)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (consumer_group, message_id) DO NOTHING
RETURNING true, status, result_code, result_payload, payload_hash, created_at, processed_at

-- name: claim_abort
-- QueueClaimMessage with pgtx.Abort: a plain INSERT, without ON CONFLICT,
-- so that a duplicate raises unique_violation on pk_consumer_inbox and
-- aborts the transaction instead of returning the stored row.
-- $1 = consumer_group (text)
-- $2 = message_id (uuid)
-- $3 = topic (text)
-- $4 = tag (text): NULL for none
-- $5 = message_key (text): NULL for none
-- $6 = ref (text): NULL for none
-- $7 = payload_hash (bytea): SHA-256 of the body, NULL for none
-- $8 = status (int2): 10 CLAIMED, or 20 PROCESSED with a result
-- $9 = result_code (text): NULL while CLAIMED
-- $10 = result_payload (jsonb): NULL while CLAIMED
-- index: none (an INSERT without ON CONFLICT: pk_consumer_inbox only raises the duplicate)
INSERT INTO {schema}.consumer_inbox
	(consumer_group, message_id, topic, tag, message_key, ref, payload_hash, status, result_code, result_payload)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
RETURNING true, status, result_code, result_payload, payload_hash, created_at, processed_at
