package outbox

import "testing"

// TestSharedSQLFragments checks that the statements written out in full
// in sql/*.sql carry identical copies of the parts they share.
func TestSharedSQLFragments(t *testing.T) {
	t.Parallel()
	const (
		readyFrom  = "FROM {schema}.event_outbox AS o\n\tWHERE o.status IN (0, 30)"
		readyTo    = "FOR UPDATE OF o SKIP LOCKED"
		insertFrom = "INSERT INTO {schema}.event_outbox AS o ("
		insertTo   = "$13::text)"
		blocking   = "p.status IN (0, 10, 30)))"
		blockDead  = "p.status IN (0, 10, 30, 40)))"
		claimAfter = "\n\t  AND (o.available_at, o.created_at, o.event_id) > ($3::timestamptz, $4::timestamptz, $5::uuid)"
		lockAfter  = "\n\t  AND (o.available_at, o.created_at, o.event_id) > ($2::timestamptz, $3::timestamptz, $4::uuid)"
		failSet    = "SET status = CASE WHEN o.retry_count + 1 >= o.max_retry THEN 40 ELSE 30 END,"
	)
	checks := []struct {
		a, b, from, to string
		replace        []string // applied to b's copy
	}{
		// The ready rows: the claim's and the InTx relay's lock, each
		// form against the plain claim.
		{"claim", "lock", readyFrom, readyTo, nil},
		{"claim", "claim_after", readyFrom, readyTo, []string{claimAfter, ""}},
		{"claim", "lock_after", readyFrom, readyTo, []string{lockAfter, ""}},
		{"claim", "claim_dead_blocks_key", readyFrom, readyTo, []string{blockDead, blocking}},
		{"claim", "lock_dead_blocks_key", readyFrom, readyTo, []string{blockDead, blocking}},
		{"claim", "claim_after_dead_blocks_key", readyFrom, readyTo, []string{claimAfter, "", blockDead, blocking}},
		{"claim", "lock_after_dead_blocks_key", readyFrom, readyTo, []string{lockAfter, "", blockDead, blocking}},
		{"claim", "claim_dead_blocks_key", "UPDATE {schema}.event_outbox AS o", "o.available_at", nil},
		{"claim_after", "claim_after_dead_blocks_key", "UPDATE {schema}.event_outbox AS o", "o.available_at", nil},
		// The single-event INSERT.
		{"enqueue_insert", "enqueue_one_notify", insertFrom, insertTo, nil},
		{"enqueue_insert", "enqueue_abort", insertFrom, insertTo, nil},
		// The batch enqueue with and without NOTIFY.
		{"enqueue", "enqueue_notify", "WITH input AS MATERIALIZED (", "RETURNING o.event_id\n)", nil},
		{"enqueue", "enqueue_notify", "SELECT 1, event_id, NULL::uuid FROM ins", "ON e.dedup_key = i.dedup_key", nil},
		// The advisory lock's key: the batch enqueue's InitPlan and the
		// Citus enqueue's lock statement lock the same keys.
		{"enqueue", "enqueue_locks", "SELECT count(pg_advisory_xact_lock(", "|| k, 0)))", []string{"$1::text", "$14::text"}},
		// Marks under a lease: the same compare-and-set and report, one
		// SET list each; the locked forms set the same columns.
		{"mark_sent", "release", "WHERE event_id = ANY(", "AND i.id NOT IN (SELECT event_id FROM upd)", nil},
		{"mark_sent", "mark_sent_locked", "SET status = 20,", "updated_at = statement_timestamp()", nil},
		{"mark_failed", "mark_failed_locked", failSet, "updated_at = statement_timestamp()", nil},
		{"mark_failed", "mark_failed_locked", "WITH f AS (", "AS f(id, err, backoff_us)\n)", nil},
		// Recovery of every expired lease and of one claim's.
		{"recover", "recover_lease", "WITH stale AS (", "RETURNING o.event_id, s.locked_by, o.status", []string{"AND locked_by = $3 AND locked_at = $4", ""}},
		// Purge and archive pick their rows alike.
		{"purge", "archive_sent", "WITH victims AS (", "FOR UPDATE SKIP LOCKED", nil},
		{"purge", "archive_sent", "USING victims AS v", "AND o.status = 20", nil},
	}
	for _, c := range checks {
		if err := statements.SameFragment(c.a, c.b, c.from, c.to, c.replace...); err != nil {
			t.Error(err)
		}
	}
}
