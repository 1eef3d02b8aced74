package outbox

import "time"

// SetIdleHook installs f, called each time the relay goes idle (a claim
// found nothing) with whether its LISTEN connection is up. Tests use it as a
// signal instead of sleeping. Call before Run.
func SetIdleHook(r *Relay, f func(listening bool)) { r.onIdle = f }

// ClaimSQL returns the claim statement (for EXPLAIN in tests).
func ClaimSQL(s *Store) string { return s.claimSQL }

// MarkSentSQL returns the mark-sent statement (for EXPLAIN in tests).
func MarkSentSQL(s *Store) string { return s.sentSQL }

// MigrationFiles are the embedded migration files.
var MigrationFiles = migrationFiles

// StatsSQL returns the stats statement (for EXPLAIN in tests).
func StatsSQL(s *Store) string { return s.statsSQL }

func BacklogSQL(s *Store) string { return s.backlogSQL }

// DisableClaimCursor makes every claim of r start from the head of
// idx_outbox_ready (the claim before the cursor), for side-by-side
// benchmarks. Call before Run.
func DisableClaimCursor(r *Relay) { r.noCursor = true }

// ClaimAfterSQL returns the claim statement that starts after a cursor
// (for EXPLAIN in tests).
func ClaimAfterSQL(s *Store) string { return s.claimAfterSQL }

// The package's limits and defaults, unexported since v1, named for the
// tests.
const (
	DefaultArchiveBatchSize = defaultArchiveBatchSize
	MaxArchiveBatchSize     = maxArchiveBatchSize
	DefaultBatchSize        = defaultBatchSize
	DefaultPollInterval     = defaultPollInterval
	DefaultMaxPollInterval  = defaultMaxPollInterval
	DefaultLease            = defaultLease
	DefaultShutdownTimeout  = defaultShutdownTimeout
	DefaultMaxRetries       = defaultMaxRetries
	DefaultMaxPayloadBytes  = defaultMaxPayloadBytes
	MaxDedupKeyLen          = maxDedupKeyLen
	MaxAggregateTypeLen     = maxAggregateTypeLen
	MaxAggregateIDLen       = maxAggregateIDLen
	MaxTopicLen             = maxTopicLen
	MaxTagLen               = maxTagLen
	MaxMessageKeyLen        = maxMessageKeyLen
	MaxOrderingKeyLen       = maxOrderingKeyLen
	MaxOwnerLen             = maxOwnerLen
	MaxLastErrorBytes       = maxLastErrorBytes
	StatsExactSentPages     = statsExactSentPages
)

// DefaultBackoff is the relay's default RelayConfig.Backoff.
var DefaultBackoff = defaultBackoff

// TruncateError is what Mark records of a failure's error in last_error.
var TruncateError = truncateError

// Statuses returns the known statuses in code order.
func Statuses() []Status { return statusSet.Values() }

// Valid reports whether s is a known status.
func (s Status) Valid() bool { return statusSet.Valid(s) }

// Channel returns the LISTEN/NOTIFY channel of s's schema.
func Channel(s *Store) string { return s.channel }

// Owner returns r's owner id (locked_by of its claims).
func Owner(r *Relay) string { return r.cfg.Owner }

// LockAfterSQL returns the InTx relay's claim statement that starts after
// a cursor (for tests of its guards).
func LockAfterSQL(s *Store) string { return s.lockAfterSQL }

// EnqueueSQL returns the enqueue statement of several events (for EXPLAIN
// in tests).
func EnqueueSQL(s *Store) string { return s.enqueueSQL }

// EnqueueOneSQL returns the enqueue statement of one event of a Store with
// Config.Notify (for EXPLAIN in tests).
func EnqueueOneSQL(s *Store) string { return s.enqueueOneNotify }

// EnqueueHoldersSQL returns the read of the dedup keys' holders (for
// EXPLAIN in tests).
func EnqueueHoldersSQL(s *Store) string { return s.enqueueHolders }

// CursorCompare is cursorCompare.
var CursorCompare = cursorCompare

// RelayConfigOf returns r's configuration with NewRelay's defaults filled
// in.
func RelayConfigOf(r *Relay) RelayConfig { return r.cfg }

// OwnerID is the default owner id of a relay on host with process id pid
// and random bytes rnd.
var OwnerID = ownerID

// SetWaitHook installs f, called before each idle wait of the relay with
// the wait and the poll interval it was computed from. Call before Run.
func SetWaitHook(r *Relay, f func(wait, interval time.Duration)) { r.onWait = f }
