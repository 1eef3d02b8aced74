-- ApplyTx: the statements around the migration files, in the caller's
-- transaction. {schema} is the validated schema name, quoted.

-- name: lock
-- Serialises concurrent migrators of the same schema: a
-- transaction-scoped advisory lock keyed by the schema's name, released
-- when the caller's transaction ends.
-- $1 = schema (text): the schema's name, unquoted
-- index: none (reads no table)
SELECT pg_advisory_xact_lock(hashtextextended('seckill.migrate:' || $1, 0))

-- name: read_search_path
-- The caller's search_path, restored before ApplyTx returns.
-- index: none (reads no table)
SELECT current_setting('search_path')

-- name: set_search_path
-- SET LOCAL search_path: the schema while the files run, then the
-- caller's again.
-- $1 = search_path (text): the quoted schema, or the search_path read before
-- index: none (reads no table)
SELECT set_config('search_path', $1, true)

-- name: create_schema
-- Creates the schema if needed.
-- index: none (DDL)
-- not explained: DDL has no plan
CREATE SCHEMA IF NOT EXISTS {schema}

-- name: create_bookkeeping
-- Creates the bookkeeping table if needed: one row per applied file.
-- index: none (DDL)
-- not explained: DDL has no plan
CREATE TABLE IF NOT EXISTS {schema}.seckill_schema_migrations (
	component  text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT statement_timestamp(),
	checksum   text,
	PRIMARY KEY (component, version)
)

-- name: add_checksum_column
-- Adds the checksum column to a bookkeeping table made by a version of
-- this package that kept none.
-- index: none (DDL)
-- not explained: DDL has no plan
ALTER TABLE {schema}.seckill_schema_migrations ADD COLUMN checksum text

-- name: record
-- Records an applied file with its checksum.
-- $1 = component (text): the component's name
-- $2 = version (int4): the file's version
-- $3 = name (text): the file's name
-- $4 = checksum (text): the file's checksum
-- index: none (inserts one row; a table of a few rows, one per applied file)
INSERT INTO {schema}.seckill_schema_migrations (component, version, name, checksum) VALUES ($1, $2, $3, $4)

-- name: record_checksum
-- Records the checksum of a file applied without one.
-- $1 = component (text): the component's name
-- $2 = version (int4): the file's version
-- $3 = checksum (text): the file's checksum
-- index: seckill_schema_migrations_pkey
UPDATE {schema}.seckill_schema_migrations SET checksum = $3 WHERE component = $1 AND version = $2
