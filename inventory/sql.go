package inventory

import (
	"embed"

	"github.com/seckillkit/seckill/internal/sqlfile"
)

// The statements of the package live whole in sql/*.sql, one file per
// operation, each under a "-- name:" header listing its parameters and
// the index it is meant to use (see internal/sqlfile; docs/sql.md shows
// them with their plans). {schema} is replaced once, in [New], by the
// validated, quoted schema name; everything else is a bind parameter.
// Variants (plain, Citus, pgtx.Abort, with or without RETURNING) are
// separate statements written out in full; TestSharedSQLFragments checks
// that the copies of a shared fragment are identical.

//go:embed sql/*.sql
var sqlEmbedded embed.FS

// sqlFiles are the package's named statements, parsed (and checked) at
// initialisation.
var sqlFiles = sqlfile.MustParse(sqlEmbedded, "sql")
