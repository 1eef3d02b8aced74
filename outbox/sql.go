package outbox

import (
	"embed"

	"github.com/seckillkit/seckill/internal/sqlfile"
)

// The statements of the package live whole in sql/*.sql, one file per
// operation, each under a "-- name:" header listing its parameters and
// the index it is meant to use (see internal/sqlfile; docs/sql.md shows
// them with their plans). {schema} is replaced once, in [New], by the
// validated, quoted schema name; everything else is a bind parameter.
//
// Every parameter has a Go type pgx can encode without knowing the
// parameter's type from the server (query exec modes exec and
// simple_protocol, as PgBouncer in transaction mode needs): UUID arrays go
// as []string cast with $n::text[]::uuid[], JSON as string cast to jsonb.
//
// Two choices the files do not repeat at every statement:
//
// Marks (mark_sent, release, mark_failed) report the rows they did not
// update through a locking read (FOR SHARE): a locking read in Read
// Committed that meets a row version updated since its snapshot returns
// the row's latest committed version, where a plain read would show the
// row before a concurrent recovery, mark or release (SENDING under the
// caller's own lease). FOR KEY SHARE is not enough: it does not conflict
// with an UPDATE that leaves the key alone, so PostgreSQL grants it on
// the snapshot's version. The ids are cast to uuid[] in a sub-select,
// which runs once per execution: written as ANY($1::text[]::uuid[]), the
// generic plan (the one pgx's statement cache ends up using) casts the
// whole array again for every row it filters.
//
// Failed marks compute the next available_at in UTC, on timestamp without
// time zone, whose functions are immutable: on Citus an UPDATE may not
// call a STABLE function with a column reference (timestamptz + interval
// is STABLE).

//go:embed sql/*.sql
var sqlFiles embed.FS

// statements are the package's named statements, parsed (and checked) at
// initialisation.
var statements = sqlfile.MustParse(sqlFiles, "sql")
