package outbox_test

import (
	"bytes"
	"fmt"
	"slices"
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
			zero := time.Unix(0, 0) // the statement of a relay's cursor, from the zero cursor
			return claimAfter(t, b, 1, zero, zero, uuid.Nil)
		},
	} {
		for _, deadBlocks := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/DeadBlocksKey=%v", name, deadBlocks), func(t *testing.T) {
				t.Parallel()
				b := setup(t, outbox.Config{DeadBlocksKey: deadBlocks})
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
}

// The claim after a relay's cursor claims the ready events past the
// cursor — PENDING and RETRY — and neither the events before it nor those
// not yet available.
func TestClaimAfterCursor(t *testing.T) {
	t.Parallel()
	for _, deadBlocks := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeadBlocksKey=%v", deadBlocks), func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{DeadBlocksKey: deadBlocks})
			// A PENDING event of key A, before the cursor and first in seq.
			older := event(9)
			older.OrderingKey = "A"
			aID := b.enqueue(t, older)[0].EventID
			b.exec(t, `UPDATE `+b.table()+` SET available_at = available_at - interval '1 day', created_at = created_at - interval '1 day' WHERE event_id = $1`, aID)
			var ids []uuid.UUID
			for i := range 5 {
				e := event(i)
				if i == 4 {
					e.OrderingKey = "B" // the head of its key
				}
				ids = append(ids, b.enqueue(t, e)[0].EventID)
			}
			b.exec(t, `UPDATE `+b.table()+` SET available_at = now() + interval '1 hour' WHERE event_id = $1`, ids[2])
			b.exec(t, `UPDATE `+b.table()+` SET status = 30, retry_count = 1 WHERE event_id = $1`, ids[3])
			var at, created time.Time
			if err := b.pool.QueryRow(b.ctx, `SELECT available_at, created_at FROM `+b.table()+` WHERE event_id = $1`, ids[0]).Scan(&at, &created); err != nil {
				t.Fatal(err)
			}
			got := claimAfter(t, b, 10, at, created, ids[0])
			slices.SortFunc(got, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
			want := []uuid.UUID{ids[1], ids[3], ids[4]}
			if !slices.Equal(got, want) {
				t.Fatalf("claimed %v after the cursor at %s; want the PENDING %s, the RETRY %s and the head of key B %s (not the cursor's own, not the one available in an hour, not key A's older event)", got, ids[0], ids[1], ids[3], ids[4])
			}
			for _, id := range want {
				if st, _, _ := b.status(t, id); st != outbox.StatusSending {
					t.Errorf("claimed event %s is %v, want SENDING", id, st)
				}
			}
		})
	}
}

// claimAfter runs the claim statement of a relay's cursor for owner "r2"
// and returns the ids it claimed.
func claimAfter(t *testing.T, b *bundle, limit int, at, created time.Time, id uuid.UUID) []uuid.UUID {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, outbox.ClaimAfterSQL(b.store), limit, "r2", at, created, id)
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
}

// A claim takes the ready events — PENDING, and RETRY whose time has come
// — up to its limit, leaves an event not yet available, and in ordered
// mode claims the successor of a SENT event but not that of a RETRY event
// waiting for its backoff. With and without DeadBlocksKey.
func TestClaimReadyEvents(t *testing.T) {
	t.Parallel()
	for _, deadBlocks := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeadBlocksKey=%v", deadBlocks), func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{DeadBlocksKey: deadBlocks})
			sentHead := event(10)
			sentHead.OrderingKey = "A"
			b.enqueue(t, sentHead)
			b.sendAll(t) // key A's head is SENT
			var ids []uuid.UUID
			for i := range 6 {
				e := event(i)
				switch i {
				case 3:
					e.OrderingKey = "A" // after the SENT head
				case 4, 5:
					e.OrderingKey = "C" // 5 waits behind 4
				}
				ids = append(ids, b.enqueue(t, e)[0].EventID)
			}
			b.exec(t, `UPDATE `+b.table()+` SET status = 30, retry_count = 1 WHERE event_id = $1`, ids[1])
			b.exec(t, `UPDATE `+b.table()+` SET available_at = now() + interval '1 hour' WHERE event_id = $1`, ids[2])
			b.exec(t, `UPDATE `+b.table()+` SET status = 30, retry_count = 1, available_at = now() + interval '1 hour' WHERE event_id = $1`, ids[4])
			first := claimIDs(b.claim(t, "r1", 1))
			if len(first) != 1 {
				t.Fatalf("a claim of 1 claimed %d events", len(first))
			}
			got := append(first, claimIDs(b.claim(t, "r1", 10))...)
			slices.SortFunc(got, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
			want := []uuid.UUID{ids[0], ids[1], ids[3]}
			if !slices.Equal(got, want) {
				t.Fatalf("claimed %v; want the PENDING %s, the RETRY %s and %s after its key's SENT head; not %s (available in an hour) nor %s (behind a RETRY of its key)", got, ids[0], ids[1], ids[3], ids[2], ids[5])
			}
		})
	}
}
