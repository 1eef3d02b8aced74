package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/outbox"
)

func (b *bundle) history() string { return pgx.Identifier{b.schema, "event_outbox_history"}.Sanitize() }

// sendAll claims and marks SENT every ready event.
func (b *bundle) sendAll(t testing.TB) {
	t.Helper()
	for {
		c := b.claim(t, "r", 1000)
		if len(c.Messages) == 0 {
			return
		}
		if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: claimIDs(c)}); err != nil {
			t.Fatal(err)
		}
	}
}

// rows returns every event of the table as JSON text by id, without
// archived_at.
func (b *bundle) rows(t testing.TB, table string) map[uuid.UUID]string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT event_id, (to_jsonb(t) - 'archived_at')::text FROM `+table+` AS t`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uuid.UUID]string{}
	var id uuid.UUID
	var js string
	if _, err := pgx.ForEachRow(rows, []any{&id, &js}, func() error {
		if _, dup := out[id]; dup {
			return fmt.Errorf("event %s twice in %s", id, table)
		}
		out[id] = js
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// ArchiveSent moves exactly the SENT events sent before the horizon, whole
// and unchanged, in batches of at most batchSize rows (each batch one
// statement: its rows share the statement's archived_at); a second run
// moves nothing; unfinished events stay.
func TestArchiveSentMovesSentEventsInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	var evs []outbox.Event
	for i := range 2560 {
		evs = append(evs, event(i))
	}
	b.enqueue(t, evs[:2500]...)
	b.sendAll(t)
	b.exec(t, `UPDATE `+b.table()+` SET sent_at = sent_at - interval '8 days' WHERE status = 20`)
	b.enqueue(t, evs[2500:]...)
	// 20 sent just now, 10 SENDING, 10 RETRY, 10 DEAD, 10 PENDING.
	c := b.claim(t, "r", 20)
	if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: claimIDs(c)}); err != nil {
		t.Fatal(err)
	}
	b.claim(t, "r", 10)
	b.exec(t, `UPDATE `+b.table()+` SET status = 30 WHERE event_id IN (SELECT event_id FROM `+b.table()+` WHERE status = 0 ORDER BY event_id LIMIT 10)`)
	b.exec(t, `UPDATE `+b.table()+` SET status = 40 WHERE event_id IN (SELECT event_id FROM `+b.table()+` WHERE status = 0 ORDER BY event_id LIMIT 10)`)
	before := b.rows(t, b.table())

	n, err := b.store.ArchiveSent(b.ctx, b.pool, time.Now().Add(-7*24*time.Hour), 300)
	if err != nil || n != 2500 {
		t.Fatalf("ArchiveSent = %d, %v; want 2500", n, err)
	}
	active, hist := b.rows(t, b.table()), b.rows(t, b.history())
	if len(active) != 60 || len(hist) != 2500 {
		t.Fatalf("after the archive: %d active, %d archived; want 60 and 2500", len(active), len(hist))
	}
	for id, js := range before {
		a, inActive := active[id]
		h, inHist := hist[id]
		switch {
		case inActive == inHist:
			t.Fatalf("event %s: in the active table %v, in the history %v", id, inActive, inHist)
		case inActive && a != js, inHist && h != js:
			t.Fatalf("event %s changed on the way:\n before %s\n after  %s%s", id, js, a, h)
		}
	}
	if got := b.count(t, "status = 20 AND sent_at < now() - interval '7 days'"); got != 0 {
		t.Fatalf("%d old SENT events left", got)
	}
	// Batches: ceil(2500/300) = 9 statements, none over 300 rows.
	var batches, largest int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*), max(n) FROM (SELECT count(*) AS n FROM `+b.history()+` GROUP BY archived_at) AS g`).Scan(&batches, &largest); err != nil {
		t.Fatal(err)
	}
	if batches != 9 || largest != 300 {
		t.Fatalf("%d batches, the largest %d rows; want 9 batches of at most 300", batches, largest)
	}
	if n, err := b.store.ArchiveSent(b.ctx, b.pool, time.Now().Add(-7*24*time.Hour), 0); err != nil || n != 0 {
		t.Fatalf("second ArchiveSent = %d, %v; want 0", n, err)
	}
	// The reconciliation's report still counts the archived events as SENT.
	report, err := b.store.EventsByStatus(b.ctx, b.pool, "")
	if err != nil {
		t.Fatal(err)
	}
	var sent int64
	for _, r := range report {
		if r.Status == outbox.StatusSent {
			sent += r.Events
		}
	}
	if sent != 2520 {
		t.Fatalf("EventsByStatus counts %d SENT events after the archive, want 2520 (2500 archived, 20 active)", sent)
	}
	// Everything SENT, with the default batch size; nothing unfinished.
	if n, err := b.store.ArchiveSent(b.ctx, b.pool, time.Now().Add(time.Hour), 0); err != nil || n != 20 {
		t.Fatalf("ArchiveSent of the recent events = %d, %v; want 20", n, err)
	}
	if got := b.count(t, "true"); got != 40 || b.count(t, "status = 20") != 0 {
		t.Fatalf("%d events left, want the 40 unfinished", got)
	}
	// A dedup key whose event was archived may be enqueued again, and that
	// event archived in its turn (the history does not make dedup keys
	// unique).
	b.exec(t, `DELETE FROM `+b.table())
	b.enqueue(t, evs[0])
	b.sendAll(t)
	if n, err := b.store.ArchiveSent(b.ctx, b.pool, time.Now().Add(time.Hour), 0); err != nil || n != 1 {
		t.Fatalf("ArchiveSent of a re-enqueued dedup key = %d, %v; want 1", n, err)
	}
	var twice int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+b.history()+` WHERE dedup_key = $1`, evs[0].DedupKey).Scan(&twice); err != nil || twice != 2 {
		t.Fatalf("%d archived events with dedup key %s (%v), want 2", twice, evs[0].DedupKey, err)
	}
}

// Bad input gets a *ValidationError and moves nothing.
func TestArchiveSentRejectsBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	b.enqueue(t, event(1), event(2))
	b.sendAll(t)
	for name, call := range map[string]func() (int64, error){
		"zero time":      func() (int64, error) { return b.store.ArchiveSent(b.ctx, b.pool, time.Time{}, 0) },
		"negative batch": func() (int64, error) { return b.store.ArchiveSent(b.ctx, b.pool, time.Now().Add(time.Hour), -1) },
		"batch too big": func() (int64, error) {
			return b.store.ArchiveSent(b.ctx, b.pool, time.Now().Add(time.Hour), outbox.MaxArchiveBatchSize+1)
		},
		"nil db": func() (int64, error) { return b.store.ArchiveSent(b.ctx, nil, time.Now().Add(time.Hour), 0) },
	} {
		n, err := call()
		var ve *outbox.Error
		if n != 0 || !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &ve) {
			t.Errorf("%s: %d, %v; want 0 and a *ValidationError", name, n, err)
		}
	}
	if got := b.count(t, "status = 20"); got != 2 {
		t.Fatalf("%d SENT events left after rejected calls, want 2", got)
	}
}

// The archive never moves an event a concurrent transaction still works
// on: a SENT row another transaction holds locked is skipped, an event
// whose MarkSent has not committed yet is still SENDING to the archive, and
// an event claimed (SENDING) stays. Once the other transactions end, the
// next run moves what is SENT.
func TestArchiveSentSkipsRowsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	b.enqueue(t, event(1), event(2), event(3), event(4))
	c := b.claim(t, "r", 2)
	if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: claimIDs(c)}); err != nil {
		t.Fatal(err)
	}
	held, other := claimIDs(c)[0], claimIDs(c)[1]
	c2 := b.claim(t, "r2", 2) // SENDING
	// One transaction holds a SENT row locked; another marks the two
	// SENDING events SENT without committing.
	locker, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(b.ctx)
	if _, err := locker.Exec(b.ctx, `SELECT 1 FROM `+b.table()+` WHERE event_id = $1 FOR UPDATE`, held); err != nil {
		t.Fatal(err)
	}
	marker, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer marker.Rollback(b.ctx)
	if res, err := b.store.Mark(b.ctx, marker, outbox.Outcome{Lease: c2.Lease, Sent: claimIDs(c2)}); err != nil || res.Marked != 2 {
		t.Fatalf("MarkSent in the open transaction = %+v, %v", res, err)
	}
	// ArchiveSent must pass the locked rows over, not wait for them.
	n, err := b.store.ArchiveSent(testwait.Context(t, b.ctx, testwait.Step), b.pool, time.Now().Add(time.Hour), 0)
	if err != nil || n != 1 {
		t.Fatalf("ArchiveSent with rows in flight = %d, %v; want 1 (only %s) without waiting for the locked rows", n, err, other)
	}
	if hist := b.rows(t, b.history()); len(hist) != 1 || hist[other] == "" {
		t.Fatalf("history %v, want only %s", hist, other)
	}
	if err := marker.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := locker.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := b.store.ArchiveSent(b.ctx, b.pool, time.Now().Add(time.Hour), 0); err != nil || n != 3 {
		t.Fatalf("ArchiveSent after the other transactions ended = %d, %v; want 3", n, err)
	}
	if b.count(t, "true") != 0 || len(b.rows(t, b.history())) != 4 {
		t.Fatal("not every event archived")
	}
}

// Archives that run while events are enqueued, claimed and marked SENT end
// with every event in exactly one of the two tables, and only SENT events
// in the history.
func TestArchiveSentConcurrentWithClaims(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	const total = 2000
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 4)
	wg.Add(1)
	go func() { // producer and relay
		defer wg.Done()
		defer close(done)
		for i := 0; i < total; i += 50 {
			var evs []outbox.Event
			for j := i; j < i+50; j++ {
				evs = append(evs, event(j))
			}
			if err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				_, err := b.store.Enqueue(b.ctx, tx, evs...)
				return err
			}); err != nil {
				errs <- err
				return
			}
			c, err := b.store.ClaimOutboxBatch(b.ctx, b.pool, "r", 40)
			if err != nil {
				errs <- err
				return
			}
			if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: claimIDs(c)}); err != nil {
				errs <- err
				return
			}
		}
	}()
	for range 2 { // two archivers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := b.store.ArchiveSent(b.ctx, b.pool, time.Now().Add(time.Hour), 7); err != nil {
					errs <- err
					return
				}
				select {
				case <-done:
					return
				default:
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	b.sendAll(t)
	if _, err := b.store.ArchiveSent(b.ctx, b.pool, time.Now().Add(time.Hour), 0); err != nil {
		t.Fatal(err)
	}
	active, hist := b.rows(t, b.table()), b.rows(t, b.history())
	for id := range active {
		if _, dup := hist[id]; dup {
			t.Fatalf("event %s in both tables", id)
		}
	}
	var notSent int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+b.history()+` WHERE status <> 20`).Scan(&notSent); err != nil {
		t.Fatal(err)
	}
	if len(active) != 0 || len(hist) != total || notSent != 0 {
		t.Fatalf("%d active, %d archived (%d not SENT); want 0, %d, 0", len(active), len(hist), notSent, total)
	}
}

// An archive interrupted inside a batch — its statement waiting, the
// batch's rows already deleted within it — by a cancelled context, and
// then by a connection cut, moved only the batches before; run again, it
// moves the rest: nothing lost, nothing twice.
func TestArchiveSentInterruptedThenResumed(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"cancel", "cut"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{})
			var evs []outbox.Event
			for i := range 35 {
				evs = append(evs, event(i))
			}
			b.enqueue(t, evs...)
			b.sendAll(t)
			before := b.rows(t, b.table())
			// The 15th event in key order is in the second batch of 10.
			var victim uuid.UUID
			if err := b.pool.QueryRow(b.ctx, `SELECT event_id FROM `+b.table()+` ORDER BY event_id OFFSET 14 LIMIT 1`).Scan(&victim); err != nil {
				t.Fatal(err)
			}
			// An uncommitted copy of it in the history makes the second
			// batch's INSERT wait (after its DELETE) for this transaction.
			blocker, err := b.pool.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Rollback(b.ctx)
			if _, err := blocker.Exec(b.ctx, `INSERT INTO `+b.history()+` SELECT o.* FROM `+b.table()+` AS o WHERE event_id = $1`, victim); err != nil {
				t.Fatal(err)
			}
			conn := pgtest.Conn(t)
			pid := conn.PgConn().PID()
			ctx, cancel := context.WithCancel(b.ctx)
			defer cancel()
			type result struct {
				n   int64
				err error
			}
			res := make(chan result, 1)
			go func() {
				n, err := b.store.ArchiveSent(ctx, conn, time.Now().Add(time.Hour), 10)
				res <- result{n, err}
			}()
			waitBlocked(t, b, pid)
			if how == "cancel" {
				cancel()
			} else {
				b.exec(t, `SELECT pg_terminate_backend($1)`, pid)
			}
			r := testwait.Recv(t, res, "the interrupted archive did not return")
			if r.err == nil || r.n != 10 {
				t.Fatalf("interrupted ArchiveSent = %d, %v; want the first batch (10) and an error", r.n, r.err)
			}
			// The server may not have seen the interruption yet (a
			// cancel request races with the lock wait; a backend waiting
			// for a lock notices a closed socket only when it writes):
			// the batch then completes when the blocker ends. Either way
			// it moves whole batches only.
			if err := blocker.Rollback(b.ctx); err != nil {
				t.Fatal(err)
			}
			waitIdle(t, b, pid)
			if got := len(b.rows(t, b.history())); got != 10 && got != 20 {
				t.Fatalf("%d events archived after the interruption, want whole batches of 10", got)
			}
			n, err := b.store.ArchiveSent(b.ctx, b.pool, time.Now().Add(time.Hour), 10)
			if err != nil || n != 15 && n != 25 {
				t.Fatalf("resumed ArchiveSent = %d, %v; want the rest (25, or 15 after a batch that completed)", n, err)
			}
			hist := b.rows(t, b.history())
			if b.count(t, "true") != 0 || len(hist) != len(before) {
				t.Fatalf("%d archived of %d", len(hist), len(before))
			}
			for id, js := range before {
				if hist[id] != js {
					t.Fatalf("event %s: archived as %q, was %q", id, hist[id], js)
				}
			}
		})
	}
}

// waitBlocked waits until backend pid waits for a lock.
func waitBlocked(t *testing.T, b *bundle, pid uint32) {
	t.Helper()
	ctx := testwait.Context(t, b.ctx, testwait.Step)
	for {
		var waiting bool
		if err := b.pool.QueryRow(b.ctx, `SELECT coalesce(cardinality(pg_blocking_pids($1)) > 0, false)`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the archive did not wait for the blocking transaction within %v", testwait.Step)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitIdle waits until backend pid runs no statement (or is gone).
func waitIdle(t *testing.T, b *bundle, pid uint32) {
	t.Helper()
	ctx := testwait.Context(t, b.ctx, testwait.Step)
	for {
		var active bool
		if err := b.pool.QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active')`, pid).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if !active {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the interrupted archive's statement did not end within %v", testwait.Step)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// event_outbox_history has exactly event_outbox's columns (name, type,
// nullability, default), plus archived_at.
func TestArchiveHistoryMatchesTable(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	cols := func(table string) map[string]string {
		rows, err := b.pool.Query(b.ctx, `SELECT column_name, format('%s %s %s', data_type, is_nullable, coalesce(column_default, ''))
			FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2`, b.schema, table)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		var name, desc string
		if _, err := pgx.ForEachRow(rows, []any{&name, &desc}, func() error { out[name] = desc; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	active, hist := cols("event_outbox"), cols("event_outbox_history")
	if hist["archived_at"] == "" {
		t.Fatal("no archived_at in the history")
	}
	delete(hist, "archived_at")
	if len(active) != len(hist) {
		t.Fatalf("columns: active %v, history %v", active, hist)
	}
	for name, desc := range active {
		if name == "seq" { // an identity in the active table, a plain bigint in the history
			desc = "bigint NO "
		}
		if hist[name] != desc {
			t.Errorf("column %s: %q in event_outbox, %q in the history", name, desc, hist[name])
		}
	}
}
