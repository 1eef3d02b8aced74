package inbox

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
// Under REPEATABLE READ or SERIALIZABLE, the race the claim statement
// cannot settle alone (another transaction inserted the same key and
// commits while this insert waits) is refused by PostgreSQL itself with
// SQLSTATE 40001 (the conflicting row is invisible to the transaction
// snapshot), which pgtx.RunInTx retries; under READ COMMITTED the claim
// returns no row and ClaimMessage runs the lookup statement, whose new
// snapshot sees the committed row. So the extra round trip is paid only by
// deliveries that raced an in-flight first processing.

//go:embed sql/*.sql
var sqlFiles embed.FS

// statements are the package's named statements, parsed (and checked) at
// initialisation.
var statements = sqlfile.MustParse(sqlFiles, "sql")
