package inventory

import (
	"cmp"
	"context"
	"embed"
	"log/slog"
	"strings"

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
// its schema has the inventory tables (else a *migrate.NotMigratedError,
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
	return s.fail.Check(ctx, db, "inventory_ledger", s.citus)
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
}

func buildStatements(quotedSchema string) statements {
	r := strings.NewReplacer("{schema}", quotedSchema)
	return statements{
		provision:           r.Replace(provisionSQL),
		allocate:            r.Replace(allocateSQL),
		release:             r.Replace(releaseSQL),
		acquire:             r.Replace(acquireSQL),
		transition:          r.Replace(transitionSQL),
		getReservation:      r.Replace(getReservationSQL),
		lockBuckets:         r.Replace(lockBucketsSQL),
		applyMoves:          r.Replace(applyMovesSQL),
		bucket:              r.Replace(bucketSQL),
		stock:               r.Replace(stockSQL),
		ledgerByReservation: r.Replace(ledgerByReservationSQL),
		audit:               r.Replace(auditSQL),
		setSale:             r.Replace(setSaleSQL),
		saleLog:             r.Replace(saleLogSQL),
		expire:              r.Replace(expireSQL),
		recordCompensation:  r.Replace(recordCompensationSQL),
		adjust:              r.Replace(adjustSQL),
		adjustments:         r.Replace(adjustmentsSQL),
		ledgerByType:        r.Replace(ledgerByTypeSQL),

		insertReservationOrAbort:  r.Replace(insertReservationOrAbortSQL),
		decrementOrAbort:          r.Replace(decrementOrAbortSQL),
		allocationLedger:          r.Replace(allocationLedgerSQL),
		allocationLedgerReturning: r.Replace(allocationLedgerSQL + "\nRETURNING ledger_id, created_at"),
		insertRejectedOrAbort:     r.Replace(insertRejectedOrAbortSQL),

		insertReservationOrAbortReturning: r.Replace(insertReservationOrAbortSQL + returningReservation),
		insertRejectedOrAbortReturning:    r.Replace(insertRejectedOrAbortSQL + returningReservation),
		transitionOrAbort:                 r.Replace(transitionOrAbortSQL),
		soldOutOrAbort:                    r.Replace(soldOutOrAbortSQL),
		soldOutCode:                       r.Replace(soldOutCodeSQL),
		releaseLedger:                     r.Replace(releaseLedgerSQL),
		releaseLedgerReturning:            r.Replace(releaseLedgerSQL + "\nRETURNING ledger_id, created_at"),
		releaseOrAbort:                    r.Replace(releaseOrAbortSQL),

		acquireInsert:         r.Replace(acquireInsertSQL),
		acquireExisting:       r.Replace(acquireExistingSQL),
		allocationPlaceholder: r.Replace(allocationPlaceholderSQL),
		allocateRouted:        r.Replace(allocateRoutedSQL),
		availableNow:          r.Replace(availableNowSQL),
		allocationOf:          r.Replace(allocationOfSQL),
		releasePlaceholder:    r.Replace(releasePlaceholderSQL),
		releaseRouted:         r.Replace(releaseRoutedSQL),

		decrementThenRaise:                  r.Replace(decrementThenRaiseSQL),
		allocationLedgerFromBucket:          r.Replace(allocationLedgerFromBucketSQL),
		allocationLedgerFromBucketReturning: r.Replace(allocationLedgerFromBucketSQL + "\nRETURNING ledger_id, created_at, before_available, after_available, before_allocated, after_allocated"),
	}
}
