package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/outbox"
)

func (b *bundle) claim(t testing.TB, owner string, limit int) outbox.Claim {
	t.Helper()
	c, err := b.store.ClaimOutboxBatch(b.ctx, b.pool, owner, limit)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (b *bundle) status(t testing.TB, id uuid.UUID) (st outbox.Status, retries int, lastErr string) {
	t.Helper()
	var s int16
	var le *string
	if err := b.pool.QueryRow(b.ctx, `SELECT status, retry_count, last_error FROM `+b.table()+` WHERE event_id = $1`, id).Scan(&s, &retries, &le); err != nil {
		t.Fatal(err)
	}
	if le != nil {
		lastErr = *le
	}
	return outbox.Status(s), retries, lastErr
}

func TestClaimMarkSent(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	var evs []outbox.Event
	for i := range 5 {
		evs = append(evs, event(i))
	}
	enq := b.enqueue(t, evs...)

	c := b.claim(t, "relay-a", 3)
	if len(c.Messages) != 3 || c.Owner != "relay-a" || c.LockedAt.IsZero() {
		t.Fatalf("claim = %+v", c)
	}
	for i, m := range c.Messages {
		if m.EventID != enq[i].EventID || m.Attempt != 1 || m.Topic != "ORDER_EVENT" || m.Tag != "ORDER_CREATED" ||
			m.MessageKey != fmt.Sprint(i) || m.SchemaVersion != 1 || m.MaxRetries != outbox.DefaultMaxRetries {
			t.Fatalf("message %d = %+v, want event %s (oldest first)", i, m, enq[i].EventID)
		}
	}
	if n := b.count(t, "status = 10 AND locked_by = 'relay-a' AND locked_at IS NOT NULL"); n != 3 {
		t.Fatalf("SENDING rows = %d", n)
	}
	// Another relay gets only the rest.
	c2 := b.claim(t, "relay-b", 10)
	if len(c2.Messages) != 2 {
		t.Fatalf("second claim got %d", len(c2.Messages))
	}
	if c3 := b.claim(t, "relay-c", 10); len(c3.Messages) != 0 {
		t.Fatalf("third claim got %d, want none", len(c3.Messages))
	}

	// Wrong owner: nothing marked, typed error naming the holder.
	res, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: outbox.Lease{Owner: "relay-b", LockedAt: c.LockedAt}, Sent: claimIDs(c)})
	var lost *outbox.Error
	if !errors.Is(err, outbox.ErrLeaseLost) || !errors.As(err, &lost) || res.Marked != 0 || len(lost.Lost) != 3 ||
		lost.Lost[0].Status != outbox.StatusSending || lost.Lost[0].LockedBy != "relay-a" || !lost.Lost[0].Exists {
		t.Fatalf("MarkSent with wrong owner = %+v, %v", res, err)
	}
	// Right lease plus an unknown id: 3 marked, 1 lost (not found).
	unknown := uuid.Must(uuid.NewV7())
	res, err = b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: append(claimIDs(c), unknown, claimIDs(c)[0])})
	if !errors.As(err, &lost) || res.Marked != 3 || len(res.Lost) != 1 || res.Lost[0].EventID != unknown || res.Lost[0].Exists {
		t.Fatalf("MarkSent = %+v, %v", res, err)
	}
	// Marking again: already SENT, lost, untouched.
	res, err = b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: claimIDs(c)})
	if !errors.As(err, &lost) || res.Marked != 0 || lost.Lost[0].Status != outbox.StatusSent {
		t.Fatalf("second MarkSent = %+v, %v", res, err)
	}
	if n := b.count(t, "status = 20 AND sent_at IS NOT NULL AND locked_by IS NULL"); n != 3 {
		t.Fatalf("SENT rows = %d", n)
	}
	st := b.stats(t)
	if st.Sent != 3 || st.Sending != 2 || st.Pending != 0 || st.OldestWaiting != 0 {
		t.Fatalf("stats = %+v", st)
	}

	// Pipelined: claim-less mark of the second claim through a batch.
	var qb pgx.Batch
	var r2 outbox.MarkResult
	if err := b.store.QueueMark(&qb, outbox.Outcome{Lease: c2.Lease, Sent: claimIDs(c2)}, &r2); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.SendBatch(b.ctx, &qb).Close(); err != nil || r2.Marked != 2 {
		t.Fatalf("queued MarkSent = %+v, %v", r2, err)
	}

	// Invalid input is rejected before anything is sent.
	for _, err := range []error{
		func() error { _, err := b.store.ClaimOutboxBatch(b.ctx, b.pool, "", 1); return err }(),
		func() error { _, err := b.store.ClaimOutboxBatch(b.ctx, b.pool, "x", 0); return err }(),
		func() error {
			_, err := b.store.ClaimOutboxBatch(b.ctx, b.pool, strings.Repeat("x", 129), 1)
			return err
		}(),
		func() error {
			_, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: nil})
			return err
		}(),
		func() error {
			_, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: outbox.Lease{Owner: "x"}, Sent: claimIDs(c)})
			return err
		}(),
		func() error {
			_, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: []uuid.UUID{uuid.Nil}})
			return err
		}(),
		func() error {
			_, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Failed: []outbox.Failure{{EventID: unknown, Backoff: -1}}})
			return err
		}(),
		func() error {
			_, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Failed: []outbox.Failure{{EventID: unknown}, {EventID: unknown}}})
			return err
		}(),
		func() error { _, err := b.store.Recover(b.ctx, b.pool, outbox.Lease{}, 0, 1); return err }(),
		func() error { _, err := b.store.PurgeSent(b.ctx, b.pool, time.Now(), 0); return err }(),
	} {
		if !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Fatalf("err = %v, want ErrInvalidArgument", err)
		}
	}
}

func TestMarkFailedRetryBackoffDead(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	ev := event(1)
	ev.MaxRetries = 3
	id := b.enqueue(t, ev)[0].EventID
	huge := errors.New(strings.Repeat("错", 3000)) // 9000 bytes
	for attempt := 1; attempt <= 3; attempt++ {
		c := b.claim(t, "r", 10)
		if len(c.Messages) != 1 || c.Messages[0].Attempt != attempt {
			t.Fatalf("attempt %d: claim = %+v", attempt, c.Messages)
		}
		res, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Failed: []outbox.Failure{{EventID: id, Err: huge}}})
		if err != nil || res.Marked != 1 {
			t.Fatalf("attempt %d: MarkFailed = %+v, %v", attempt, res, err)
		}
		st, retries, lastErr := b.status(t, id)
		want := outbox.StatusRetry
		if attempt == 3 {
			want = outbox.StatusDead
		}
		if st != want || retries != attempt || res.Dead != map[bool]int{true: 1, false: 0}[attempt == 3] {
			t.Fatalf("attempt %d: status %v retries %d dead %d", attempt, st, retries, res.Dead)
		}
		if len(lastErr) > outbox.MaxLastErrorBytes || len(lastErr) < outbox.MaxLastErrorBytes-3 || !utf8.ValidString(lastErr) {
			t.Fatalf("last_error is %d bytes (valid UTF-8: %v)", len(lastErr), utf8.ValidString(lastErr))
		}
	}
	if c := b.claim(t, "r", 10); len(c.Messages) != 0 {
		t.Fatal("DEAD event claimed")
	}
	if st := b.stats(t); st.Dead != 1 {
		t.Fatalf("stats = %+v", st)
	}

	// A backoff keeps the event out of claims until it passes.
	id2 := b.enqueue(t, event(2))[0].EventID
	c := b.claim(t, "r", 10)
	if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Failed: []outbox.Failure{{EventID: id2, Err: errors.New("x\x00y\xff"), Backoff: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	if c := b.claim(t, "r", 10); len(c.Messages) != 0 {
		t.Fatal("event claimed during its backoff")
	}
	// Ready again exactly one backoff after the mark (both times are the
	// marking statement's).
	var wait time.Duration
	if err := b.pool.QueryRow(b.ctx, `SELECT (extract(epoch FROM available_at - updated_at) * 1000000)::int8 * 1000
		FROM `+b.table()+` WHERE event_id = $1`, id2).Scan(&wait); err != nil || wait != time.Hour {
		t.Fatalf("available_at - updated_at = %v, %v; want the backoff, 1h", wait, err)
	}
	if _, _, le := b.status(t, id2); le != "x\uFFFDy\uFFFD" {
		t.Fatalf("last_error = %q", le)
	}
	st := b.stats(t)
	if st.Retry != 1 || st.OldestWaiting <= 0 {
		t.Fatalf("stats = %+v", st)
	}
	// The CHECK bounds last_error for writers that bypass the package.
	if _, err := b.pool.Exec(b.ctx, `UPDATE `+b.table()+` SET last_error = repeat('x', 4001) WHERE event_id = $1`, id2); err == nil {
		t.Fatal("last_error of 4001 bytes accepted")
	}
}

func TestTruncateError(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3999, 4000, 4001, 4002, 9000} {
		s := outbox.TruncateError(strings.Repeat("é", n/2) + strings.Repeat("x", n%2))
		if len(s) > outbox.MaxLastErrorBytes || !utf8.ValidString(s) {
			t.Fatalf("n=%d: %d bytes, valid %v", n, len(s), utf8.ValidString(s))
		}
	}
	if outbox.TruncateError("short") != "short" {
		t.Fatal("short message changed")
	}
}

func TestReleaseKeepsAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	id := b.enqueue(t, event(1))[0].EventID
	c := b.claim(t, "r", 1)
	res, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Released: claimIDs(c)})
	if err != nil || res.Marked != 1 {
		t.Fatalf("Release = %+v, %v", res, err)
	}
	if st, retries, _ := b.status(t, id); st != outbox.StatusRetry || retries != 0 {
		t.Fatalf("after release: %v %d", st, retries)
	}
	if c2 := b.claim(t, "r2", 1); len(c2.Messages) != 1 || c2.Messages[0].Attempt != 1 {
		t.Fatalf("released event not claimable at once: %+v", c2)
	}
}

// Lease recovery is a compare-and-set: it never touches a row that was
// finished or claimed again, and the old owner cannot mark a recovered and
// re-claimed row.
func TestLeaseRecoveryIsCompareAndSet(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	b.enqueue(t, event(1), event(2), event(3))

	// Not expired yet: nothing recovered.
	c1 := b.claim(t, "relay-a", 1)
	if rec, err := b.store.Recover(b.ctx, b.pool, outbox.Lease{}, time.Hour, 100); err != nil || len(rec) != 0 {
		t.Fatalf("recovered %v, %v before expiry", rec, err)
	}
	// A SENT row is never recovered.
	if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c1.Lease, Sent: claimIDs(c1)}); err != nil {
		t.Fatal(err)
	}
	if rec, err := b.store.Recover(b.ctx, b.pool, outbox.Lease{}, time.Microsecond, 100); err != nil || len(rec) != 0 {
		t.Fatalf("recovered %v, %v: a SENT row", rec, err)
	}
	if st, _, _ := b.status(t, c1.Messages[0].EventID); st != outbox.StatusSent {
		t.Fatalf("SENT row became %v", st)
	}

	// Claimed by A, expired and recovered, claimed again by A itself: A's
	// old lease cannot mark it; the new lease can.
	old := b.claim(t, "relay-a", 1)
	id := old.Messages[0].EventID
	rec, err := b.store.Recover(b.ctx, b.pool, outbox.Lease{}, time.Microsecond, 100)
	if err != nil || len(rec) != 1 || rec[0].EventID != id || rec[0].LockedBy != "relay-a" || rec[0].Status != outbox.StatusRetry {
		t.Fatalf("recovered %+v, %v", rec, err)
	}
	if st, retries, le := b.status(t, id); st != outbox.StatusRetry || retries != 1 || !strings.HasPrefix(le, "SEND_LEASE_EXPIRED") {
		t.Fatalf("recovered row: %v %d %q", st, retries, le)
	}
	again := b.claim(t, "relay-a", 10) // the recovered event and event 3
	if len(again.Messages) != 2 || again.Messages[0].EventID != id || again.LockedAt.Equal(old.LockedAt) {
		t.Fatalf("re-claim = %+v", again)
	}
	res, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: old.Lease, Sent: []uuid.UUID{id}})
	if !errors.Is(err, outbox.ErrLeaseLost) || res.Marked != 0 {
		t.Fatalf("old lease MarkSent = %+v, %v", res, err)
	}
	if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: old.Lease, Failed: []outbox.Failure{{EventID: id}}}); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("old lease MarkFailed = %v", err)
	}
	if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: old.Lease, Released: []uuid.UUID{id}}); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("old lease Release = %v", err)
	}
	if st, _, _ := b.status(t, id); st != outbox.StatusSending {
		t.Fatalf("row = %v, want still SENDING under the new lease", st)
	}
	// RecoverLease of the old claim touches nothing either.
	if rec, err := b.store.Recover(b.ctx, b.pool, old.Lease, time.Microsecond, 1000); err != nil || len(rec) != 0 {
		t.Fatalf("RecoverLease(old) = %v, %v", rec, err)
	}
	// Another relay's claim is not recovered by RecoverLease of this one.
	b.enqueue(t, event(4))
	other := b.claim(t, "relay-b", 1)
	if rec, err := b.store.Recover(b.ctx, b.pool, again.Lease, time.Microsecond, 1000); err != nil || len(rec) != 2 {
		t.Fatalf("RecoverLease(again) = %v, %v", rec, err)
	}
	if st, _, _ := b.status(t, other.Messages[0].EventID); st != outbox.StatusSending {
		t.Fatalf("other relay's row = %v", st)
	}
}

// MarkSent and lease recovery race on the same expired claims: every row
// ends up either SENT (the mark won; recovery skipped it) or RETRY (recovery
// won; the mark reported it lost) — never both, never a SENT row recovered.
func TestLeaseRecoveryRacesMarkSent(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	const n, per = 1000, 10
	var evs []outbox.Event
	for i := range n {
		evs = append(evs, event(i))
	}
	b.enqueue(t, evs...)
	var claims []outbox.Claim
	for range n / per {
		claims = append(claims, b.claim(t, "relay-a", per))
	}

	var mu sync.Mutex
	marked := map[uuid.UUID]bool{}
	recovered := map[uuid.UUID]bool{}
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	start := make(chan struct{})
	for w := range 4 { // markers
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := w; i < len(claims); i += 4 {
				c := claims[i]
				res, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: claimIDs(c)})
				if err != nil && !errors.Is(err, outbox.ErrLeaseLost) {
					errc <- err
					return
				}
				lost := map[uuid.UUID]bool{}
				for _, l := range res.Lost {
					lost[l.EventID] = true
				}
				mu.Lock()
				for _, id := range claimIDs(c) {
					if !lost[id] {
						marked[id] = true
					}
				}
				mu.Unlock()
			}
		}()
	}
	for range 4 { // recoverers
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 30 {
				rec, err := b.store.Recover(b.ctx, b.pool, outbox.Lease{}, time.Microsecond, 7)
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				for _, r := range rec {
					if recovered[r.EventID] {
						errc <- fmt.Errorf("%s recovered twice", r.EventID)
					}
					recovered[r.EventID] = true
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for id := range marked {
		if recovered[id] {
			t.Fatalf("%s both marked SENT and recovered", id)
		}
	}
	sent := b.count(t, "status = 20")
	retry := b.count(t, "status = 30")
	sending := b.count(t, "status = 10")
	if sent != len(marked) || retry != len(recovered) || sent+retry+sending != n {
		t.Fatalf("SENT %d (marked %d), RETRY %d (recovered %d), SENDING %d", sent, len(marked), retry, len(recovered), sending)
	}
	if len(recovered) == 0 || len(marked) == 0 {
		t.Logf("race was one-sided: marked %d, recovered %d", len(marked), len(recovered))
	}
}

func TestOrderedClaimHeadOnly(t *testing.T) {
	t.Parallel()
	for _, deadBlocks := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeadBlocksKey=%v", deadBlocks), func(t *testing.T) {
			t.Parallel()
			b := setup(t, outbox.Config{DeadBlocksKey: deadBlocks})
			var evs []outbox.Event
			for i := range 3 {
				e := event(i)
				e.OrderingKey = "A"
				e.MaxRetries = 1
				evs = append(evs, e)
			}
			free := event(10) // no ordering key
			b1 := event(11)
			b1.OrderingKey = "B"
			evs = append(evs, free, b1)
			enq := b.enqueue(t, evs...)

			c := b.claim(t, "r", 100)
			got := map[uuid.UUID]bool{}
			for _, m := range c.Messages {
				got[m.EventID] = true
			}
			if len(c.Messages) != 3 || !got[enq[0].EventID] || !got[enq[3].EventID] || !got[enq[4].EventID] {
				t.Fatalf("claim = %d messages, want the heads of A and B and the free event", len(c.Messages))
			}
			// While A's head is SENDING, nothing more of A.
			if c2 := b.claim(t, "r", 100); len(c2.Messages) != 0 {
				t.Fatalf("claimed %d more", len(c2.Messages))
			}
			// A's head fails for good (max_retry 1): DEAD.
			if res, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Failed: []outbox.Failure{{EventID: enq[0].EventID}}}); err != nil || res.Dead != 1 {
				t.Fatalf("MarkFailed = %+v, %v", res, err)
			}
			c3 := b.claim(t, "r", 100)
			if deadBlocks {
				if len(c3.Messages) != 0 {
					t.Fatalf("DEAD head did not block its key: claimed %d", len(c3.Messages))
				}
				return
			}
			if len(c3.Messages) != 1 || c3.Messages[0].EventID != enq[1].EventID || c3.Messages[0].OrderingKey != "A" {
				t.Fatalf("after DEAD head: claim = %+v", c3.Messages)
			}
			if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c3.Lease, Sent: claimIDs(c3)}); err != nil {
				t.Fatal(err)
			}
			if c4 := b.claim(t, "r", 100); len(c4.Messages) != 1 || c4.Messages[0].EventID != enq[2].EventID {
				t.Fatalf("third of A: %+v", c4.Messages)
			}
		})
	}
}

// With a million SENT rows and a thousand pending, the claim reads the
// partial ready index (plan assertion, not timing). Not parallel on
// purpose: writing a million rows is I/O-bound, and run alone (sequential
// tests run before the parallel ones start) it stays well under 30 s on a
// small shared machine instead of competing with the relay tests.
func TestClaimUsesReadyIndex(t *testing.T) {
	b := setup(t, outbox.Config{})
	// Ordered UUIDs keep the primary key build an append.
	b.exec(t, `INSERT INTO `+b.table()+` (event_id, dedup_key, aggregate_type, aggregate_id, topic, message_key,
			schema_version, payload, status, sent_at, ordering_key, created_at)
		SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, lpad(g::text, 8, '0'), 'ORDER', g::text,
			'ORDER_EVENT', g::text, 1, '{}',
			CASE WHEN g <= 1000000 THEN 20 ELSE 0 END,
			CASE WHEN g <= 1000000 THEN statement_timestamp() END,
			CASE WHEN g > 1000000 AND g % 2 = 0 THEN 'key' || g % 50 END,
			statement_timestamp() - interval '1 day' + g * interval '1 millisecond'
		FROM generate_series(1, 1001000) AS g`)
	b.exec(t, `ANALYZE `+b.table())

	// Stats does not read the SENT history: every scan of the table it runs
	// goes through a partial index, and the exact SENT count of small
	// tables is never executed here.
	analyzed := explainAnalyze(t, b, outbox.StatsSQL(b.store), pgx.Identifier{b.schema, "event_outbox"}.Sanitize(), outbox.StatsExactSentPages)
	for _, line := range strings.Split(analyzed, "\n") {
		if strings.Contains(line, "Seq Scan on event_outbox") && !strings.Contains(line, "never executed") {
			t.Fatalf("stats reads the table:\n%s", analyzed)
		}
	}
	t.Logf("stats plan on 1,001,000 events:\n%s", analyzed)
	// Backlog does not even plan a scan of the table.
	if analyzed := explainAnalyze(t, b, outbox.BacklogSQL(b.store)); strings.Contains(analyzed, "Seq Scan on event_outbox") {
		t.Fatalf("backlog plans a scan of the table:\n%s", analyzed)
	}
	if bl, err := b.store.Backlog(b.ctx, b.pool); err != nil || bl.Pending != 1000 || bl.Sending+bl.Retry+bl.Dead+bl.Sent != 0 {
		t.Fatalf("backlog on 1,000,000 sent and 1,000 pending events: %+v, %v", bl, err)
	}
	st := b.stats(t)
	if st.Pending != 1000 || st.Sending+st.Retry+st.Dead != 0 || !st.SentEstimated || st.Sent < 900_000 || st.Sent > 1_100_000 {
		t.Fatalf("stats on 1,000,000 sent and 1,000 pending events: %+v", st)
	}

	text := explain(t, b.ctx, b.pool, false, outbox.ClaimSQL(b.store), 100, "relay")
	if !strings.Contains(text, "Index Scan using idx_outbox_ready") || strings.Contains(text, "Seq Scan") {
		t.Fatalf("claim plan does not use idx_outbox_ready:\n%s", text)
	}
	if !strings.Contains(text, "idx_outbox_ordering") {
		t.Fatalf("ordered-mode probe does not use idx_outbox_ordering:\n%s", text)
	}

	// The generic plan, which a prepared statement (pgx's statement cache)
	// may switch to after five executions, does not know the LIMIT: it must
	// still not read the table (an earlier form of the statement got a hash
	// join against a sequential scan of the table as its generic plan, on a
	// table of 40,000 pending events).
	generic := explain(t, b.ctx, b.pool, true, outbox.ClaimSQL(b.store), 100, "relay")
	if !strings.Contains(generic, "Index Scan using idx_outbox_ready") || strings.Contains(generic, "Seq Scan") {
		t.Fatalf("generic claim plan reads the table:\n%s", generic)
	}

	// And it works: 100 claimed, heads of keys only.
	c := b.claim(t, "relay", 100)
	if len(c.Messages) != 100 {
		t.Fatalf("claimed %d", len(c.Messages))
	}

	// Mark-sent's generic plan casts the id array once, not once per row
	// it filters (the cast of 200 texts per row tripled the cost of
	// marking), and finds the rows through an index.
	ids := make([]string, len(c.Messages))
	for i, m := range c.Messages {
		ids[i] = m.EventID.String()
	}
	generic = explain(t, b.ctx, b.pool, true, outbox.MarkSentSQL(b.store), ids, c.Owner, c.LockedAt)
	for _, line := range strings.Split(generic, "\n") {
		if strings.Contains(line, "::uuid[]") && (strings.Contains(line, "Filter:") || strings.Contains(line, "Cond:")) {
			t.Fatalf("generic mark-sent plan casts the ids per row:\n%s", generic)
		}
	}
	if strings.Contains(generic, "Seq Scan") {
		t.Fatalf("generic mark-sent plan reads the table:\n%s", generic)
	}
}

// explain returns the plan of sql with args, generic (plan_cache_mode =
// force_generic_plan, as a prepared statement may come to use) or custom.
func explain(t *testing.T, ctx context.Context, pool *pgxpool.Pool, generic bool, sql string, args ...any) string {
	t.Helper()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	mode := "auto"
	if generic {
		mode = "force_generic_plan"
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "RESET plan_cache_mode")
	// EXPLAIN EXECUTE shows the plan the prepared statement really uses.
	if _, err := conn.Conn().Prepare(ctx, "explained", sql); err != nil {
		t.Fatal(err)
	}
	defer conn.Conn().Deallocate(context.WithoutCancel(ctx), "explained")
	// The simple protocol writes the arguments into the text as literals.
	rows, err := conn.Query(ctx, "EXPLAIN EXECUTE explained"+params(len(args)),
		append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// explainAnalyze runs sql with args under EXPLAIN (ANALYZE, BUFFERS) and
// returns the plan with what each node read.
func explainAnalyze(t *testing.T, b *bundle, sql string, args ...any) string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) "+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

func params(n int) string {
	if n == 0 {
		return ""
	}
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf("$%d", i+1)
	}
	return "(" + strings.Join(ps, ", ") + ")"
}

func TestPurgeSentAndStats(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	var evs []outbox.Event
	for i := range 2600 {
		evs = append(evs, event(i))
	}
	b.enqueue(t, evs...)
	// 2500 sent long ago, 50 sent just now, 50 pending.
	for _, n := range []int{2500, 50} {
		for n > 0 {
			c := b.claim(t, "r", min(n, 1000))
			if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: claimIDs(c)}); err != nil {
				t.Fatal(err)
			}
			n -= len(c.Messages)
		}
		if n == 0 && b.count(t, "status = 20") == 2500 {
			b.exec(t, `UPDATE `+b.table()+` SET sent_at = sent_at - interval '8 days' WHERE status = 20`)
		}
	}
	st := b.stats(t)
	if st.Sent != 2550 || st.Pending != 50 || st.OldestWaiting <= 0 {
		t.Fatalf("stats = %+v", st)
	}
	n, err := b.store.PurgeSent(b.ctx, b.pool, time.Now().Add(-7*24*time.Hour), 300)
	if err != nil || n != 2500 {
		t.Fatalf("PurgeSent = %d, %v, want 2500", n, err)
	}
	st = b.stats(t)
	if st.Sent != 50 || st.Pending != 50 {
		t.Fatalf("after purge: %+v", st)
	}
	if n, err := b.store.PurgeSent(b.ctx, b.pool, time.Now().Add(time.Hour), 1000); err != nil || n != 50 {
		t.Fatalf("second purge = %d, %v", n, err)
	}
	if b.count(t, "true") != 50 {
		t.Fatal("purge deleted unsent events")
	}
}
