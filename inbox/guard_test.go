package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/pgtx"
)

// One message id in two consumer groups is two messages: a duplicate in
// one group reports that group's row, never the other's.
func TestSameMessageIDInTwoGroups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := newMessage("group-a")
	second := first
	second.Group = "group-b"
	b.inTx(t, func(tx pgx.Tx) error {
		_, err := b.in.ClaimMessage(b.ctx, tx, withResult(first, inbox.Result{Code: "A_DONE"}))
		return err
	})
	b.inTx(t, func(tx pgx.Tx) error {
		_, err := b.in.ClaimMessage(b.ctx, tx, withResult(second, inbox.Result{Code: "B_DONE"}))
		return err
	})
	for _, m := range []inbox.Message{first, second} {
		want := map[string]string{"group-a": "A_DONE", "group-b": "B_DONE"}[m.Group]
		b.inTx(t, func(tx pgx.Tx) error {
			c, err := b.in.ClaimMessage(b.ctx, tx, withResult(m, inbox.Result{Code: "AGAIN"}))
			if err != nil || c.Fresh || c.Record.Key != m.Key() || c.Record.Result.Code != want {
				t.Errorf("duplicate in %s = %+v, %v; want its own row with %s", m.Group, c, err, want)
			}
			return err
		})
	}
}

// The retention statements remove exactly the rows processed strictly
// before the horizon, of the group each row belongs to: a row processed at
// the horizon itself stays, and so does the same message id in another
// group.
func TestRetentionHorizonAndGroups(t *testing.T) {
	t.Parallel()
	for name, remove := range map[string]func(b *testBundle, db pgtx.Querier, before time.Time) (int64, error){
		"Purge": func(b *testBundle, db pgtx.Querier, before time.Time) (int64, error) {
			return b.in.Purge(testwait.Context(t, b.ctx, testwait.Step), db, before, 0)
		},
		"Archive": func(b *testBundle, db pgtx.Querier, before time.Time) (int64, error) {
			return b.in.Archive(b.ctx, db, before, 0)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			horizon := time.Now().Add(-10 * 24 * time.Hour).Truncate(time.Millisecond)
			old := b.processed(t, "group-a", 1, 0)[0]
			other := inbox.Key{Group: "group-b", MessageID: old.MessageID}
			atHorizon := b.processed(t, "group-a", 1, 0)[0]
			spanning := b.processed(t, "group-a", 1, 0)[0]
			m := newMessage("group-b")
			m.MessageID = old.MessageID
			b.inTx(t, func(tx pgx.Tx) error {
				_, err := b.in.ClaimMessage(b.ctx, tx, withResult(m, inbox.Result{Code: "OK"}))
				return err
			})
			b.processedAt(t, old, horizon.Add(-2*time.Hour), horizon.Add(-time.Hour))
			// Claimed before the horizon and processed at it, or after it
			// (a consumer transaction that spanned it): processed_at decides.
			b.processedAt(t, atHorizon, horizon.Add(-time.Hour), horizon)
			b.processedAt(t, spanning, horizon.Add(-time.Hour), horizon.Add(time.Hour))
			if n, err := remove(b, b.pool, horizon); err != nil || n != 1 {
				t.Fatalf("%s(horizon) = %d, %v; want 1 (the row processed an hour before it)", name, n, err)
			}
			for _, k := range []inbox.Key{other, atHorizon, spanning} {
				if b.count(t, &k) != 1 {
					t.Errorf("%s removed %s/%s (want only %s/%s)", name, k.Group, k.MessageID, old.Group, old.MessageID)
				}
			}
		})
	}
}

// processedAt sets the row's created_at (its claim) and processed_at.
func (b *testBundle) processedAt(t *testing.T, k inbox.Key, created, processed time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if _, err := b.pool.Exec(ctx, `UPDATE `+b.table()+` SET created_at = $3, processed_at = $4
		WHERE consumer_group = $1 AND message_id = $2`, k.Group, k.MessageID, created, processed); err != nil {
		t.Fatal(err)
	}
}

// Complete records the result of its own message only: another message of
// the same group and the same message id in another group, claimed in the
// same transaction, stay CLAIMED.
func TestCompleteTouchesOnlyItsMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done, sameGroup := newMessage("group-a"), newMessage("group-a")
	sameID := done
	sameID.Group = "group-b"
	b.inTx(t, func(tx pgx.Tx) error {
		for _, m := range []inbox.Message{done, sameGroup, sameID} {
			if _, err := b.in.ClaimMessage(b.ctx, tx, m); err != nil {
				return err
			}
		}
		return b.in.Complete(b.ctx, tx, done.Key(), inbox.Result{Code: "DONE"})
	})
	for k, want := range map[inbox.Key]inbox.Status{done.Key(): inbox.StatusProcessed, sameGroup.Key(): inbox.StatusClaimed, sameID.Key(): inbox.StatusClaimed} {
		if rec, err := b.in.Lookup(b.ctx, b.pool, k); err != nil || rec.Status != want {
			t.Errorf("%s/%s after completing %s/%s: %+v, %v; want %v", k.Group, k.MessageID, done.Group, done.MessageID, rec, err, want)
		}
	}
}
