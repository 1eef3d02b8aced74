package inbox

import (
	"context"
	"embed"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/internal/enum"
	"github.com/seckillkit/seckill/internal/failure"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
)

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// Migrations is the inbox component for [migrate.Apply]: the DDL of the
// consumer_inbox table (and consumer_inbox_history). Apply it alone or with
// the other packages' components, e.g.
// migrate.Apply(ctx, db, "seckill", inbox.Migrations); it is idempotent and
// safe to run concurrently.
var Migrations = migrate.Embedded("inbox", migrationFiles, "migrations")

// Config configures a [Store]. The zero value is valid.
type Config struct {
	// Schema is the schema that holds consumer_inbox. Defaults to
	// "seckill". It is validated with [migrate.QuoteSchema].
	Schema string
	// Citus makes the claim ([Store.ClaimMessage] and its variants) send
	// statements that Citus (schema-based sharding) routes whole to the
	// node holding the schema: a plain INSERT … ON CONFLICT DO NOTHING,
	// and the look-up of the stored row, sent together as one batch (one
	// round trip). The default claim is one statement whose INSERT sits in
	// a CTE, which Citus does not route: it runs the CTE as a subplan and
	// ships its result to every worker, so the transaction commits with
	// two phases. On plain PostgreSQL both work; the default saves the
	// look-up statement.
	Citus bool
	// MinRetention is the youngest horizon [Store.Purge] and
	// [Store.Archive] accept: a row must stay in consumer_inbox at least
	// this long after it was processed, because a message redelivered
	// after its row left is processed again. Set it to the broker's
	// replay window (for JetStream: the stream's MaxAge, or at least its
	// duplicate window and the longest redelivery) plus the time a
	// compensation or a manual repair may take to resend. A call with a
	// younger horizon fails with a *[Error] and writes nothing.
	// Defaults to 0: no guard. Negative is rejected by [New].
	MinRetention time.Duration
}

// Store runs the statements on consumer_inbox in one schema. It holds no
// connection and no mutable state: it is safe for concurrent use and cheap
// to keep for the life of the process.
type Store struct {
	schema       string
	citus        bool
	minRetention time.Duration
	sql          stmts
	fail         *failure.Classifier
}

// New validates cfg and builds every SQL statement once. An invalid schema
// name returns a *migrate.Error (matching migrate.ErrInvalidSchema).
func New(cfg Config) (*Store, error) {
	quoted, err := migrate.QuoteSchema(cfg.Schema)
	if err != nil {
		return nil, err
	}
	schema := cfg.Schema
	if schema == "" {
		schema = migrate.DefaultSchema
	}
	if cfg.MinRetention < 0 {
		return nil, invalid("Config.MinRetention", "negative ("+cfg.MinRetention.String()+")")
	}
	return &Store{schema: schema, citus: cfg.Citus, minRetention: cfg.MinRetention, sql: buildStatements(quoted),
		fail: &failure.Classifier{Schema: schema, Component: "inbox", Objects: []string{"consumer_inbox", "consumer_inbox_history"},
			Constraints: map[string]error{constraintClaimed: ErrDuplicate}}}, nil
}

// Schema returns the (unquoted) schema the Store works in.
func (in *Store) Schema() string { return in.schema }

// Check verifies, once at startup, that the Store fits the database db: that
// its schema has the inbox tables (else a *migrate.NotMigratedError,
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
func (in *Store) Check(ctx context.Context, db pgtx.Querier) error {
	if db == nil {
		return nilHandle("db")
	}
	return in.fail.Check(ctx, db, "consumer_inbox", in.citus)
}

// Status is the state of a committed inbox row. Its values mirror the
// CHECK constraint ck_inbox_status of consumer_inbox.
type Status int16

const (
	// StatusClaimed (10): the processing transaction committed without
	// recording a result (it never called [Store.Complete]).
	StatusClaimed Status = 10
	// StatusProcessed (20): the processing transaction recorded a result
	// code (and optionally a result payload).
	StatusProcessed Status = 20
)

// String returns the status name, e.g. "PROCESSED", or "Status(n)" for a
// value the package does not know.
func (s Status) String() string { return statusSet.Name(s) }

var statusSet = enum.New("Status", map[Status]string{StatusClaimed: "CLAIMED", StatusProcessed: "PROCESSED"})

// Key identifies one inbox row: a message as seen by one consumer group.
// Two groups consuming the same message are independent.
type Key struct {
	// Group is the consumer group, 1 to 128 characters.
	Group string
	// MessageID is the broker-independent message id; not the zero UUID.
	MessageID uuid.UUID
}

// Message describes a message being claimed. Group, MessageID and Topic
// are required; the rest is optional metadata stored with the row.
type Message struct {
	// Group is the consumer group, 1 to 128 characters.
	Group string
	// MessageID identifies the message across redeliveries; not the zero
	// UUID. A producer that re-sends with a new id defeats the inbox:
	// business unique keys must catch that case.
	MessageID uuid.UUID
	// Topic is the topic the message came from, 1 to 128 characters.
	Topic string
	// Tag is the broker tag, at most 64 characters; "" stores NULL.
	Tag string
	// MessageKey is the broker message key, at most 160 characters; ""
	// stores NULL.
	MessageKey string
	// Ref is a business reference to find messages by (indexed with
	// processed_at), at most 160 characters; "" stores NULL.
	Ref string
	// PayloadHash is a digest of the message body (see [HashPayload]), 1 to
	// 64 bytes, or nil for none. A redelivery whose hash differs from the
	// stored one fails with a *[Error]; nil and non-nil differ.
	PayloadHash []byte
	// Result, when not nil, is the result of a consumer that knows it
	// before claiming: a fresh claim stores the row as PROCESSED with it at
	// once, saving [Store.Complete]'s UPDATE (and the dead row version it
	// leaves). Duplicates behave the same either way; Result is not stored
	// for them. Nil: the row is stored CLAIMED, for Complete to finish.
	Result *Result
}

// Key returns the message's inbox key.
func (m Message) Key() Key { return Key{Group: m.Group, MessageID: m.MessageID} }

// Result is what a consumer did with a message, stored with the row and
// handed to every duplicate delivery.
type Result struct {
	// Code is a short outcome, e.g. "ORDER_CREATED" or "SOLD_OUT": 1 to 64
	// characters.
	Code string
	// Payload is optional JSON (stored as jsonb, so key order and spacing
	// are normalised); nil stores NULL. At most 1 MiB.
	Payload json.RawMessage
}

// maxResultPayloadBytes bounds Result.Payload, so that a runaway result
// cannot bloat a table that every message of the group touches.
const maxResultPayloadBytes = 1 << 20

// Record is a committed (or, inside the claiming transaction, pending)
// inbox row.
type Record struct {
	// Key identifies the row.
	Key Key
	// Status is StatusClaimed or StatusProcessed.
	Status Status
	// Result is the recorded result; zero while Status is StatusClaimed.
	Result Result
	// PayloadHash is the hash stored by the first processing, nil if none.
	PayloadHash []byte
	// CreatedAt is when the message was claimed (statement time).
	CreatedAt time.Time
	// ProcessedAt is when the result was recorded; CreatedAt if never.
	ProcessedAt time.Time
}

// Claim is the outcome of [Store.ClaimMessage].
type Claim struct {
	// Fresh is true when this transaction inserted the row and so owns the
	// message: do the work, record the result, commit, then ack. The row
	// disappears if the transaction rolls back.
	//
	// Fresh is false for a duplicate: an earlier transaction (or an earlier
	// claim in this one) processed the message, Record holds what it
	// stored; do not repeat the work, ack the message.
	Fresh bool
	// Record is the row: the one just inserted when Fresh, else the stored
	// one.
	Record Record
}

// stmts holds the SQL of one schema, bound once by New.
type stmts struct {
	claim, lookup, complete, purge string
	claimOrAbort, claimInsert      string
	archive                        string
}

func buildStatements(quoted string) stmts {
	q := statements.Bind(quoted)
	return stmts{
		claim:    q.Get("claim"),
		lookup:   q.Get("lookup"),
		complete: q.Get("complete"),
		purge:    q.Get("purge"),
		archive:  q.Get("archive"),

		claimOrAbort: q.Get("claim_abort"),
		claimInsert:  q.Get("claim_insert"),
	}
}
