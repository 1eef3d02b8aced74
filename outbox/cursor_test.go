package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/outbox"
)

// TestRelayCursorFindsLateCommit: an event whose transaction enqueued it
// before a backlog but committed while the relay drained it sorts behind
// the relay's cursor. The relay still publishes it, and every event once.
func TestRelayCursorFindsLateCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx)
	late := event(0)
	late.DedupKey = "late"
	lateIDs, err := b.store.Enqueue(b.ctx, tx, []outbox.Event{late}...)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	b.enqueue(t, manyEvents(n, nil)...)

	rec := newRecorder()
	var once sync.Once
	commitErr := make(chan error, 1)
	rec.after = func(context.Context, []outbox.Message, []error) {
		// After the first batch, the cursor is past the late event's key.
		once.Do(func() { commitErr <- tx.Commit(b.ctx) })
	}
	m := newCounters(func(c *counters) bool { return c.published.Load() >= n+1 })
	stop := b.startRelays(t, 1, outbox.RelayConfig{Publish: rec.Publish, Observer: observe(m), BatchSize: 100, DisableListen: true}, nil)
	if err := testwait.Recv(t, commitErr, "the commit after the first batch"); err != nil {
		t.Fatal(err)
	}
	m.wait(t, b.ctx)
	stop()
	if rec.ok[lateIDs[0].EventID] != 1 {
		t.Fatalf("late event published %d times, want 1", rec.ok[lateIDs[0].EventID])
	}
	if st := b.stats(t); st.Sent != n+1 || st.Pending+st.Sending+st.Retry+st.Dead != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

// TestRelayCursorSeesOrderedSuccessor: an ordering key's next event becomes
// claimable when its predecessor is SENT, and sorts before the rest of the
// claim's events; the cursor stops at the key's event, so the relay claims
// the successor in its next batch instead of after the whole backlog.
func TestRelayCursorSeesOrderedSuccessor(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	const perKey, n = 20, 3000
	b.enqueue(t, manyEvents(perKey, func(i int, e *outbox.Event) {
		e.OrderingKey = "key"
		e.DedupKey = fmt.Sprintf("ordered-%d", i)
	})...)
	b.enqueue(t, manyEvents(n, nil)...)

	rec := newRecorder()
	m := newCounters(func(c *counters) bool { return c.published.Load() >= n+perKey })
	stop := b.startRelays(t, 1, outbox.RelayConfig{Publish: rec.Publish, Observer: observe(m), BatchSize: 100, DisableListen: true}, nil)
	m.wait(t, b.ctx)
	stop()

	// One relay, batches of 100: the key's events go one per batch, all
	// within the first perKey batches (2,000 events), and in order.
	lastOrdered, lastPlain, seq := -1, -1, int64(0)
	for i, a := range rec.log {
		if a.m.OrderingKey == "" {
			lastPlain = i
			continue
		}
		if a.m.Seq <= seq {
			t.Fatalf("ordered event seq %d published after seq %d", a.m.Seq, seq)
		}
		seq, lastOrdered = a.m.Seq, i
	}
	if lastOrdered > perKey*100 || lastOrdered > lastPlain {
		t.Fatalf("the key's last event was published %dth of %d: the relay skipped past its successors", lastOrdered+1, len(rec.log))
	}
}

// TestClaimAfterUsesIndexRange: the cursor's row comparison is the start
// key of the scan of idx_outbox_ready, in the custom and in the generic
// plan (the one pgx's statement cache may end up with).
func TestClaimAfterUsesIndexRange(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	b.enqueue(t, manyEvents(2000, nil)...)
	b.exec(t, "ANALYZE "+b.table())
	at := time.Now().Add(-time.Hour)
	for _, generic := range []bool{false, true} {
		plan := explain(t, b.ctx, b.pool, generic, outbox.ClaimAfterSQL(b.store), 100, "relay", at, at, uuid.Nil)
		if !strings.Contains(plan, "Index Scan using idx_outbox_ready") || strings.Contains(plan, "Seq Scan") ||
			!strings.Contains(plan, "ROW(available_at, created_at, event_id) > ROW(") {
			t.Fatalf("generic=%v: the cursor is not the start key of the scan of idx_outbox_ready:\n%s", generic, plan)
		}
	}
}
