package order

import (
	"embed"

	"github.com/seckillkit/seckill/internal/sqlfile"
)

// The statements of the package live whole in sql/*.sql, one file per
// operation, each under a "-- name:" header listing its parameters and
// the index it is meant to use (see internal/sqlfile; docs/sql.md shows
// them with their plans). {schema} is replaced once, in [New], by the
// validated, quoted schema name; everything else is a bind parameter.
// Every statement that returns an order lists its columns in the order of
// orderColumns (scanOrder's): a test checks.
//
// The transition statement is the one conditional UPDATE behind every
// transition. cur locks the order row (FOR NO KEY UPDATE: enough to
// serialise status changes, while FK checks of payment_record inserts, FOR
// KEY SHARE, do not wait) and, being a locking read under Read Committed,
// returns the row's latest committed version even if it changed after the
// statement's snapshot. The UPDATE's guard is evaluated on cur's values,
// and since the row stays locked until the transaction ends, the row we
// classify is the row the guard saw: a 0-row outcome is explained by the
// very version that caused it (race-free, one statement, one round trip —
// so it pipelines). The UPDATE itself may scan an older version;
// PostgreSQL then re-applies it to the latest (locked) version
// (EvalPlanQual). The guard deliberately tests c.* rather than o.*: o's
// values come from the statement's snapshot, which may predate the lock,
// while c's come from the locked latest version. Without the lock in cur,
// concurrent callers would each pass the guard on stale values —
// TestTransitionConcurrentCancelsClassifiedOnce catches that. The payment
// statement locks the order the same way.
//
// The Citus statements (create_order_routed, create_item,
// payment_lock_order, payment_insert, payment_mark_paid) are plain
// statements, each a shape Citus routes whole to the one node that holds
// the schema: a statement whose data-modifying CTEs feed one another is
// split by Citus into subplans whose results it ships between nodes, and
// the transaction then commits with two phases. (An INSERT … SELECT from
// orders, which would keep one round trip, is planned by Citus 13.2 for a
// schema's tables ("single-shard" tables) into an invalid statement: the
// worker reports a syntax error at "( IS NOT NULL)".)

//go:embed sql/*.sql
var sqlFiles embed.FS

// statements are the package's named statements, parsed (and checked) at
// initialisation.
var statements = sqlfile.MustParse(sqlFiles, "sql")
