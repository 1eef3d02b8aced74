package outbox_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// The retention statements remove exactly the SENT events sent strictly
// before the horizon: an event sent at the horizon itself stays.
func TestRetentionHorizon(t *testing.T) {
	t.Parallel()
	for name, remove := range map[string]func(b *bundle, db pgtx.Querier, before time.Time) (int64, error){
		"PurgeSent": func(b *bundle, db pgtx.Querier, before time.Time) (int64, error) {
			return b.store.PurgeSent(b.ctx, db, before, 10)
		},
		"ArchiveSent": func(b *bundle, db pgtx.Querier, before time.Time) (int64, error) {
			return b.store.ArchiveSent(b.ctx, db, before, 10)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{})
			res := b.enqueue(t, event(1), event(2))
			b.sendAll(t)
			horizon := time.Now().Add(-10 * 24 * time.Hour).Truncate(time.Millisecond)
			old, atHorizon := res[0].EventID, res[1].EventID
			for id, at := range map[any]time.Time{old: horizon.Add(-time.Hour), atHorizon: horizon} {
				b.exec(t, `UPDATE `+b.table()+` SET created_at = $2, available_at = $2, sent_at = $2 WHERE event_id = $1`, id, at)
			}
			if n, err := remove(b, b.pool, horizon); err != nil || n != 1 {
				t.Fatalf("%s(horizon) = %d, %v; want 1 (the event sent an hour before it)", name, n, err)
			}
			if b.count(t, `event_id = $1`, atHorizon) != 1 {
				t.Errorf("%s removed the event sent at the horizon itself", name)
			}
		})
	}
}

// A claim of one event passes over the older events that are not ready
// (SENT, SENDING) and claims the PENDING one behind them: the status test
// is in the candidates, before the LIMIT, not only in the UPDATE.
func TestClaimPassesOverEventsNotReady(t *testing.T) {
	t.Parallel()
	for name, claim := range map[string]func(b *bundle) []uuid.UUID{
		"ClaimOutboxBatch": func(b *bundle) []uuid.UUID { return claimIDs(b.claim(t, "r2", 1)) },
		"claim_after": func(b *bundle) []uuid.UUID {
			// The statement of a relay's cursor, from the zero cursor.
			zero := time.Unix(0, 0)
			rows, err := b.pool.Query(b.ctx, outbox.ClaimAfterSQL(b.store), 1, "r2", zero, zero, uuid.Nil)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (uuid.UUID, error) {
				vals, err := row.Values()
				if err != nil {
					return uuid.Nil, err
				}
				return uuid.UUID(vals[0].([16]byte)), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return ids
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{})
			b.enqueue(t, event(1))
			b.sendAll(t) // the oldest event is SENT
			b.enqueue(t, event(2))
			b.claim(t, "r1", 1) // the next one SENDING
			ready := b.enqueue(t, event(3))[0].EventID
			if got := claim(b); len(got) != 1 || got[0] != ready {
				t.Fatalf("claimed %v; want the PENDING event %s behind the SENT and SENDING ones", got, ready)
			}
		})
	}
}
