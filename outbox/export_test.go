package outbox

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

// DisableClaimCursor makes every claim of r start from the head of
// idx_outbox_ready (the claim before the cursor), for side-by-side
// benchmarks. Call before Run.
func DisableClaimCursor(r *Relay) { r.noCursor = true }

// ClaimAfterSQL returns the claim statement that starts after a cursor
// (for EXPLAIN in tests).
func ClaimAfterSQL(s *Store) string { return s.claimAfterSQL }
