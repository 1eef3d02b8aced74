package inbox_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
)

// BenchmarkClaimMessage measures one claim in its own transaction (BEGIN,
// claim, COMMIT) on the fresh path (a new message each time) and on the
// duplicate path (the same, already processed message).
func BenchmarkClaimMessage(b *testing.B) {
	bench := func(b *testing.B, fresh bool) {
		bb := setup(b)
		msg := newMessage("bench")
		if !fresh {
			if err := pgx.BeginFunc(bb.ctx, bb.pool, func(tx pgx.Tx) error {
				_, err := bb.in.ClaimMessage(bb.ctx, tx, withResult(msg, inbox.Result{Code: "OK", Payload: []byte(`{"order_id":1}`)}))
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		for b.Loop() {
			if fresh {
				msg.MessageID = uuid.Must(uuid.NewV7())
			}
			if err := pgx.BeginFunc(bb.ctx, bb.pool, func(tx pgx.Tx) error {
				c, err := bb.in.ClaimMessage(bb.ctx, tx, msg)
				if err == nil && c.Fresh != fresh {
					b.Fatalf("Fresh = %v", c.Fresh)
				}
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("fresh", func(b *testing.B) { bench(b, true) })
	b.Run("duplicate", func(b *testing.B) { bench(b, false) })
}
