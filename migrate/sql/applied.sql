-- What the bookkeeping table holds: read by ApplyTx and Validate.
-- {schema} is the validated schema name, quoted.

-- name: bookkeeping_exists
-- Whether the bookkeeping table exists.
-- $1 = table (text): the table's qualified name, {schema}.seckill_schema_migrations
-- index: none (reads no table)
SELECT to_regclass($1) IS NOT NULL

-- name: has_checksum_column
-- Whether the bookkeeping table has the checksum column (a version of
-- this package made it without one).
-- $1 = table (text): the table's qualified name, cast to regclass
-- index: pg_attribute_relid_attnam_index
SELECT EXISTS (SELECT FROM pg_attribute
	WHERE attrelid = $1::regclass AND attname = 'checksum' AND NOT attisdropped)

-- name: applied_checksums
-- The versions applied of a component, each with its checksum ('' when
-- none was recorded).
-- $1 = component (text): the component's name
-- index: seckill_schema_migrations_pkey
SELECT version, coalesce(checksum, '') FROM {schema}.seckill_schema_migrations WHERE component = $1

-- name: applied_versions
-- The versions applied of a component, from a bookkeeping table without
-- the checksum column.
-- $1 = component (text): the component's name
-- index: seckill_schema_migrations_pkey
SELECT version FROM {schema}.seckill_schema_migrations WHERE component = $1
