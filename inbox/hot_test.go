package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
)

// claimComplete claims msg and completes it in one transaction, as a
// consumer that records its result after its work does, and returns the
// transaction's updates of consumer_inbox and how many were HOT
// (pg_stat_xact_user_tables before and after, in the transaction: its
// counts are the backend's not yet reported, which may include earlier
// transactions').
func (b *testBundle) claimComplete(ctx context.Context, msg inbox.Message) (upd, hot int64, err error) {
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		counts := func() (u, h int64, err error) {
			err = tx.QueryRow(ctx, `SELECT coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0) FROM pg_stat_xact_user_tables
				WHERE schemaname = $1 AND relname = 'consumer_inbox'`, b.schema).Scan(&u, &h)
			return u, h, err
		}
		u0, h0, err := counts()
		if err != nil {
			return err
		}
		c, err := b.in.ClaimMessage(ctx, tx, msg)
		if err != nil {
			return err
		}
		if !c.Fresh {
			return fmt.Errorf("claim of a new message: not fresh")
		}
		if err := b.in.Complete(ctx, tx, msg.Key(), inbox.Result{Code: "OK", Payload: []byte(`{"order_id":1}`)}); err != nil {
			return err
		}
		u1, h1, err := counts()
		upd, hot = u1-u0, h1-h0
		return err
	})
	return upd, hot, err
}

// TestCompleteIsHOT: Complete's update changes no indexed column, so on a
// page with room it is a HOT update: it writes no index entry (migration
// 003). A message with a ref, which idx_inbox_ref indexes.
func TestCompleteIsHOT(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 20 {
		msg := newMessage("hot")
		msg.Ref = fmt.Sprintf("reservation-%d", i)
		upd, hot, err := b.claimComplete(b.ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		if upd != 1 || hot != 1 {
			t.Fatalf("message %d: %d updates, %d HOT; want Complete's one update, HOT", i, upd, hot)
		}
	}
}

// BenchmarkClaimComplete measures a claim and its Complete in one
// transaction, with the indexes of migration 003 ("current") and, side by
// side in the same process, with those of 001 ("before_003": processed_at
// in idx_inbox_ref and in the BRIN, so Complete is not HOT): WAL bytes
// and index entries written per message.
func BenchmarkClaimComplete(b *testing.B) {
	for _, variant := range []string{"current", "before_003"} {
		b.Run(variant, func(b *testing.B) {
			bb := setup(b)
			if variant == "before_003" {
				s := pgx.Identifier{bb.schema}.Sanitize()
				if _, err := bb.pool.Exec(bb.ctx, `DROP INDEX `+s+`.idx_inbox_ref;
					CREATE INDEX idx_inbox_ref ON `+s+`.consumer_inbox (ref, processed_at DESC) WHERE ref IS NOT NULL;
					DROP INDEX `+s+`.idx_inbox_created_brin;
					CREATE INDEX idx_inbox_processed_brin ON `+s+`.consumer_inbox USING BRIN (processed_at)`); err != nil {
					b.Fatal(err)
				}
			}
			wal := func() (lsn int64) {
				if err := bb.pool.QueryRow(bb.ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&lsn); err != nil {
					b.Fatal(err)
				}
				return lsn
			}
			var hot, upd int64
			start := wal()
			n := 0
			for b.Loop() {
				msg := newMessage("bench")
				msg.MessageID, msg.Ref = uuid.Must(uuid.NewV7()), fmt.Sprintf("reservation-%d", n)
				u, h, err := bb.claimComplete(bb.ctx, msg)
				if err != nil {
					b.Fatal(err)
				}
				upd, hot, n = upd+u, hot+h, n+1
			}
			b.ReportMetric(float64(wal()-start)/float64(n), "WAL-B/op")
			b.ReportMetric(float64(hot)/float64(upd), "HOT/update")
		})
	}
}
