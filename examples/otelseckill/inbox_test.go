package otelseckill_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/otelseckill"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/pgtx"
	"github.com/seckillkit/seckill/seckilltest"
)

// TestRecordInboxClaim: two messages, one delivered twice; the fresh
// claims counted are the inbox's rows, the duplicate is counted apart.
func TestRecordInboxClaim(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	db := seckilltest.New(t, inbox.Migrations)
	b := setup(t)
	in, err := inbox.New(inbox.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	first, second := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	for _, id := range []uuid.UUID{first, first, second} {
		msg := inbox.Message{Group: "orders", MessageID: id, Topic: "orders"}
		if err := pgtx.RunInTx(ctx, db.Pool, pgtx.Options{}, func(tx pgx.Tx) error {
			c, err := in.ClaimMessage(ctx, tx, msg)
			if err != nil {
				return err
			}
			b.obs.RecordInboxClaim(ctx, msg.Group, c.Fresh)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{db.Schema, "consumer_inbox"}.Sanitize()).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	claims := find(t, collect(t, b.reader), otelseckill.MetricInboxClaims)
	group := otelseckill.AttrInboxGroup.String("orders")
	fresh := sum(t, claims, group, otelseckill.AttrInboxResult.String("fresh"))
	dup := sum(t, claims, group, otelseckill.AttrInboxResult.String("duplicate"))
	if fresh != float64(rows) || rows != 2 || dup != 1 {
		t.Errorf("fresh %v duplicate %v; the inbox has %d rows (want 2 fresh, 1 duplicate)", fresh, dup, rows)
	}
}
