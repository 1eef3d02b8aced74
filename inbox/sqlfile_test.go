package inbox

import "testing"

// TestSharedSQLFragments checks that the statements written out in full
// in sql/*.sql carry identical copies of the parts they share.
func TestSharedSQLFragments(t *testing.T) {
	t.Parallel()
	const (
		insertFrom = "INSERT INTO {schema}.consumer_inbox"
		insertTo   = "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
		rowFrom    = "status, result_code, result_payload, payload_hash, created_at, processed_at"
	)
	checks := []struct{ a, b, from, to string }{
		// One INSERT for the three claims.
		{"claim", "claim_insert", insertFrom, insertTo},
		{"claim", "claim_abort", insertFrom, insertTo},
		{"claim_insert", "claim_abort", "RETURNING true, ", "processed_at"},
		// The stored row the claim returns for a duplicate is the row
		// Lookup returns.
		{"lookup", "claim", "SELECT false, " + rowFrom, "WHERE consumer_group = $1 AND message_id = $2"},
	}
	for _, c := range checks {
		if err := statements.SameFragment(c.a, c.b, c.from, c.to); err != nil {
			t.Error(err)
		}
	}
}
