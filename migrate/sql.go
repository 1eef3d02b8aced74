package migrate

import (
	"embed"

	"github.com/seckillkit/seckill/internal/sqlfile"
)

// The statements migrate sends around the components' migration files
// live whole in sql/*.sql, one file per operation, under the same
// "-- name:" headers as the other packages' (see internal/sqlfile;
// docs/sql.md lists them). {schema} is replaced by the validated, quoted
// schema name (ValidateSchema, then pgx.Identifier.Sanitize) once per
// call; everything else is a bind parameter.

//go:embed sql/*.sql
var sqlFiles embed.FS

// statements are the package's named statements, parsed (and checked) at
// initialisation.
var statements = sqlfile.MustParse(sqlFiles, "sql")
