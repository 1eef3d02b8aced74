package inventory

import (
	"cmp"
	"context"
	"embed"
	"log/slog"

	"github.com/seckillkit/seckill/internal/failure"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
)

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// Migrations is the inventory component for [migrate.Apply]: the tables
// inventory_sku, sku_inventory, inventory_reservation and inventory_ledger.
var Migrations = migrate.Embedded("inventory", migrationFiles, "migrations")

// Config configures a [Store]. The zero value is valid.
type Config struct {
	// Schema is the schema holding the inventory tables. Defaults to
	// "seckill" ([migrate.DefaultSchema]). It must pass
	// [migrate.ValidateSchema].
	Schema string
	// Logger receives the few events worth logging (provisioning,
	// rebalance moves) at Info level. Defaults to a logger that discards.
	Logger *slog.Logger
	// Observer receives the classified result of every allocation and
	// release, once per execution (per attempt, inside the open
	// transaction: see [Observer]). Defaults to none (the zero Observer;
	// a nil hook does nothing).
	Observer Observer
	// Citus makes [Store.AcquireReservation] and [Store.AllocateBucket]
	// (and their Queue forms) send statements that Citus (schema-based
	// sharding) routes whole to the node holding the schema: each becomes
	// two statements sent together as one batch, still one round trip;
	// [Store.ReleaseStock] takes two round trips of such statements.
	// The default statements put an INSERT in a CTE that feeds the rest,
	// which Citus runs as a subplan whose result it ships to every worker,
	// so the transaction commits with two phases. It also makes
	// [Store.QueueAllocateBucket] with [pgtx.Abort] insert the ledger row before the
	// decrement, with INSERT … VALUES, instead of after it with an INSERT
	// … SELECT from the bucket, which Citus pulls through the coordinator.
	// On plain PostgreSQL both work; leave it off there: the defaults send
	// fewer statements and write the ledger row once.
	Citus bool
}

// Store runs the inventory statements against one schema. Its SQL is built
// once by [New]; a Store is safe for concurrent use and holds no
// connection: every method takes the handle to run on.
type Store struct {
	schema   string
	log      *slog.Logger
	observer Observer
	citus    bool
	sql      statements
	fail     *failure.Classifier
}

// New validates cfg and returns a Store. An invalid schema name gives a
// *migrate.Error (matching [migrate.ErrInvalidSchema]).
func New(cfg Config) (*Store, error) {
	schema := cmp.Or(cfg.Schema, migrate.DefaultSchema)
	quoted, err := migrate.QuoteSchema(schema)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{schema: schema, log: log, observer: cfg.Observer, citus: cfg.Citus, sql: buildStatements(quoted),
		fail: abortClassifier(schema)}, nil
}

// Check verifies, once at startup, that the Store fits the database db: that
// its schema has the inventory tables, the newest migration's included
// (else a *migrate.NotMigratedError,
// matching migrate.ErrNotMigrated, naming the schema and the fix,
// migrate.Apply), and that Config.Citus fits the server (else a
// *migrate.CitusMismatchError, matching migrate.ErrCitusMismatch): on a
// Citus coordinator whose schema is distributed the option must be set,
// and on a server without Citus, or for tables Citus does not distribute,
// it must not be. Without the check a store pointed at the wrong schema
// fails at its first call with the same *migrate.NotMigratedError, and a
// mismatched option goes unnoticed: the statements work, but on Citus
// without the option its transactions commit with two phases. It reads
// the catalog (two queries) and writes nothing.
func (s *Store) Check(ctx context.Context, db pgtx.Querier) error {
	if db == nil {
		return nilHandle("db")
	}
	// The newest migration's table: a schema migrated by an older release
	// is not migrated for this one.
	return s.fail.Check(ctx, db, "inventory_token", s.citus)
}

// The statements of Config.Citus. The default AcquireReservation,
// AllocateBucket and ReleaseStock are one statement each, an INSERT in a
// CTE whose result feeds the rest: Citus (schema-based sharding) does not
// route such a statement to the node that holds the schema but runs the
// INSERT as a subplan and ships its result to every worker, and the
// transaction then commits with two phases. With Config.Citus each is made
// of statements of shapes Citus routes whole (a plain INSERT … VALUES …
// ON CONFLICT DO NOTHING; SELECTs, UPDATEs and DELETEs in CTEs read by a
// SELECT): two sent together as one batch, still one round trip (the
// release reads its ALLOCATE row first, in a round trip of its own).

// The statements of a transaction sent as one batch (pgtx.RunBatch): every
// condition that must stop the transaction raises an error, which makes the
// server skip the rest of the batch, COMMIT included. Each is a plain
// INSERT … VALUES, or UPDATEs in CTEs read by a SELECT: shapes Citus routes
// whole to the one node that holds the schema. None is an INSERT fed by a
// query or by another write's RETURNING, which Citus splits into subplans
// or pulls through the coordinator, and then commits with two phases.

// statements holds every SQL text of the package with the schema
// substituted. Only the quoted, validated schema name is ever substituted.
type statements struct {
	provision, allocate, release                 string
	acquire, transition, getReservation          string
	lockBuckets, applyMoves                      string
	bucket, stock, ledgerByReservation, audit    string
	setSale, saleLog, expire, recordCompensation string
	adjust, adjustments, ledgerByType            string

	insertReservationOrAbort, decrementOrAbort, allocationLedger, allocationLedgerReturning string
	insertRejectedOrAbort, soldOutOrAbort, soldOutCode                                      string
	insertReservationOrAbortReturning, insertRejectedOrAbortReturning, transitionOrAbort    string
	releaseLedger, releaseLedgerReturning, releaseOrAbort                                   string

	acquireInsert, acquireExisting, allocationPlaceholder, allocateRouted, availableNow string
	allocationOf, releasePlaceholder, releaseRouted                                     string

	decrementThenRaise, allocationLedgerFromBucket, allocationLedgerFromBucketReturning string

	checkpointCandidate, checkpointPending, checkpointAdvance, auditIncremental string
}

func buildStatements(quotedSchema string) statements {
	q := sqlFiles.Bind(quotedSchema)
	return statements{
		provision:                           q.Get("provision"),
		allocate:                            q.Get("allocate"),
		release:                             q.Get("release"),
		acquire:                             q.Get("acquire"),
		transition:                          q.Get("transition"),
		getReservation:                      q.Get("get_reservation"),
		lockBuckets:                         q.Get("lock_buckets"),
		applyMoves:                          q.Get("apply_moves"),
		bucket:                              q.Get("bucket"),
		stock:                               q.Get("stock"),
		ledgerByReservation:                 q.Get("ledger_by_reservation"),
		audit:                               q.Get("audit"),
		auditIncremental:                    q.Get("audit_incremental"),
		checkpointCandidate:                 q.Get("checkpoint_candidate"),
		checkpointPending:                   q.Get("checkpoint_pending"),
		checkpointAdvance:                   q.Get("checkpoint_advance"),
		setSale:                             q.Get("set_sale"),
		saleLog:                             q.Get("sale_log"),
		expire:                              q.Get("expire"),
		recordCompensation:                  q.Get("record_compensation"),
		adjust:                              q.Get("adjust"),
		adjustments:                         q.Get("adjustments"),
		ledgerByType:                        q.Get("ledger_by_type"),
		insertReservationOrAbort:            q.Get("insert_reservation_abort"),
		decrementOrAbort:                    q.Get("decrement_abort"),
		allocationLedger:                    q.Get("allocation_ledger"),
		allocationLedgerReturning:           q.Get("allocation_ledger_returning"),
		insertRejectedOrAbort:               q.Get("insert_rejected_abort"),
		insertReservationOrAbortReturning:   q.Get("insert_reservation_abort_returning"),
		insertRejectedOrAbortReturning:      q.Get("insert_rejected_abort_returning"),
		transitionOrAbort:                   q.Get("transition_abort"),
		soldOutOrAbort:                      q.Get("sold_out_abort"),
		soldOutCode:                         q.Get("sold_out_code"),
		releaseLedger:                       q.Get("release_ledger"),
		releaseLedgerReturning:              q.Get("release_ledger_returning"),
		releaseOrAbort:                      q.Get("release_abort"),
		acquireInsert:                       q.Get("acquire_insert"),
		acquireExisting:                     q.Get("acquire_existing"),
		allocationPlaceholder:               q.Get("allocation_placeholder"),
		allocateRouted:                      q.Get("allocate_routed"),
		availableNow:                        q.Get("available_now"),
		allocationOf:                        q.Get("allocation_of"),
		releasePlaceholder:                  q.Get("release_placeholder"),
		releaseRouted:                       q.Get("release_routed"),
		decrementThenRaise:                  q.Get("decrement_then_raise"),
		allocationLedgerFromBucket:          q.Get("allocation_ledger_from_bucket"),
		allocationLedgerFromBucketReturning: q.Get("allocation_ledger_from_bucket_returning"),
	}
}
