package outbox

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"hash/fnv"

	"github.com/seckillkit/seckill/internal/failure"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
)

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// Migrations is the outbox's migration component (the event_outbox table
// and event_outbox_history). Apply it alone or with the other packages'
// components: migrate.Apply(ctx, db, "seckill", outbox.Migrations); it is
// idempotent and safe from several processes at once. The files are plain DDL with unqualified names, usable by
// goose or golang-migrate after SET search_path.
var Migrations = migrate.Embedded("outbox", migrationFiles, "migrations")

// Defaults of [Config].
const (
	defaultMaxRetries      = 16
	defaultMaxPayloadBytes = 1 << 20
)

// Column limits of event_outbox, in characters (VARCHAR(n)), and the byte
// limit of last_error.
const (
	maxDedupKeyLen      = 160
	maxAggregateTypeLen = 64
	maxAggregateIDLen   = 128
	maxTopicLen         = 128
	maxTagLen           = 64
	maxMessageKeyLen    = 160
	maxOrderingKeyLen   = 160
	maxOwnerLen         = 128
	maxLastErrorBytes   = 4000
)

// Config configures a [Store]. The zero value is valid and means defaults.
type Config struct {
	// Schema holds event_outbox. Defaults to "seckill". Validated with
	// [migrate.QuoteSchema]; an invalid name fails [New] with a
	// *migrate.Error.
	Schema string

	// Notify makes Enqueue send a NOTIFY: every Enqueue
	// statement that inserted at least one row calls pg_notify once (not
	// once per row) on the channel "seckill_outbox_<schema>" (the schema name is hashed
	// when that would exceed 63 bytes), so a
	// listening [Relay] wakes up at once instead of at its next poll.
	// Defaults to false. The trade-off: PostgreSQL delivers a NOTIFY at
	// COMMIT, and every committing transaction that notified takes one
	// global lock on the notification queue, held across its commit's WAL
	// flush, so notifying commits run one at a time — on an order path that
	// is a cap on orders per second for the whole database. Without it a
	// relay finds new events by polling, within RelayConfig.PollInterval
	// (100ms by default) when idle, at once when busy.
	Notify bool

	// DeadBlocksKey makes a DEAD event block the later events of its
	// ordering key until an operator deals with it — deletes the row, or
	// sets it back to PENDING with retry_count 0 — (strict ordering).
	// Defaults to false: DEAD counts as finished, later events of the key
	// flow (a poison event costs its own delivery only).
	DeadBlocksKey bool

	// DefaultMaxRetries is the number of publish attempts of an event whose
	// Event.MaxRetries is 0. Defaults to 16 (the table's default).
	DefaultMaxRetries int

	// MaxPayloadBytes bounds Event.Payload. Defaults to 1 MiB.
	MaxPayloadBytes int

	// Citus makes Enqueue of several events (and QueueEnqueue, and of one
	// event with an ordering key or from a Store with Notify) send
	// statements that Citus (schema-based sharding) routes whole to the
	// node holding the schema: one plain INSERT … VALUES per event, after
	// the advisory locks of the ordering keys (a statement of their own,
	// run on the coordinator) and before the read of the dedup keys'
	// holders, all in one batch, one round trip. The default is one
	// INSERT … SELECT from arrays in a data-modifying CTE, which Citus
	// splits into subplans, and the transaction then commits with two
	// phases. With Notify, the NOTIFY is then sent whether or not an event
	// was new. (One event without an ordering key and without Notify is a
	// plain INSERT either way.) On plain PostgreSQL both work; leave it
	// off there: one statement for many events is cheaper.
	Citus bool
}

// Store runs the outbox statements against one schema. It holds only the
// SQL it built at construction and is safe for concurrent use.
type Store struct {
	cfg     Config
	schema  string // unquoted
	channel string

	enqueueSQL       string
	enqueueOneNotify string
	enqueueInsert    string
	enqueueHolders   string
	enqueueOrAbort   string // QueueEnqueue with pgtx.Abort
	// The ordering keys' advisory locks of the enqueue of Config.Citus,
	// and the NOTIFY of a statement that cannot tell whether it inserted.
	enqueueLocks, enqueueNotify string
	claimSQL                    string
	// claimAfterSQL is claimSQL from a cursor on (relays only).
	claimAfterSQL string
	// lockSQL and lockAfterSQL are the claim of a relay in InTx mode:
	// the same candidates, locked, not updated.
	lockSQL, lockAfterSQL string
	// sentTxSQL and failTxSQL mark events the transaction holds locked.
	sentTxSQL, failTxSQL string
	sentSQL              string
	releaseSQL           string
	failSQL              string
	recoverSQL           string
	recoverSpec          string
	statsSQL             string
	backlogSQL           string
	purgeSQL             string
	archiveSentSQL       string

	eventsByStatusSQL string

	fail *failure.Classifier
}

// New validates cfg and builds the SQL for its schema. It talks to no
// database.
func New(cfg Config) (*Store, error) {
	cfg.Schema = cmp.Or(cfg.Schema, migrate.DefaultSchema)
	quoted, err := migrate.QuoteSchema(cfg.Schema)
	if err != nil {
		return nil, err
	}
	if cfg.DefaultMaxRetries < 0 {
		return nil, invalid("Config.DefaultMaxRetries", "negative (%d)", cfg.DefaultMaxRetries)
	}
	if cfg.MaxPayloadBytes < 0 {
		return nil, invalid("Config.MaxPayloadBytes", "negative (%d)", cfg.MaxPayloadBytes)
	}
	cfg.DefaultMaxRetries = cmp.Or(cfg.DefaultMaxRetries, defaultMaxRetries)
	cfg.MaxPayloadBytes = cmp.Or(cfg.MaxPayloadBytes, defaultMaxPayloadBytes)

	s := &Store{cfg: cfg, schema: cfg.Schema, channel: channelName(cfg.Schema),
		fail: &failure.Classifier{Schema: cfg.Schema, Component: "outbox", Objects: []string{"event_outbox", "event_outbox_history"},
			Constraints: map[string]error{"uq_outbox_dedup": ErrDuplicate}}}
	q := statements.Bind(quoted)
	if cfg.notify() {
		s.enqueueSQL = q.Get("enqueue_notify")
		s.enqueueOneNotify = q.Get("enqueue_one_notify")
	} else {
		s.enqueueSQL = q.Get("enqueue")
	}
	s.enqueueInsert = q.Get("enqueue_insert")
	s.enqueueLocks = q.Get("enqueue_locks")
	s.enqueueNotify = q.Get("enqueue_send_notify")
	s.enqueueHolders = q.Get("enqueue_holders")
	s.enqueueOrAbort = q.Get("enqueue_abort")
	if cfg.DeadBlocksKey {
		s.claimSQL = q.Get("claim_dead_blocks_key")
		s.claimAfterSQL = q.Get("claim_after_dead_blocks_key")
		s.lockSQL = q.Get("lock_dead_blocks_key")
		s.lockAfterSQL = q.Get("lock_after_dead_blocks_key")
	} else {
		s.claimSQL = q.Get("claim")
		s.claimAfterSQL = q.Get("claim_after")
		s.lockSQL = q.Get("lock")
		s.lockAfterSQL = q.Get("lock_after")
	}
	s.sentTxSQL = q.Get("mark_sent_locked")
	s.failTxSQL = q.Get("mark_failed_locked")
	s.sentSQL = q.Get("mark_sent")
	s.releaseSQL = q.Get("release")
	s.failSQL = q.Get("mark_failed")
	s.recoverSQL = q.Get("recover")
	s.recoverSpec = q.Get("recover_lease")
	s.statsSQL = q.Get("stats")
	s.backlogSQL = q.Get("backlog")
	s.purgeSQL = q.Get("purge")
	s.archiveSentSQL = q.Get("archive_sent")
	s.eventsByStatusSQL = q.Get("events_by_status")
	return s, nil
}

// Schema returns the (unquoted) schema the store works in.
func (s *Store) Schema() string { return s.schema }

// Check verifies, once at startup, that the Store fits the database db: that
// its schema has the outbox tables (else a *migrate.NotMigratedError,
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
	return s.fail.Check(ctx, db, "event_outbox", s.cfg.Citus)
}

// notify reports whether Enqueue sends a NOTIFY.
func (c Config) notify() bool { return c.Notify }

// channelName is the LISTEN/NOTIFY channel of schema's outbox:
// "seckill_outbox_<schema>", or a hash of the schema name when that would
// exceed PostgreSQL's 63-byte identifier limit.
func channelName(schema string) string {
	const prefix = "seckill_outbox_"
	if len(prefix)+len(schema) <= migrate.MaxIdentifierLength {
		return prefix + schema
	}
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("%s%016x", prefix, h.Sum64())
}
