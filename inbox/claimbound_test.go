package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/testwait"
)

// TestClaimRetryIsBounded: ClaimMessage looks a conflicting row up again
// when its claim statement could not see it, and claims again when the
// look-up does not find it either (the row was purged in between); that
// loop is bounded. A row-level security policy stands in for a row purged
// every time: the claiming role sees no row of the table, while its insert
// still conflicts on the primary key (the policy hides the stored row,
// whose topic says so, and not the new one, which RETURNING must see). ClaimMessage gives up with
// ErrNotFound (Config.Citus: ErrConcurrentClaim) after exactly
// maxClaimAttempts claims, well within the test's own deadline.
func TestClaimRetryIsBounded(t *testing.T) {
	t.Parallel()
	for _, citus := range []bool{false, true} {
		t.Run(fmt.Sprintf("citus=%v", citus), func(t *testing.T) {
			b := setupMode(t, citus)
			role := "seckill_blind_" + uuid.NewString()[:8]
			quoted := pgx.Identifier{role}.Sanitize()
			schema := pgx.Identifier{b.schema}.Sanitize()
			for _, stmt := range []string{
				`CREATE ROLE ` + quoted + ` NOLOGIN`,
				`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + quoted,
				`GRANT SELECT, INSERT, UPDATE ON ` + b.table() + ` TO ` + quoted,
				`ALTER TABLE ` + b.table() + ` ENABLE ROW LEVEL SECURITY`,
				`CREATE POLICY blind_read ON ` + b.table() + ` FOR SELECT TO ` + quoted + ` USING (topic <> 'purged')`,
				`CREATE POLICY blind_write ON ` + b.table() + ` FOR INSERT TO ` + quoted + ` WITH CHECK (true)`,
			} {
				if _, err := b.pool.Exec(b.ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			t.Cleanup(func() {
				ctx := context.Background()
				_, _ = b.pool.Exec(ctx, `DROP OWNED BY `+quoted)
				_, _ = b.pool.Exec(ctx, `DROP ROLE `+quoted)
			})
			m := newMessage("g")
			if _, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table()+` (consumer_group, message_id, topic, status)
				VALUES ($1, $2, 'purged', 10)`, m.Group, m.MessageID); err != nil {
				t.Fatal(err)
			}
			// A sequence, which no rollback resets, counts the claim's
			// inserts: one per attempt.
			seq := pgx.Identifier{b.schema, "claim_attempts"}.Sanitize()
			fn := pgx.Identifier{b.schema, "count_claim_attempt"}.Sanitize()
			for _, stmt := range []string{
				`CREATE SEQUENCE ` + seq,
				`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
					AS $$ BEGIN PERFORM nextval('` + seq + `'); RETURN NEW; END $$`,
				`CREATE TRIGGER count_claim_attempt BEFORE INSERT ON ` + b.table() + ` FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
			} {
				if _, err := b.pool.Exec(b.ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			ctx := testwait.Context(t, b.ctx, testwait.Step)
			tx, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+quoted); err != nil {
				t.Fatal(err)
			}
			_, err = b.in.ClaimMessage(ctx, tx, m)
			want := inbox.ErrNotFound
			if citus {
				want = inbox.ErrConcurrentClaim
			}
			if !errors.Is(err, want) {
				t.Fatalf("claim of a row it cannot see: %v; want %v, returned before the deadline", err, want)
			}
			var attempts int
			if err := b.pool.QueryRow(b.ctx, `SELECT last_value FROM `+seq).Scan(&attempts); err != nil {
				t.Fatal(err)
			}
			if attempts != inbox.MaxClaimAttempts {
				t.Fatalf("claimed %d times; want %d attempts before giving up", attempts, inbox.MaxClaimAttempts)
			}
		})
	}
}
