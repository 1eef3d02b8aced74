-- Store.Lookup, and the claim's second read.

-- name: lookup
-- The inbox row of one key as the statement's snapshot sees it.
-- $1 = consumer_group (text)
-- $2 = message_id (uuid)
-- index: pk_consumer_inbox
SELECT false, status, result_code, result_payload, payload_hash, created_at, processed_at
FROM {schema}.consumer_inbox
WHERE consumer_group = $1 AND message_id = $2
