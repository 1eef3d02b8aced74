package order

import (
	"cmp"
	"context"
	"embed"

	"github.com/seckillkit/seckill/internal/failure"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
)

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// Migrations is the order package's migration component (tables orders,
// order_items, payment_record, payment_review; function order_refuse). Pass it to [migrate.Apply] together with the
// components of other packages to migrate them in one transaction.
var Migrations = migrate.Embedded("order", migrationFiles, "migrations")

// Config configures a [Store]. The zero value is valid.
type Config struct {
	// Schema holding the order tables. Defaults to "seckill". Validated
	// with [migrate.QuoteSchema].
	Schema string
	// DefaultCurrency, when set, is used for a NewOrder or Payment whose
	// Currency is empty: three upper-case ASCII letters (ISO 4217). Empty
	// (the default) means no default: every NewOrder and Payment names its
	// currency. The library never picks a currency for a service.
	DefaultCurrency string
	// Citus makes [Store.Create] and [Store.RecordPayment] send statements
	// that Citus routes whole to the one node holding the schema
	// (schema-based sharding), in two round trips each: Create inserts the
	// order, then its item (or classifies the conflict); RecordPayment
	// locks and reads the order, then inserts the payment and makes the
	// order PAID. Without it each is one statement, one round trip, whose
	// data-modifying CTEs feed one another: Citus splits such a statement
	// into subplans that touch every worker, so the transaction commits
	// with two phases. Results and errors are the same either way. Leave
	// it off on plain PostgreSQL. The queued forms ([Store.QueueCreate],
	// [Store.QueueRecordPayment]) always queue the one statement, except
	// [Store.QueueCreate] with pgtx.Abort, whose two plain statements are
	// routed whole either way.
	Citus bool
}

// Store runs the order package's SQL against one schema. All SQL is built
// once by New; a Store is immutable and safe for concurrent use.
type Store struct {
	schema   string
	currency string
	citus    bool
	sql      stmts
	fail     *failure.Classifier
}

// New validates cfg and builds the Store's SQL. An invalid schema returns a
// *migrate.Error; an invalid currency an *Error matching
// [ErrInvalidArgument].
func New(cfg Config) (*Store, error) {
	quoted, err := migrate.QuoteSchema(cfg.Schema)
	if err != nil {
		return nil, err
	}
	cur := cfg.DefaultCurrency
	if cur != "" && !validCurrency(cur) {
		return nil, invalid("Config.DefaultCurrency", "must be three upper-case ASCII letters")
	}
	schema := cmp.Or(cfg.Schema, migrate.DefaultSchema)
	return &Store{
		schema:   schema,
		currency: cur,
		citus:    cfg.Citus,
		sql:      buildStatements(quoted),
		fail: &failure.Classifier{Schema: schema, Component: "order", Codes: refusals,
			Objects: []string{"orders", "order_items", "payment_record", "payment_review", "order_refuse"}, Constraints: map[string]error{
				"uq_orders_user_sku":       ErrUserAlreadyOrdered,
				"orders_pkey":              ErrIDCollision,
				"uq_orders_order_no":       ErrIDCollision,
				"uq_orders_request":        ErrConflict,
				"uq_orders_reservation":    ErrConflict,
				"uq_orders_source_message": ErrConflict,
			}},
	}, nil
}

// refusals maps the SQLSTATEs order_refuse raises (migration 003) for the
// queued forms with pgtx.Abort to their sentinels.
var refusals = map[string]error{
	"SK101": ErrNotFound,
	"SK102": ErrIllegalTransition,
	"SK103": ErrNotExpired,
	"SK104": ErrMismatch,
	"SK105": ErrMismatch,
	"SK106": ErrConflict,
}

// Check verifies, once at startup, that the Store fits the database db: that
// its schema has the order tables (else a *migrate.NotMigratedError,
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
	return s.fail.Check(ctx, db, "orders", s.citus)
}

func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}

// stmts holds every SQL text of a Store, with the schema substituted.
type stmts struct {
	create, classifyCreate        string
	transition, transitionOrAbort string
	payment, paymentOrAbort       string
	classifyPayment               string
	dueForExpiry, cancelExpired   string
	getByID, getByRequest         string
	getByBuyer                    string
	items, payments               string
	audit, auditSince             string
	quantitiesByStatus            string
	recordReview, openReviews     string
	resolveReview                 string

	insertOrderOrAbort, insertItemOrAbort string

	lockForPayment, insertPayment, paidByPayment string
	insertOrderRouted                            string
}

func buildStatements(quoted string) stmts {
	q := statements.Bind(quoted)
	return stmts{
		create:         q.Get("create"),
		classifyCreate: q.Get("create_classify"),
		transition:     q.Get("transition"),
		payment:        q.Get("payment"),

		transitionOrAbort: q.Get("transition_abort"),
		paymentOrAbort:    q.Get("payment_abort"),

		classifyPayment: q.Get("payment_classify"),
		dueForExpiry:    q.Get("due_for_expiry"),
		cancelExpired:   q.Get("cancel_expired"),
		getByID:         q.Get("get_by_id"),
		getByRequest:    q.Get("get_by_request"),
		getByBuyer:      q.Get("get_by_buyer"),
		items:           q.Get("items"),
		payments:        q.Get("payments"),
		audit:           q.Get("audit"),
		auditSince:      q.Get("audit_since"),

		quantitiesByStatus: q.Get("quantities_by_status"),
		recordReview:       q.Get("record_review"),
		openReviews:        q.Get("open_reviews"),
		resolveReview:      q.Get("resolve_review"),

		insertOrderOrAbort: q.Get("create_order_abort"),
		insertItemOrAbort:  q.Get("create_item"),

		lockForPayment: q.Get("payment_lock_order"),
		insertPayment:  q.Get("payment_insert"),
		paidByPayment:  q.Get("payment_mark_paid"),

		insertOrderRouted: q.Get("create_order_routed"),
	}
}
