package pgtx

import (
	"embed"

	"github.com/seckillkit/seckill/internal/sqlfile"
)

// The statements pgtx sends itself live whole in sql/*.sql, one file per
// operation, under the same "-- name:" headers as the other packages'
// (see internal/sqlfile; docs/sql.md lists them). They name no schema and
// take every value as a bind parameter. BEGIN is pgx's own text for the
// modes of [Options] (see sql/begin.sql).

//go:embed sql/*.sql
var sqlFiles embed.FS

// statements are the package's named statements, parsed (and checked) at
// initialisation.
var statements = sqlfile.MustParse(sqlFiles, "sql")

var (
	qSetLockTimeout      = statements.Get("set_lock_timeout")
	qSetStatementTimeout = statements.Get("set_statement_timeout")
	qCaptureXID          = statements.Get("capture_xid")
	qBatchCaptureXID     = statements.Get("batch_capture_xid")
	qCommit              = statements.Get("commit")
	qRollback            = statements.Get("rollback")
	qResolveXID          = statements.Get("resolve_xid")
)
