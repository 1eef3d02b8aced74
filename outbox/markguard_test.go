package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// markOps are the three lists of an Outcome, each as a call of Store.Mark
// on ids under lease l.
func markOps(b *bundle) map[string]func(l outbox.Lease, ids ...uuid.UUID) (outbox.MarkResult, error) {
	return map[string]func(l outbox.Lease, ids ...uuid.UUID) (outbox.MarkResult, error){
		"Sent": func(l outbox.Lease, ids ...uuid.UUID) (outbox.MarkResult, error) {
			return b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: l, Sent: ids})
		},
		"Failed": func(l outbox.Lease, ids ...uuid.UUID) (outbox.MarkResult, error) {
			fs := make([]outbox.Failure, len(ids))
			for i, id := range ids {
				fs[i] = outbox.Failure{EventID: id, Err: errors.New("broker down")}
			}
			return b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: l, Failed: fs})
		},
		"Released": func(l outbox.Lease, ids ...uuid.UUID) (outbox.MarkResult, error) {
			return b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: l, Released: ids})
		},
	}
}

// A lease is its owner AND its claim time: a relay that presents another
// relay's claim time under its own name touches nothing (the event stays
// SENDING under its owner), and the lost event is reported once, as it is
// now, in a table that holds other events.
func TestMarkUnderAnotherOwnerTouchesNothing(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Sent", "Failed", "Released"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{})
			b.enqueue(t, event(1), event(2), event(3))
			c := b.claim(t, "relay-a", 2)
			if len(c.Messages) != 2 {
				t.Fatalf("claimed %d, want 2", len(c.Messages))
			}
			id := c.Messages[0].EventID
			thief := outbox.Lease{Owner: "relay-b", LockedAt: c.LockedAt}
			res, err := markOps(b)[name](thief, id)
			var lost *outbox.Error
			if !errors.Is(err, outbox.ErrLeaseLost) || !errors.As(err, &lost) || res.Marked != 0 || res.Dead != 0 {
				t.Fatalf("Mark(%s) under relay-b with relay-a's claim time = %+v, %v; want ErrLeaseLost, nothing marked", name, res, err)
			}
			want := outbox.LostEvent{EventID: id, Exists: true, Status: outbox.StatusSending, LockedBy: "relay-a"}
			for _, got := range [][]outbox.LostEvent{res.Lost, lost.Lost} {
				if len(got) != 1 || got[0] != want {
					t.Fatalf("lost = %+v, want only %+v", got, want)
				}
			}
			for _, m := range c.Messages {
				if st, retries, _ := b.status(t, m.EventID); st != outbox.StatusSending || retries != 0 {
					t.Fatalf("event %s = %v (%d retries), want still SENDING", m.EventID, st, retries)
				}
			}
			if n := b.count(t, `locked_by = 'relay-a' AND locked_at = $1`, c.LockedAt); n != 2 {
				t.Fatalf("%d events under relay-a's lease, want 2", n)
			}
			// The owner's own lease still marks both.
			if res, err := markOps(b)[name](c.Lease, claimIDs(c)...); err != nil || res.Marked != 2 {
				t.Fatalf("Mark(%s) under the real lease = %+v, %v", name, res, err)
			}
		})
	}
}

// An outcome mixing a held event and an unknown id marks the held one and
// reports only the unknown one: not existing, status 0 (PENDING), no owner.
func TestMarkReportsOnlyTheEventsNotHeld(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Sent", "Failed", "Released"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{})
			b.enqueue(t, event(1), event(2), event(3))
			c := b.claim(t, "relay-a", 2)
			if len(c.Messages) != 2 {
				t.Fatalf("claimed %d, want 2", len(c.Messages))
			}
			unknown := uuid.New()
			res, err := markOps(b)[name](c.Lease, c.Messages[0].EventID, unknown, c.Messages[1].EventID)
			if !errors.Is(err, outbox.ErrLeaseLost) || res.Marked != 2 {
				t.Fatalf("Mark(%s) = %+v, %v; want 2 marked and ErrLeaseLost", name, res, err)
			}
			want := outbox.LostEvent{EventID: unknown, Exists: false, Status: outbox.StatusPending, LockedBy: ""}
			if len(res.Lost) != 1 || res.Lost[0] != want {
				t.Fatalf("lost = %+v, want only %+v", res.Lost, want)
			}
			if n := b.count(t, `status = 10`); n != 0 {
				t.Fatalf("%d events still SENDING", n)
			}
		})
	}
}

// A Store with Config.Notify notifies only when its Enqueue inserted: an
// Enqueue of duplicates only (one event, and several) sends nothing. The
// sentinel sent after each commit must be the next notification.
func TestNotifyOnlyWhenInserted(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{Notify: true})
	b.enqueue(t, event(1), event(2))
	listener := pgtest.Conn(t)
	channel := outbox.Channel(b.store)
	if _, err := listener.Exec(b.ctx, `LISTEN `+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for _, evs := range [][]outbox.Event{{event(1)}, {event(1), event(2)}} {
		res := b.enqueue(t, evs...)
		for i, r := range res {
			if r.New {
				t.Fatalf("duplicate %d enqueued as new: %+v", i, r)
			}
		}
		sentinel := fmt.Sprintf("sentinel-%d", len(evs))
		if _, err := b.pool.Exec(b.ctx, `SELECT pg_notify($1, $2)`, channel, sentinel); err != nil {
			t.Fatal(err)
		}
		n, err := listener.WaitForNotification(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Payload != sentinel {
			t.Fatalf("Enqueue of %d duplicates: notification %q before the sentinel", len(evs), n.Payload)
		}
	}
}

// countingQuerier passes every call to the pool and records what each
// purge statement reported deleting (its first column).
type countingQuerier struct {
	pgtx.Querier
	deleted []int64
}

func (q *countingQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return scanHook{q.Querier.QueryRow(ctx, sql, args...), q}
}

type scanHook struct {
	pgx.Row
	q *countingQuerier
}

func (r scanHook) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if p, ok := dest[0].(*int64); ok && err == nil {
		r.q.deleted = append(r.q.deleted, *p)
	}
	return err
}

// PurgeSent deletes in statements of at most batchSize rows.
func TestPurgeSentInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	evs := make([]outbox.Event, 5)
	for i := range evs {
		evs[i] = event(i)
	}
	b.enqueue(t, evs...)
	b.sendAll(t)
	q := &countingQuerier{Querier: b.pool}
	n, err := b.store.PurgeSent(b.ctx, q, time.Now().Add(time.Hour), 2)
	if err != nil || n != 5 {
		t.Fatalf("PurgeSent = %d, %v; want 5", n, err)
	}
	if len(q.deleted) != 3 {
		t.Fatalf("statements deleted %v, want 3 batches of at most 2", q.deleted)
	}
	for _, d := range q.deleted {
		if d > 2 {
			t.Fatalf("statements deleted %v, want at most 2 each", q.deleted)
		}
	}
}

// Recover takes at most limit leases, the oldest first, and its sweep
// neither recovers nor locks a lease that has not expired: run in an open
// transaction, it leaves the young lease's row free for its owner's Mark
// (FOR UPDATE NOWAIT on it succeeds). Both forms: every expired lease, and
// one claim's.
func TestRecoverTakesOnlyExpiredLeasesUpToLimit(t *testing.T) {
	t.Parallel()
	for _, form := range []string{"every", "lease"} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{})
			b.enqueue(t, event(1), event(2), event(3), event(4))
			if c := b.claim(t, "relay-a", 3); len(c.Messages) != 3 {
				t.Fatalf("claimed %d, want 3", len(c.Messages))
			}
			young := b.claim(t, "relay-b", 1)
			if len(young.Messages) != 1 {
				t.Fatalf("claimed %d, want 1", len(young.Messages))
			}
			at := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
			b.exec(t, `UPDATE `+b.table()+` SET locked_at = $1 WHERE locked_by = 'relay-a'`, at)
			old, of := outbox.Lease{}, outbox.Lease{}
			if form == "lease" {
				old, of = outbox.Lease{Owner: "relay-a", LockedAt: at}, young.Lease
			}
			tx, err := b.pool.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(b.ctx)
			for _, step := range []struct{ limit, want int }{{1, 1}, {10, 2}} {
				got, err := b.store.Recover(b.ctx, tx, old, 30*time.Minute, step.limit)
				if err != nil || len(got) != step.want {
					t.Fatalf("Recover(limit %d) = %+v, %v; want %d", step.limit, got, err, step.want)
				}
				for _, r := range got {
					if r.LockedBy != "relay-a" || r.Status != outbox.StatusRetry {
						t.Fatalf("recovered %+v, want relay-a's event, RETRY", r)
					}
				}
			}
			if got, err := b.store.Recover(b.ctx, tx, of, 30*time.Minute, 10); err != nil || len(got) != 0 {
				t.Fatalf("Recover of the young lease = %+v, %v; want nothing", got, err)
			}
			var id uuid.UUID
			err = b.pool.QueryRow(b.ctx, `SELECT event_id FROM `+b.table()+` WHERE event_id = $1 FOR UPDATE NOWAIT`, young.Messages[0].EventID).Scan(&id)
			if err != nil {
				t.Fatalf("the young lease's row is locked by the sweep's transaction: %v", err)
			}
			if err := tx.Commit(b.ctx); err != nil {
				t.Fatal(err)
			}
			if st, retries, _ := b.status(t, young.Messages[0].EventID); st != outbox.StatusSending || retries != 0 {
				t.Fatalf("young lease's event = %v (%d retries), want SENDING", st, retries)
			}
		})
	}
}

// A recovered lease counts the lost attempt: the event whose last allowed
// attempt it was goes DEAD, the other RETRY. Both forms of Recover.
func TestRecoverLastAttemptGoesDead(t *testing.T) {
	t.Parallel()
	for _, form := range []string{"every", "lease"} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{})
			last, spare := event(1), event(2)
			last.MaxRetries, spare.MaxRetries = 1, 2
			res := b.enqueue(t, last, spare)
			if c := b.claim(t, "relay-a", 2); len(c.Messages) != 2 {
				t.Fatalf("claimed %d, want 2", len(c.Messages))
			}
			at := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
			b.exec(t, `UPDATE `+b.table()+` SET locked_at = $1`, at)
			of := outbox.Lease{}
			if form == "lease" {
				of = outbox.Lease{Owner: "relay-a", LockedAt: at}
			}
			got, err := b.store.Recover(b.ctx, b.pool, of, time.Minute, 10)
			if err != nil || len(got) != 2 {
				t.Fatalf("Recover = %+v, %v; want 2", got, err)
			}
			want := map[uuid.UUID]outbox.Status{res[0].EventID: outbox.StatusDead, res[1].EventID: outbox.StatusRetry}
			for _, r := range got {
				if r.Status != want[r.EventID] {
					t.Fatalf("recovered %+v, want status %v", r, want[r.EventID])
				}
				if st, retries, _ := b.status(t, r.EventID); st != want[r.EventID] || retries != 1 {
					t.Fatalf("event %s = %v (%d retries), want %v after 1", r.EventID, st, retries, want[r.EventID])
				}
			}
		})
	}
}

// Recover of one claim takes only that claim's events: not another
// relay's claim expired at the same instant, nor an older expired claim of
// the same relay.
func TestRecoverLeaseTakesOnlyItsClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	b.enqueue(t, event(1), event(2), event(3))
	mine, older, other := b.claim(t, "relay-a", 1), b.claim(t, "relay-a", 1), b.claim(t, "relay-b", 1)
	at := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	for c, when := range map[*outbox.Claim]time.Time{&mine: at, &older: at.Add(-time.Minute), &other: at} {
		if len(c.Messages) != 1 {
			t.Fatalf("claimed %d, want 1", len(c.Messages))
		}
		b.exec(t, `UPDATE `+b.table()+` SET locked_at = $2 WHERE event_id = $1`, c.Messages[0].EventID, when)
	}
	got, err := b.store.Recover(b.ctx, b.pool, outbox.Lease{Owner: "relay-a", LockedAt: at}, time.Minute, 10)
	if err != nil || len(got) != 1 || got[0].EventID != mine.Messages[0].EventID {
		t.Fatalf("Recover(relay-a's claim) = %+v, %v; want only %s", got, err, mine.Messages[0].EventID)
	}
	if n := b.count(t, `status = 10`); n != 2 {
		t.Fatalf("%d events still SENDING, want 2 (the other claims)", n)
	}
}

// EventsByStatus with a topic counts that topic's events only; with ""
// every topic's.
func TestEventsByStatusFiltersTopic(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	other := event(2)
	other.Topic = "PAY_EVENT"
	b.enqueue(t, event(1), other, event(3))
	for topic, want := range map[string][]outbox.TagStatusCount{
		"ORDER_EVENT": {{Topic: "ORDER_EVENT", Tag: "ORDER_CREATED", Status: outbox.StatusPending, Events: 2}},
		"PAY_EVENT":   {{Topic: "PAY_EVENT", Tag: "ORDER_CREATED", Status: outbox.StatusPending, Events: 1}},
		"": {{Topic: "ORDER_EVENT", Tag: "ORDER_CREATED", Status: outbox.StatusPending, Events: 2},
			{Topic: "PAY_EVENT", Tag: "ORDER_CREATED", Status: outbox.StatusPending, Events: 1}},
	} {
		got, err := b.store.EventsByStatus(b.ctx, b.pool, topic)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("EventsByStatus(%q) = %+v, %v; want %+v", topic, got, err, want)
		}
	}
}

// Stats counts each status apart (1 PENDING, 2 SENDING, 3 RETRY, 4 DEAD,
// 5 SENT) and OldestWaiting is the age of the oldest PENDING or RETRY
// event: two hours, not the three of the older SENDING, DEAD and SENT
// events.
func TestStatsCountsEachStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	evs := make([]outbox.Event, 15)
	for i := range evs {
		evs[i] = event(i)
	}
	res := b.enqueue(t, evs...)
	ids := func(from, to int) []uuid.UUID {
		var out []uuid.UUID
		for _, r := range res[from:to] {
			out = append(out, r.EventID)
		}
		return out
	}
	b.exec(t, `UPDATE `+b.table()+` SET created_at = now() - interval '1 hour' WHERE event_id = ANY($1)`, ids(0, 1))
	b.exec(t, `UPDATE `+b.table()+` SET status = 10, locked_by = 'r', locked_at = now(), created_at = now() - interval '3 hours' WHERE event_id = ANY($1)`, ids(1, 3))
	b.exec(t, `UPDATE `+b.table()+` SET status = 30, retry_count = 1, created_at = now() - interval '2 hours' WHERE event_id = ANY($1)`, ids(3, 6))
	b.exec(t, `UPDATE `+b.table()+` SET status = 40, retry_count = max_retry, created_at = now() - interval '3 hours' WHERE event_id = ANY($1)`, ids(6, 10))
	b.exec(t, `UPDATE `+b.table()+` SET status = 20, sent_at = now(), created_at = now() - interval '3 hours' WHERE event_id = ANY($1)`, ids(10, 15))
	st := b.stats(t)
	if st.Pending != 1 || st.Sending != 2 || st.Retry != 3 || st.Dead != 4 || st.Sent != 5 || st.SentEstimated {
		t.Fatalf("stats = %+v; want 1 PENDING, 2 SENDING, 3 RETRY, 4 DEAD, 5 SENT (exact)", st)
	}
	if st.OldestWaiting < 2*time.Hour || st.OldestWaiting >= 3*time.Hour {
		t.Fatalf("OldestWaiting = %v; want the RETRY events' age, two hours", st.OldestWaiting)
	}
	// Backlog: the same but SENT.
	bl, err := b.store.Backlog(b.ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	if bl.Pending != 1 || bl.Sending != 2 || bl.Retry != 3 || bl.Dead != 4 || bl.Sent != 0 || bl.SentEstimated ||
		bl.OldestWaiting < 2*time.Hour || bl.OldestWaiting >= 3*time.Hour {
		t.Fatalf("backlog = %+v; want 1 PENDING, 2 SENDING, 3 RETRY, 4 DEAD, no SENT, the oldest waiting two hours old", bl)
	}
	if _, err := b.store.Backlog(b.ctx, nil); err == nil {
		t.Fatal("Backlog with a nil handle: no error")
	}
}

// Stats counts SENT exactly up to StatsExactSentPages pages, the limit
// included; past it, it estimates SENT from the table's own planner
// statistics (after ANALYZE: the table's row count, less the exact counts).
func TestStatsEstimatesSentOfABigTable(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	b.enqueue(t, event(1))
	sent, others := 0, 0
	// About 1.5 kB a row, uncompressed: 4 rows a page. status 20 (SENT)
	// counts in sent; the others in others, numbered apart.
	insertStatus := func(n, status int) {
		first := 1_000_000 + others
		if status == 20 {
			first = sent
		}
		b.exec(t, `INSERT INTO `+b.table()+` (event_id, dedup_key, aggregate_type, aggregate_id, topic, message_key,
			schema_version, payload, status, sent_at, locked_by, locked_at)
			SELECT gen_random_uuid(), 'big' || g, 'ORDER', g::text, 'ORDER_EVENT', g::text, 1,
			       jsonb_build_object('pad', (SELECT string_agg(md5(g::text || ':' || i), '') FROM generate_series(1, 45) AS i)),
			       $3::int, CASE WHEN $3::int = 20 THEN now() END,
			       CASE WHEN $3::int = 10 THEN 'relay' END, CASE WHEN $3::int = 10 THEN now() END
			FROM generate_series($1::int + 1, $1::int + $2::int) AS g`, first, n, status)
		if status == 20 {
			sent += n
		} else {
			others += n
		}
	}
	insert := func(n int) { insertStatus(n, 20) }
	pages := func() int64 {
		var n int64
		if err := b.pool.QueryRow(b.ctx, `SELECT pg_relation_size($1::regclass) / current_setting('block_size')::int8`, b.table()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	insert(3900)
	for pages() < outbox.StatsExactSentPages { // one page at a time
		insert(1)
	}
	if n := pages(); n != outbox.StatsExactSentPages {
		t.Fatalf("the table grew to %d pages, want exactly %d", n, outbox.StatsExactSentPages)
	}
	if st := b.stats(t); st.SentEstimated || st.Sent != int64(sent) || st.Pending != 1 {
		t.Fatalf("stats of a %d-page table = %+v; want 1 PENDING and %d SENT, counted", outbox.StatsExactSentPages, st, sent)
	}
	insert(500)
	// Unsent events in every status, in counts far apart, so that the
	// estimate, which takes each exact count from the table's row count,
	// is off by twice a count when it adds one instead.
	for status, n := range map[int]int{0: 399, 10: 100, 30: 200, 40: 300} {
		insertStatus(n, status)
	}
	b.exec(t, `ANALYZE `+b.table())
	n := pages()
	if n <= outbox.StatsExactSentPages {
		t.Fatalf("the table has %d pages, want more than %d", n, outbox.StatsExactSentPages)
	}
	st := b.stats(t)
	if !st.SentEstimated || st.Pending != 400 || st.Sending != 100 || st.Retry != 200 || st.Dead != 300 ||
		st.Sent < int64(sent)*99/100 || st.Sent > int64(sent)*101/100 {
		t.Fatalf("stats of a %d-page table = %+v; want 400 PENDING, 100 SENDING, 200 RETRY, 300 DEAD and an estimate of %d SENT", n, st, sent)
	}
}

// The dedup-key reads of the enqueue statements are probes of
// uq_outbox_dedup (an Index Cond on dedup_key), never a read of the whole
// table, as sql/enqueue.sql promises: in a table of 20,000 events, the
// plans of the many-event statement (with and without NOTIFY), of the
// single-event statement with NOTIFY and of the holders' read.
func TestEnqueueProbesDedupIndex(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	notifying, err := outbox.New(outbox.Config{Schema: b.schema, Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	b.exec(t, `INSERT INTO `+b.table()+` (event_id, dedup_key, aggregate_type, aggregate_id, topic, message_key,
			schema_version, payload)
		SELECT gen_random_uuid(), 'd' || g, 'ORDER', g::text, 'ORDER_EVENT', g::text, 1, '{}'
		FROM generate_series(1, 20000) AS g`)
	b.exec(t, `ANALYZE `+b.table())
	ids := []string{uuid.NewString(), uuid.NewString()}
	keys := []string{"d1", "new"}
	many := []any{ids, keys, []string{"ORDER", "ORDER"}, []string{"1", "2"}, []string{"T", "T"}, []*string{nil, nil},
		[]string{"1", "2"}, []*string{nil, nil}, []int32{1, 1}, []string{"{}", "{}"}, []string{"{}", "{}"},
		[]int64{0, 0}, []int32{16, 16}, b.schema}
	var nilText *string
	one := []any{uuid.New(), "d1", "ORDER", "1", "T", nilText, "1", int32(1), "{}", "{}", int64(0), int32(16), nilText,
		outbox.Channel(notifying)}
	for name, plan := range map[string]string{
		"enqueue":            explain(t, b.ctx, b.pool, false, outbox.EnqueueSQL(b.store), many...),
		"enqueue_notify":     explain(t, b.ctx, b.pool, false, outbox.EnqueueSQL(notifying), append(many, outbox.Channel(notifying))...),
		"enqueue_one_notify": explain(t, b.ctx, b.pool, false, outbox.EnqueueOneSQL(notifying), one...),
		"enqueue_holders":    explain(t, b.ctx, b.pool, false, outbox.EnqueueHoldersSQL(b.store), keys),
	} {
		probe := false
		for _, line := range strings.Split(plan, "\n") {
			probe = probe || strings.Contains(line, "Index Cond") && strings.Contains(line, "dedup_key")
		}
		if !probe || strings.Contains(plan, "Seq Scan on event_outbox") {
			t.Errorf("%s does not probe uq_outbox_dedup:\n%s", name, plan)
		}
	}
}
