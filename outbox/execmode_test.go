package outbox_test

import (
	"encoding/json"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// TestQueryExecModes runs every statement of the package through pools in
// the query exec modes where pgx does not learn parameter types from the
// server (exec, simple_protocol: what PgBouncer in transaction mode needs)
// or encodes from a cached description (cache_describe).
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	for _, mode := range pgtest.ExecModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{})
			b.pool = pgtest.NewPool(t, pgtest.WithExecMode(mode))

			first := event(1)
			first.Headers = map[string]string{"trace-id": "t-1", "quote\"d": "ü \\ 'x'"}
			first.OrderingKey = "user-1"
			first.Payload = json.RawMessage(`{"name": "O'Brien \"ü\"", "n": [1, 2.5, null]}`)
			var single outbox.Enqueued
			var many []outbox.Enqueued
			err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				var err error
				if single, err = enqueueOne(b.ctx, b.store, tx, first); err != nil {
					return err
				}
				if many, err = b.store.Enqueue(b.ctx, tx, []outbox.Event{event(2), first}...); err != nil {
					return err
				}
				batch := &pgx.Batch{}
				var queued, queuedMany []outbox.Enqueued
				if err := b.store.QueueEnqueue(batch, []outbox.Event{event(3)}, &queued, pgtx.Return); err != nil {
					return err
				}
				if err := b.store.QueueEnqueue(batch, []outbox.Event{event(4), event(5)}, &queuedMany, pgtx.Return); err != nil {
					return err
				}
				if err := tx.SendBatch(b.ctx, batch).Close(); err != nil {
					return err
				}
				if len(queued) != 1 || !queued[0].New || len(queuedMany) != 2 || !queuedMany[0].New || !queuedMany[1].New {
					t.Errorf("queued enqueue = %+v, %+v, want all new", queued, queuedMany)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !single.New || len(many) != 2 || !many[0].New || many[1].New || many[1].EventID != single.EventID {
				t.Fatalf("enqueue = %+v, %+v, want new, then new and the first event's duplicate", single, many)
			}

			// Claim, then each finishing helper.
			c, err := b.store.ClaimOutboxBatch(b.ctx, b.pool, "relay-x", 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Messages) != 5 || c.Messages[0].EventID != single.EventID {
				t.Fatalf("claim = %+v, want the 5 events, first one first", c)
			}
			m := c.Messages[0]
			var got, want any
			if err := json.Unmarshal(m.Payload, &got); err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal(first.Payload, &want)
			if !jsonEqual(got, want) || !maps.Equal(m.Headers, first.Headers) || m.OrderingKey != "user-1" ||
				m.Tag != "ORDER_CREATED" || m.Attempt != 1 || m.CreatedAt.IsZero() {
				t.Fatalf("claimed message = %+v, want event %+v", m, first)
			}

			ids := claimIDs(c)
			r, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: ids[:1]})
			if err != nil || r.Marked != 1 {
				t.Fatalf("MarkSent = %+v, %v", r, err)
			}
			batch := &pgx.Batch{}
			var sent, released, failed outbox.MarkResult
			if err := b.store.QueueMark(batch, outbox.Outcome{Lease: c.Lease, Sent: ids[1:2]}, &sent); err != nil {
				t.Fatal(err)
			}
			if err := b.store.QueueMark(batch, outbox.Outcome{Lease: c.Lease, Released: ids[2:3]}, &released); err != nil {
				t.Fatal(err)
			}
			fails := []outbox.Failure{{EventID: ids[3], Err: errors.New("broker 'down' ü"), Backoff: time.Hour}}
			if err := b.store.QueueMark(batch, outbox.Outcome{Lease: c.Lease, Failed: fails}, &failed); err != nil {
				t.Fatal(err)
			}
			if err := b.pool.SendBatch(b.ctx, batch).Close(); err != nil {
				t.Fatal(err)
			}
			if sent.Marked != 1 || released.Marked != 1 || failed.Marked != 1 {
				t.Fatalf("queued marks = %+v %+v %+v, want 1 each", sent, released, failed)
			}
			if st, n, le := b.status(t, ids[3]); st != outbox.StatusRetry || n != 1 || le != "broker 'down' ü" {
				t.Fatalf("failed event = %v, %d, %q", st, n, le)
			}
			// Lease checks compare the claim time: a stale lease loses.
			stale := outbox.Lease{Owner: c.Owner, LockedAt: c.LockedAt.Add(-time.Microsecond)}
			if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: stale, Released: ids[4:5]}); !errors.Is(err, outbox.ErrLeaseLost) {
				t.Fatalf("Release under a stale lease = %v, want ErrLeaseLost", err)
			}
			if r, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Failed: []outbox.Failure{{EventID: ids[4]}}}); err != nil || r.Marked != 1 {
				t.Fatalf("MarkFailed = %+v, %v", r, err)
			}
			if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: []uuid.UUID{uuid.New()}}); !errors.Is(err, outbox.ErrLeaseLost) {
				t.Fatalf("MarkSent of an unknown id = %v, want ErrLeaseLost", err)
			}

			// Recovery: claim the released event again and recover it.
			c2 := b.claim(t, "relay-y", 10)
			if len(c2.Messages) != 2 { // the released one and the failed one without backoff
				t.Fatalf("second claim = %d messages, want 2", len(c2.Messages))
			}
			if rec, err := b.store.Recover(b.ctx, b.pool, c2.Lease, time.Microsecond, 1000); err != nil || len(rec) != 2 ||
				rec[0].LockedBy != "relay-y" {
				t.Fatalf("RecoverLease = %+v, %v", rec, err)
			}
			if rec, err := b.store.Recover(b.ctx, b.pool, outbox.Lease{}, time.Hour, 10); err != nil || len(rec) != 0 {
				t.Fatalf("RecoverExpired = %+v, %v", rec, err)
			}
			st, err := b.store.Stats(b.ctx, b.pool)
			if err != nil || st.Sent != 2 || st.Retry != 3 || st.Pending+st.Sending+st.Dead != 0 {
				t.Fatalf("Stats = %+v, %v", st, err)
			}
			if n, err := b.store.PurgeSent(b.ctx, b.pool, time.Now().Add(time.Hour), 1); err != nil || n != 2 {
				t.Fatalf("PurgeSent = %d, %v, want 2", n, err)
			}
		})
	}
}
