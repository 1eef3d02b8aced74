package outbox_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/outbox"
)

// A relay in InTx mode publishes exactly the ready events, as the claim
// does (TestClaimReadyEvents): the PENDING and RETRY events, the event
// after its key's SENT head; not an event available in an hour, nor one
// behind an unfinished (PENDING, SENDING, RETRY) event of its key, nor an
// event another transaction holds locked (SKIP LOCKED). A DEAD head blocks
// its key's next event only with Config.DeadBlocksKey. Each batch holds at
// most BatchSize events. From the head of the ready index
// (lock, lock_dead_blocks_key, batches of 10) and after the relay's cursor
// (lock_after, lock_after_dead_blocks_key, batches of 1).
func TestRelayInTxLocksReadyEvents(t *testing.T) {
	t.Parallel()
	for _, deadBlocks := range []bool{false, true} {
		for _, cursor := range []bool{false, true} {
			t.Run(fmt.Sprintf("DeadBlocksKey=%v/cursor=%v", deadBlocks, cursor), func(t *testing.T) {
				t.Parallel()
				testRelayInTxLocksReadyEvents(t, deadBlocks, cursor)
			})
		}
	}
}

func testRelayInTxLocksReadyEvents(t *testing.T, deadBlocks, cursor bool) {
	b := setup(t, outbox.Config{DeadBlocksKey: deadBlocks})
	sentHead := event(100)
	sentHead.OrderingKey = "A"
	b.enqueue(t, sentHead)
	b.sendAll(t) // key A's head is SENT
	var ids []uuid.UUID
	for i := range 12 {
		e := event(i)
		switch i {
		case 3:
			e.OrderingKey = "A" // after the SENT head
		case 4, 5:
			e.OrderingKey = "C" // 5 waits behind 4
		case 6, 7:
			e.OrderingKey = "D" // 7 after the DEAD 6
		case 8, 9:
			e.OrderingKey = "E" // 9 waits behind 8, PENDING in an hour
		case 10, 11:
			e.OrderingKey = "F" // 11 waits behind 10, SENDING
		}
		ids = append(ids, b.enqueue(t, e)[0].EventID)
	}
	b.exec(t, `UPDATE `+b.table()+` SET status = 30, retry_count = 1 WHERE event_id = $1`, ids[1])
	b.exec(t, `UPDATE `+b.table()+` SET available_at = now() + interval '1 hour' WHERE event_id = $1`, ids[2])
	b.exec(t, `UPDATE `+b.table()+` SET status = 30, retry_count = 1, available_at = now() + interval '1 hour' WHERE event_id = $1`, ids[4])
	b.exec(t, `UPDATE `+b.table()+` SET status = 40, retry_count = max_retry, last_error = 'poison' WHERE event_id = $1`, ids[6])
	b.exec(t, `UPDATE `+b.table()+` SET available_at = now() + interval '1 hour' WHERE event_id = $1`, ids[8])
	b.exec(t, `UPDATE `+b.table()+` SET status = 10, locked_by = 'lease-relay', locked_at = now() WHERE event_id = $1`, ids[10])
	// Another transaction holds the PENDING event 12 locked while the
	// relay runs.
	held := b.enqueue(t, event(12))[0].EventID
	holder, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background())
	if _, err := holder.Exec(b.ctx, `SELECT 1 FROM `+b.table()+` WHERE event_id = $1 FOR UPDATE`, held); err != nil {
		t.Fatal(err)
	}
	want := []uuid.UUID{ids[0], ids[1], ids[3]}
	if !deadBlocks {
		want = append(want, ids[7])
	}
	slices.SortFunc(want, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })

	rec := newRecorder()
	var published atomic.Int64
	done := make(chan struct{})
	var idleAfter atomic.Int64 // idle claims once every wanted event was published
	batch := 10
	if cursor {
		batch = 1
	}
	var overfull atomic.Int64 // the size of a batch larger than BatchSize
	rec.after = func(_ context.Context, msgs []outbox.Message, _ []error) {
		published.Add(int64(len(msgs)))
		if len(msgs) > batch {
			overfull.Store(int64(len(msgs)))
		}
	}
	b.startRelays(t, 1, outbox.RelayConfig{Publish: rec.Publish, InTx: true, BatchSize: batch,
		DisableListen: true, PollInterval: 5 * time.Millisecond, MaxPollInterval: 5 * time.Millisecond}, func(r *outbox.Relay) {
		if !cursor {
			outbox.DisableClaimCursor(r)
		}
		outbox.SetIdleHook(r, func(bool) {
			// Three idle claims after the last wanted event: the relay
			// claimed from the head again and found nothing more.
			if published.Load() >= int64(len(want)) && idleAfter.Add(1) == 3 {
				close(done)
			}
		})
	})
	testwait.Recv(t, done, fmt.Sprintf("the relay to publish the %d ready events and go idle", len(want)))
	if n := overfull.Load(); n != 0 {
		t.Errorf("a batch of %d events, more than BatchSize %d", n, batch)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var got []uuid.UUID
	for id, n := range rec.ok {
		if n != 1 {
			t.Errorf("event %s published %d times", id, n)
		}
		got = append(got, id)
	}
	slices.SortFunc(got, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	if !slices.Equal(got, want) {
		t.Fatalf("published %v; want %v (PENDING, RETRY, after the SENT head%s)", got, want, map[bool]string{false: ", after the DEAD head", true: ""}[deadBlocks])
	}
}

// The InTx relay's claim after its cursor (lock_after, and
// lock_after_dead_blocks_key) locks the ready events past the cursor only:
// the PENDING and RETRY ones, the head of key B, the successor of key C's
// SENT head; not the cursor's own event, one available in an hour, key A's
// successor behind its older PENDING event (before the cursor), nor an
// event another transaction holds (SKIP LOCKED: it does not wait). Key D's
// successor of a DEAD head only without DeadBlocksKey.
func TestLockAfterCursor(t *testing.T) {
	t.Parallel()
	for _, deadBlocks := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeadBlocksKey=%v", deadBlocks), func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{DeadBlocksKey: deadBlocks})
			keyed := func(i int, key string) outbox.Event {
				e := event(i)
				e.OrderingKey = key
				return e
			}
			cHead := b.enqueue(t, keyed(100, "C"))[0].EventID
			b.sendAll(t)
			aOld := b.enqueue(t, keyed(101, "A"))[0].EventID
			b.exec(t, `UPDATE `+b.table()+` SET available_at = available_at - interval '1 day', created_at = created_at - interval '1 day' WHERE event_id = $1`, aOld)
			dHead := b.enqueue(t, keyed(102, "D"))[0].EventID
			b.exec(t, `UPDATE `+b.table()+` SET status = 40, retry_count = max_retry, available_at = available_at - interval '1 day', created_at = created_at - interval '1 day' WHERE event_id = $1`, dHead)
			keys := map[int]string{4: "B", 5: "A", 6: "C", 8: "D"}
			var ids []uuid.UUID
			for i := range 9 {
				e := event(i)
				if k, ok := keys[i]; ok {
					e.OrderingKey = k
				}
				ids = append(ids, b.enqueue(t, e)[0].EventID)
			}
			if st, _, _ := b.status(t, cHead); st != outbox.StatusSent {
				t.Fatalf("key C's head is %v, want SENT", st)
			}
			b.exec(t, `UPDATE `+b.table()+` SET available_at = now() + interval '1 hour' WHERE event_id = $1`, ids[2])
			b.exec(t, `UPDATE `+b.table()+` SET status = 30, retry_count = 1 WHERE event_id = $1`, ids[3])
			holder, err := b.pool.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback(context.Background())
			if _, err := holder.Exec(b.ctx, `SELECT 1 FROM `+b.table()+` WHERE event_id = $1 FOR UPDATE`, ids[7]); err != nil {
				t.Fatal(err)
			}
			var at, created time.Time
			if err := b.pool.QueryRow(b.ctx, `SELECT available_at, created_at FROM `+b.table()+` WHERE event_id = $1`, ids[0]).Scan(&at, &created); err != nil {
				t.Fatal(err)
			}
			tx, err := b.pool.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			ctx := testwait.Context(t, b.ctx, testwait.Step)
			rows, err := tx.Query(ctx, outbox.LockAfterSQL(b.store), 10, at, created, ids[0])
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (uuid.UUID, error) {
				vals, err := row.Values()
				if err != nil {
					return uuid.Nil, err
				}
				return uuid.UUID(vals[0].([16]byte)), nil
			})
			if err != nil {
				t.Fatalf("lock_after: %v", err)
			}
			slices.SortFunc(got, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
			want := []uuid.UUID{ids[1], ids[3], ids[4], ids[6]}
			if !deadBlocks {
				want = append(want, ids[8])
			}
			if !slices.Equal(got, want) {
				t.Fatalf("locked %v after the cursor at %s; want %v", got, ids[0], want)
			}
		})
	}
}

// TestInTxPublishUsesItsLease: in InTx mode the transaction lasts the
// publish deadline (Lease) plus ShutdownTimeout for the statements: a
// publish that takes most of the Lease, longer than Lease less
// ShutdownTimeout, is still marked SENT in the same transaction.
func TestInTxPublishUsesItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	b.enqueue(t, event(1))
	slow := func(ctx context.Context, msgs []outbox.Message) []error {
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-ctx.Done():
		}
		return make([]error, len(msgs))
	}
	stop := b.startRelays(t, 1, outbox.RelayConfig{Publish: slow, InTx: true, DisableListen: true,
		Lease: 2 * time.Second, ShutdownTimeout: 1500 * time.Millisecond, PollInterval: 10 * time.Millisecond}, nil)
	defer stop()
	ctx := testwait.Context(t, b.ctx, testwait.Step)
	for b.stats(t).Sent != 1 {
		select {
		case <-ctx.Done():
			t.Fatalf("the event is not SENT before the deadline: %+v", b.stats(t))
		case <-time.After(20 * time.Millisecond):
		}
	}
}
