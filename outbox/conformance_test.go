package outbox_test

// The outbox's conformance table and scenarios, run by
// internal/conformance: nil handles, invalid and hostile input, every pgx
// exec mode, and the fuzz targets.

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/conformance"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// hostile are strings an attacker would try through a text parameter.
var hostile = conformance.Hostile("event_outbox", "event_outbox")

// invalid is the outbox's refusal of invalid input; nilHandle its refusal
// of a nil transaction or connection.
var (
	invalid   = conformance.Typed(outbox.ErrInvalidArgument, func(e *outbox.Error) string { return e.Field })
	nilHandle = conformance.Typed(outbox.ErrInvalidArgument, func(e *outbox.Error) string { return e.Field }, "tx", "db", "q")
)

// exempt lists the exported methods of *outbox.Store with nothing to
// conform to, with the reason; every other method has a row in
// outboxEntries (TestConformanceTableCoversStore checks both).
var exempt = map[string]string{
	"Schema": "returns the configured schema name",
}

// TestConformanceTableCoversStore: every exported method of *outbox.Store
// is in the conformance table or exempt.
func TestConformanceTableCoversStore(t *testing.T) {
	t.Parallel()
	conformance.Covered(t, &outbox.Store{}, outboxEntries(nil), exempt)
}

// outboxEntries is the conformance table. The invalid cases cover what
// TestEnqueueInvalidInput, TestClaimMarkSent and TestConfigInvalid do not:
// the queued forms of claim, mark-sent, mark-failed and release (nil
// batch, invalid lease), Release, RecoverLease and RecoverExpired's limit,
// QueueEnqueue with a nil batch, NUL bytes in the owner, PurgeSent with a
// zero time, and payloads jsonb cannot store (database errors before).
// Covered there: Enqueue, QueueEnqueue, ClaimOutboxBatch, Mark,
// RecoverExpired's lease, PurgeSent's batch size, New, NewRelay. Stats
// and Backlog take no caller input.
func outboxEntries(b *bundle) []conformance.Entry {
	lease := outbox.Lease{Owner: "relay-1", LockedAt: time.Now()}
	ids := []uuid.UUID{uuid.Must(uuid.NewV7())}
	var claims, marks, recovers []conformance.Case
	for _, name := range []string{"no owner", "NUL owner", "long owner", "zero time"} {
		l := map[string]outbox.Lease{
			"no owner": {LockedAt: time.Now()}, "NUL owner": {Owner: "r\x00", LockedAt: time.Now()},
			"long owner": {Owner: strings.Repeat("o", 129), LockedAt: time.Now()}, "zero time": {Owner: "r"},
		}[name]
		marks = append(marks,
			conformance.Case{Name: "MarkSent/" + name, Do: func(_ context.Context, _ pgx.Tx, qb *pgx.Batch) error {
				return b.store.QueueMark(qb, outbox.Outcome{Lease: l, Sent: ids}, new(outbox.MarkResult))
			}},
			conformance.Case{Name: "MarkFailed/" + name, Do: func(_ context.Context, _ pgx.Tx, qb *pgx.Batch) error {
				return b.store.QueueMark(qb, outbox.Outcome{Lease: l, Failed: []outbox.Failure{{EventID: ids[0]}}}, new(outbox.MarkResult))
			}},
			conformance.Case{Name: "ReleaseLease/" + name, Do: func(_ context.Context, _ pgx.Tx, qb *pgx.Batch) error {
				return b.store.QueueMark(qb, outbox.Outcome{Lease: l, Released: ids}, new(outbox.MarkResult))
			}},
			conformance.Case{Name: "Release/" + name, Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
				_, err := b.store.Mark(ctx, tx, outbox.Outcome{Lease: l, Released: ids})
				return err
			}})
		recovers = append(recovers, conformance.Case{Name: "RecoverLease/" + name, Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
			_, err := b.store.Recover(ctx, tx, l, time.Minute, 1000)
			return err
		}})
		if name != "zero time" {
			claims = append(claims, conformance.Case{Name: name, Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
				_, err := b.store.ClaimOutboxBatch(ctx, tx, l.Owner, 1)
				return err
			}})
		}
	}
	claims = append(claims, conformance.Case{Name: "nil db", Do: func(ctx context.Context, _ pgx.Tx, _ *pgx.Batch) error {
		_, err := b.store.ClaimOutboxBatch(ctx, nil, "r", 1)
		return err
	}})
	for _, limit := range []int{0, 0, -1} {
		claims = append(claims, conformance.Case{Name: "limit", Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
			_, err := b.store.ClaimOutboxBatch(ctx, tx, "r", limit)
			return err
		}})
	}
	for _, limit := range []int{0, -1} {
		recovers = append(recovers, conformance.Case{Name: "RecoverExpired(limit)", Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
			_, err := b.store.Recover(ctx, tx, outbox.Lease{}, time.Minute, limit)
			return err
		}})
	}
	recovers = append(recovers, conformance.Case{Name: "RecoverLease(lease 0)", Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
		_, err := b.store.Recover(ctx, tx, lease, 0, 1000)
		return err
	}})
	queueMark := func(name string, o outbox.Outcome, qb func(*pgx.Batch) *pgx.Batch) conformance.Case {
		return conformance.Case{Name: name, Do: func(_ context.Context, _ pgx.Tx, b0 *pgx.Batch) error {
			return b.store.QueueMark(qb(b0), o, new(outbox.MarkResult))
		}}
	}
	none := func(*pgx.Batch) *pgx.Batch { return nil }
	same := func(qb *pgx.Batch) *pgx.Batch { return qb }
	marks = append(marks,
		queueMark("MarkSent(nil batch)", outbox.Outcome{Lease: lease, Sent: ids}, none),
		queueMark("MarkSent(no ids)", outbox.Outcome{Lease: lease, Sent: nil}, same),
		queueMark("MarkFailed(nil batch)", outbox.Outcome{Lease: lease, Failed: []outbox.Failure{{EventID: ids[0]}}}, none),
		queueMark("MarkFailed(negative backoff)", outbox.Outcome{Lease: lease, Failed: []outbox.Failure{{EventID: ids[0], Backoff: -1}}}, same),
		queueMark("MarkFailed(nil id)", outbox.Outcome{Lease: lease, Failed: []outbox.Failure{{}}}, same),
		queueMark("ReleaseLease(nil id)", outbox.Outcome{Lease: lease, Released: []uuid.UUID{uuid.Nil}}, same),
	)
	var qMarks, directMarks []conformance.Case
	for _, c := range marks {
		if strings.HasPrefix(c.Name, "Release/") {
			directMarks = append(directMarks, c)
		} else {
			qMarks = append(qMarks, c)
		}
	}
	enqueues := []conformance.Case{
		{Name: "nil batch", Do: func(context.Context, pgx.Tx, *pgx.Batch) error {
			return b.store.QueueEnqueue(nil, []outbox.Event{event(2)}, nil, pgtx.Return)
		}},
		{Name: "nil batch, many", Do: func(context.Context, pgx.Tx, *pgx.Batch) error {
			return b.store.QueueEnqueue(nil, []outbox.Event{event(2)}, new([]outbox.Enqueued), pgtx.Return)
		}},
		{Name: "none", Do: func(_ context.Context, _ pgx.Tx, qb *pgx.Batch) error {
			return b.store.QueueEnqueue(qb, nil, new([]outbox.Enqueued), pgtx.Return)
		}},
	}
	for _, p := range []string{`"\ud800"`, `1e999999`, "\"\xf3\""} {
		ev := event(3)
		ev.Payload = json.RawMessage(p)
		enqueues = append(enqueues, conformance.Case{Name: "payload " + p, Do: func(_ context.Context, _ pgx.Tx, qb *pgx.Batch) error {
			return b.store.QueueEnqueue(qb, []outbox.Event{ev}, nil, pgtx.Return)
		}})
	}
	var l outbox.Lease
	return []conformance.Entry{
		{Method: "ClaimOutboxBatch", Invalid: claims,
			Nil: []conformance.Call{{Name: "r", Do: func(ctx context.Context) error { _, err := b.store.ClaimOutboxBatch(ctx, nil, "r", 1); return err }}}},
		{Method: "Mark", Invalid: directMarks, Nil: []conformance.Call{
			{Name: "MarkSent", Do: func(ctx context.Context) error {
				_, err := b.store.Mark(ctx, nil, outbox.Outcome{Lease: l, Sent: nil})
				return err
			}},
			{Name: "Release", Do: func(ctx context.Context) error {
				_, err := b.store.Mark(ctx, nil, outbox.Outcome{Lease: l, Released: nil})
				return err
			}},
			{Name: "MarkFailed", Do: func(ctx context.Context) error {
				_, err := b.store.Mark(ctx, nil, outbox.Outcome{Lease: l, Failed: nil})
				return err
			}},
		}},
		{Method: "QueueMark", Invalid: qMarks,
			Queue: func(qb *pgx.Batch) error { return b.store.QueueMark(qb, outbox.Outcome{Lease: lease, Sent: ids}, nil) }},
		{Method: "Recover", Invalid: recovers, Nil: []conformance.Call{
			{Name: "RecoverExpired", Do: func(ctx context.Context) error {
				_, err := b.store.Recover(ctx, nil, outbox.Lease{}, time.Second, 1)
				return err
			}},
			{Name: "RecoverLease", Do: func(ctx context.Context) error { _, err := b.store.Recover(ctx, nil, l, time.Second, 1000); return err }},
		}},
		{Method: "Enqueue", Nil: []conformance.Call{
			{Name: "many", Do: func(ctx context.Context) error { _, err := b.store.Enqueue(ctx, nil, nil...); return err }},
			{Name: "one", Do: func(ctx context.Context) error { _, err := b.store.Enqueue(ctx, nil, outbox.Event{}); return err }},
		}},
		{Method: "QueueEnqueue", Invalid: enqueues,
			Queue: func(qb *pgx.Batch) error { return b.store.QueueEnqueue(qb, []outbox.Event{event(2)}, nil, pgtx.Return) }},
		{Method: "EventsByStatus", Nil: []conformance.Call{{Name: "all", Do: func(ctx context.Context) error {
			_, err := b.store.EventsByStatus(ctx, nil, "")
			return err
		}}}},
		{Method: "Check", Nil: []conformance.Call{{Name: "catalog", Do: func(ctx context.Context) error { return b.store.Check(ctx, nil) }}}},
		{Method: "Stats", Nil: []conformance.Call{{Name: "stats", Do: func(ctx context.Context) error { _, err := b.store.Stats(ctx, nil); return err }}}},
		{Method: "Backlog", Nil: []conformance.Call{{Name: "backlog", Do: func(ctx context.Context) error { _, err := b.store.Backlog(ctx, nil); return err }}}},
		{Method: "PurgeSent",
			Nil: []conformance.Call{{Name: "now", Do: func(ctx context.Context) error { _, err := b.store.PurgeSent(ctx, nil, time.Now(), 1); return err }}},
			Invalid: []conformance.Case{{Name: "zero time", Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
				_, err := b.store.PurgeSent(ctx, tx, time.Time{}, 10)
				return err
			}}}},
		{Method: "ArchiveSent",
			Nil: []conformance.Call{{Name: "now", Do: func(ctx context.Context) error { _, err := b.store.ArchiveSent(ctx, nil, time.Now(), 1); return err }}}},
	}
}

// TestNilHandleIsATypedError: every method that takes a transaction or
// connection rejects a nil one with a typed error instead of panicking.
func TestNilHandleIsATypedError(t *testing.T) {
	t.Parallel()
	s, err := outbox.New(outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	conformance.NilHandles(t, outboxEntries(&bundle{store: s}), nilHandle)
}

// TestEveryEntryPointRejectsInvalidInput runs the table's invalid cases:
// each is refused with an *outbox.Error matching ErrInvalidArgument,
// nothing is queued, and the one pending event is neither duplicated nor
// touched. Every queued form takes a nil destination (the outcome is
// discarded).
func TestEveryEntryPointRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	b.enqueue(t, event(1))
	rows := func() int64 {
		return int64(1000*b.count(t, "true") + b.count(t, "status <> 0 OR retry_count <> 0 OR locked_by IS NOT NULL"))
	}
	if n := rows(); n != 1000 {
		t.Fatalf("rows = %d, want the one pending event", n)
	}
	conformance.Refusals(t, b.ctx, b.pool, outboxEntries(b), invalid, rows)
	lease := outbox.Lease{Owner: "relay-1", LockedAt: time.Now()}
	ids := []uuid.UUID{uuid.Must(uuid.NewV7())}
	for name, err := range map[string]error{
		"QueueReleaseLease(nil dst)":        b.store.QueueMark(&pgx.Batch{}, outbox.Outcome{Lease: lease, Released: ids}, nil),
		"QueueEnqueue(nil dst, pgtx.Abort)": b.store.QueueEnqueue(&pgx.Batch{}, []outbox.Event{event(2)}, nil, pgtx.Abort),
		"QueueEnqueueMany(nil dst)":         b.store.QueueEnqueue(&pgx.Batch{}, []outbox.Event{event(2), event(3)}, nil, pgtx.Return),
	} {
		if err != nil {
			t.Errorf("%s: %v, want it accepted", name, err)
		}
	}
}

// TestNoSQLInjection sends hostile strings through every string-taking
// entry point — topic, tag, message key, aggregate type and id, dedup key,
// ordering key, header keys and values, the payload, the relay owner and
// the failure text — and checks each is stored, claimed and read back
// verbatim (or rejected with a *ValidationError when over a column limit),
// and that the table is intact.
func TestNoSQLInjection(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	var evs []outbox.Event
	for _, h := range hostile {
		evs = append(evs, outbox.Event{Topic: h, Tag: h, MessageKey: h, AggregateType: h, AggregateID: h, DedupKey: h,
			OrderingKey: h, Payload: json.RawMessage(`{"note": ` + conformance.MustJSON(h) + `}`), Headers: map[string]string{h: h}})
	}
	res := b.enqueue(t, evs...)
	for i, r := range res {
		if !r.New {
			t.Fatalf("event %q not new", hostile[i])
		}
	}
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.store.Enqueue(b.ctx, tx, outbox.Event{Topic: "t", AggregateType: "a", AggregateID: "1",
			DedupKey: strings.Repeat("'", outbox.MaxDedupKeyLen+1), Payload: json.RawMessage(`{}`)})
		return err
	})
	if !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("over-long dedup key: %v", err)
	}
	owner := hostile[0]
	c, err := b.store.ClaimOutboxBatch(b.ctx, b.pool, owner, 100)
	if err != nil || len(c.Messages) != len(hostile) || c.Owner != owner {
		t.Fatalf("claim: %d messages, owner %q, %v", len(c.Messages), c.Owner, err)
	}
	var failures []outbox.Failure
	for _, m := range c.Messages {
		i := -1
		for j, h := range hostile {
			if m.Topic == h {
				i = j
			}
		}
		if i < 0 {
			t.Fatalf("claimed topic %q is none of the hostile strings", m.Topic)
		}
		h := hostile[i]
		var note struct{ Note string }
		if err := json.Unmarshal(m.Payload, &note); err != nil || note.Note != h || m.Tag != h || m.MessageKey != h ||
			m.AggregateType != h || m.AggregateID != h || m.OrderingKey != h || len(m.Headers) != 1 || m.Headers[h] != h {
			t.Errorf("%q read back as %+v (%v)", h, m, err)
		}
		failures = append(failures, outbox.Failure{EventID: m.EventID, Err: errors.New(h)})
	}
	if r, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Failed: failures}); err != nil || r.Marked != len(hostile) {
		t.Fatalf("MarkFailed: %+v, %v", r, err)
	}
	if n := b.count(t, "last_error = topic AND locked_by IS NULL"); n != len(hostile) {
		t.Errorf("%d rows with last_error stored verbatim, want %d", n, len(hostile))
	}
	var ok bool
	if err := b.pool.QueryRow(b.ctx, `SELECT to_regclass($1) IS NOT NULL`, b.table()).Scan(&ok); err != nil || !ok {
		t.Errorf("event_outbox gone (%v)", err)
	}
	if n := b.count(t, "true"); n != len(hostile) {
		t.Errorf("%d rows, want %d", n, len(hostile))
	}
}

// TestQueryExecModes runs every statement of the package through pools in
// the query exec modes where pgx does not learn parameter types from the
// server (exec, simple_protocol: what PgBouncer in transaction mode needs)
// or encodes from a cached description (cache_describe).
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	conformance.ExecModes(t, func(t *testing.T, pool *pgxpool.Pool) {
		b := setup(t, outbox.Config{})
		b.pool = pool

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
		if bl, err := b.store.Backlog(b.ctx, b.pool); err != nil || bl.Sent != 0 || bl.Retry != 3 || bl.Pending+bl.Sending+bl.Dead != 0 {
			t.Fatalf("Backlog = %+v, %v", bl, err)
		}
		if n, err := b.store.PurgeSent(b.ctx, b.pool, time.Now().Add(time.Hour), 1); err != nil || n != 2 {
			t.Fatalf("PurgeSent = %d, %v, want 2", n, err)
		}
	})
}

// FuzzEnqueueEvent feeds arbitrary text fields, payloads and headers to
// Enqueue. Client-side validation must either reject the event with a
// *ValidationError (nothing queued) or accept it — and then PostgreSQL must
// accept it too, and store every text field verbatim and the payload and
// headers as the same JSON values. Accepted events are rolled back, so each
// input costs one short transaction.
func FuzzEnqueueEvent(f *testing.F) {
	b := setup(f, outbox.Config{MaxPayloadBytes: 4096})
	seeds := []struct {
		topic, tag, dedup, ordering string
		payload                     string
		hk, hv                      string
	}{
		{"ORDER_EVENT", "ORDER_CREATED", "k1", "", `{"order_id": 1}`, "", ""},
		{"t", "", "'; DROP TABLE event_outbox; --", "$1", `[1, "two", null, true, {"a": [] }]`, "trace-id", `"quoted"`},
		{"Ünïcödé 主题 🚀", "tag", "k", "o", `"\u00e9\ud83d\ude80"`, "🔑", "\\"},
		{"t", "", "k", "", `"a\u0000b"`, "", ""},       // jsonb cannot store \u0000
		{"t", "", "k", "", `"\\u0000"`, "", ""},        // an escaped backslash: fine
		{"t", "", "k", "", `"\ud800"`, "", ""},         // lone surrogate
		{"t", "", "k", "", `1e1000000`, "", ""},        // beyond numeric's range
		{"t", "", "k", "", "\"\xf3\"", "", ""},         // invalid UTF-8 inside a JSON string
		{"t", "", "k", "", `{"a":1,"a":2}`, "", ""},    // duplicate keys: jsonb keeps the last
		{"t", "", "k", "", "  {\"a\" :\t1}\n", "", ""}, // whitespace
		{"t", "", "k\x00", "", `{}`, "", ""},           // NUL in text
		{"t\xff", "", "k", "", `{}`, "", ""},           // invalid UTF-8
		{"t", "", "k", "", `{}`, "k", "v\x00"},         // NUL in a header
		{"t", "", strings.Repeat("é", 161), "", `{}`, "", ""},
		{"t", "", "k", "", `-0.000000000000000000000000000001e-10`, "", ""},
	}
	for _, s := range seeds {
		f.Add(s.topic, s.tag, s.dedup, s.ordering, []byte(s.payload), s.hk, s.hv)
	}
	f.Fuzz(func(t *testing.T, topic, tag, dedup, ordering string, payload []byte, hk, hv string) {
		ev := outbox.Event{Topic: topic, Tag: tag, AggregateType: "FUZZ", AggregateID: "1", DedupKey: dedup,
			OrderingKey: ordering, Payload: payload}
		if hk != "" || hv != "" {
			ev.Headers = map[string]string{hk: hv}
		}
		var qb pgx.Batch
		if conformance.Rejected(t, b.store.QueueEnqueue(&qb, []outbox.Event{ev}, nil, pgtx.Return), qb.Len(), invalid) {
			return
		}
		if qb.Len() == 0 {
			t.Fatal("accepted event queued nothing")
		}
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(b.ctx)
		res, err := enqueueOne(b.ctx, b.store, tx, ev)
		if err != nil {
			t.Fatalf("validation accepted an event PostgreSQL rejects: %v\nevent: %+q", err, ev)
		}
		if !res.New {
			t.Fatalf("fresh event reported as duplicate: %+v", res)
		}
		headers, _ := json.Marshal(ev.Headers)
		if ev.Headers == nil {
			headers = []byte("{}")
		}
		var gotTopic, gotDedup, gotTag, gotOrd string
		var samePayload, sameHeaders bool
		err = tx.QueryRow(b.ctx, `SELECT topic, dedup_key, coalesce(tag, ''), coalesce(ordering_key, ''),
			payload = $2::jsonb, headers = $3::jsonb FROM `+b.table()+` WHERE event_id = $1`,
			res.EventID, string(payload), string(headers)).Scan(&gotTopic, &gotDedup, &gotTag, &gotOrd, &samePayload, &sameHeaders)
		if err != nil {
			t.Fatal(err)
		}
		if gotTopic != topic || gotDedup != dedup || gotTag != tag || gotOrd != ordering || !samePayload || !sameHeaders {
			t.Fatalf("stored %q %q %q %q payload=%v headers=%v, want %q %q %q %q", gotTopic, gotDedup, gotTag, gotOrd,
				samePayload, sameHeaders, topic, dedup, tag, ordering)
		}
	})
}

// FuzzTruncateError: for any bytes, the result is valid UTF-8 without NUL,
// at most MaxLastErrorBytes long, a prefix of the sanitised input, and the
// input itself when that already fits.
func FuzzTruncateError(f *testing.F) {
	f.Add("boom")
	f.Add("a\x00b\xffc")
	f.Add(strings.Repeat("é", outbox.MaxLastErrorBytes))
	f.Add(strings.Repeat("x", outbox.MaxLastErrorBytes-1) + "🚀")
	f.Add("\xf0\x9f\x9a")
	f.Fuzz(func(t *testing.T, msg string) {
		got := outbox.TruncateError(msg)
		clean := strings.ReplaceAll(strings.ToValidUTF8(msg, "\uFFFD"), "\x00", "\uFFFD")
		switch {
		case !utf8.ValidString(got), strings.IndexByte(got, 0) >= 0:
			t.Fatalf("TruncateError(%q) = %q: not valid text", msg, got)
		case len(got) > outbox.MaxLastErrorBytes:
			t.Fatalf("TruncateError: %d bytes", len(got))
		case !strings.HasPrefix(clean, got):
			t.Fatalf("TruncateError(%q) = %q: not a prefix of %q", msg, got, clean)
		case len(clean) <= outbox.MaxLastErrorBytes && got != clean:
			t.Fatalf("TruncateError(%q) = %q, want %q", msg, got, clean)
		case len(clean) > outbox.MaxLastErrorBytes && len(got) < outbox.MaxLastErrorBytes-utf8.UTFMax+1:
			t.Fatalf("TruncateError cut too much: %d bytes", len(got))
		case utf8.ValidString(msg) && strings.IndexByte(msg, 0) < 0 && !strings.HasPrefix(msg, got):
			t.Fatalf("valid input changed: %q → %q", msg, got)
		}
	})
}
