package outbox_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// hostile are strings an attacker would try through a text parameter.
var hostile = []string{
	`'; DROP TABLE event_outbox; --`, `"quoted"`, `$1`, `' OR '1'='1`, `\`, `%s%d%!`, `);--`, `{schema}`,
	`"; TRUNCATE event_outbox; --`, "é主🚀\u200b", `E'\x41'`, "tab\tnew\nline",
}

// TestEveryEntryPointRejectsInvalidInput covers what
// TestEnqueueInvalidInput, TestClaimMarkSent and TestConfigInvalid do not:
// the Queue* forms of claim, mark-sent, mark-failed and release (nil batch,
// nil destination, invalid lease), Release, RecoverLease and
// RecoverExpired's limit, QueueEnqueueMany with nil batch or destination,
// NUL bytes in the owner, PurgeSent with a zero time, and payloads jsonb
// cannot store (database errors before). Nothing is queued or written.
// Covered there: Enqueue, EnqueueMany (incl. nil tx), QueueEnqueue,
// ClaimOutboxBatch, MarkSent, MarkFailed, RecoverExpired's lease,
// PurgeSent's batch size, New, NewRelay. Stats takes no caller input.
func TestEveryEntryPointRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	b.enqueue(t, event(1))
	check := func(what string, err error) {
		t.Helper()
		var ve *outbox.Error
		if !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &ve) {
			t.Errorf("%s: %v, want a *ValidationError", what, err)
		}
	}
	lease := outbox.Lease{Owner: "relay-1", LockedAt: time.Now()}
	ids := []uuid.UUID{uuid.Must(uuid.NewV7())}
	var qb pgx.Batch
	for name, l := range map[string]outbox.Lease{
		"no owner": {LockedAt: time.Now()}, "NUL owner": {Owner: "r\x00", LockedAt: time.Now()},
		"long owner": {Owner: strings.Repeat("o", 129), LockedAt: time.Now()}, "zero time": {Owner: "r"},
	} {
		check("QueueMarkSent/"+name, b.store.QueueMark(&qb, outbox.Outcome{Lease: l, Sent: ids}, new(outbox.MarkResult)))
		check("QueueMarkFailed/"+name, b.store.QueueMark(&qb, outbox.Outcome{Lease: l, Failed: []outbox.Failure{{EventID: ids[0]}}}, new(outbox.MarkResult)))
		check("QueueReleaseLease/"+name, b.store.QueueMark(&qb, outbox.Outcome{Lease: l, Released: ids}, new(outbox.MarkResult)))
		_, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: l, Released: ids})
		check("Release/"+name, err)
		_, err = b.store.Recover(b.ctx, b.pool, l, time.Minute, 1000)
		check("RecoverLease/"+name, err)
		if name != "zero time" {
			_, err := b.store.ClaimOutboxBatch(b.ctx, b.pool, l.Owner, 1)
			check("ClaimOutboxBatch/"+name, err)
		}
	}
	_, err := b.store.ClaimOutboxBatch(b.ctx, b.pool, "r", 0)
	check("ClaimOutboxBatch(limit 0)", err)
	_, err = b.store.ClaimOutboxBatch(b.ctx, nil, "r", 1)
	check("ClaimOutboxBatch(nil db)", err)
	// A nil destination is accepted by every queued form: the outcome is
	// discarded.
	accepted := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v, want it accepted", what, err)
		}
	}
	check("QueueMarkSent(nil batch)", b.store.QueueMark(nil, outbox.Outcome{Lease: lease, Sent: ids}, new(outbox.MarkResult)))
	accepted("QueueMarkSent(nil dst)", b.store.QueueMark(&pgx.Batch{}, outbox.Outcome{Lease: lease, Sent: ids}, nil))
	check("QueueMarkSent(no ids)", b.store.QueueMark(&qb, outbox.Outcome{Lease: lease, Sent: nil}, new(outbox.MarkResult)))
	check("QueueMarkFailed(nil batch)", b.store.QueueMark(nil, outbox.Outcome{Lease: lease, Failed: []outbox.Failure{{EventID: ids[0]}}}, new(outbox.MarkResult)))
	check("QueueMarkFailed(negative backoff)", b.store.QueueMark(&qb, outbox.Outcome{Lease: lease, Failed: []outbox.Failure{{EventID: ids[0], Backoff: -1}}}, new(outbox.MarkResult)))
	check("QueueMarkFailed(nil id)", b.store.QueueMark(&qb, outbox.Outcome{Lease: lease, Failed: []outbox.Failure{{}}}, new(outbox.MarkResult)))
	check("QueueReleaseLease(nil id)", b.store.QueueMark(&qb, outbox.Outcome{Lease: lease, Released: []uuid.UUID{uuid.Nil}}, new(outbox.MarkResult)))
	accepted("QueueReleaseLease(nil dst)", b.store.QueueMark(&pgx.Batch{}, outbox.Outcome{Lease: lease, Released: ids}, nil))
	check("QueueEnqueue(nil batch)", b.store.QueueEnqueue(nil, []outbox.Event{event(2)}, nil, pgtx.Return))
	accepted("QueueEnqueue(nil dst)", b.store.QueueEnqueue(&pgx.Batch{}, []outbox.Event{event(2)}, nil, pgtx.Return))
	check("QueueEnqueueMany(nil batch)", b.store.QueueEnqueue(nil, []outbox.Event{event(2)}, new([]outbox.Enqueued), pgtx.Return))
	accepted("QueueEnqueue(nil dst, pgtx.Abort)", b.store.QueueEnqueue(&pgx.Batch{}, []outbox.Event{event(2)}, nil, pgtx.Abort))
	accepted("QueueEnqueueMany(nil dst)", b.store.QueueEnqueue(&pgx.Batch{}, []outbox.Event{event(2), event(3)}, nil, pgtx.Return))
	check("QueueEnqueueMany(none)", b.store.QueueEnqueue(&qb, nil, new([]outbox.Enqueued), pgtx.Return))
	for _, p := range []string{`"\ud800"`, `1e999999`, "\"\xf3\""} {
		ev := event(3)
		ev.Payload = json.RawMessage(p)
		check("QueueEnqueue(payload "+p+")", b.store.QueueEnqueue(&qb, []outbox.Event{ev}, nil, pgtx.Return))
	}
	_, err = b.store.Recover(b.ctx, b.pool, lease, 0, 1000)
	check("RecoverLease(lease 0)", err)
	for _, limit := range []int{0, -1} {
		_, err := b.store.Recover(b.ctx, b.pool, outbox.Lease{}, time.Minute, limit)
		check("RecoverExpired(limit)", err)
		_, err = b.store.ClaimOutboxBatch(b.ctx, b.pool, "r", limit)
		check("ClaimOutboxBatch(limit)", err)
	}
	_, err = b.store.PurgeSent(b.ctx, b.pool, time.Time{}, 10)
	check("PurgeSent(zero time)", err)
	if qb.Len() != 0 {
		t.Errorf("%d statements queued for invalid input", qb.Len())
	}
	if n := b.count(t, "true"); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
	if n := b.count(t, "status <> 0 OR retry_count <> 0 OR locked_by IS NOT NULL"); n != 0 {
		t.Errorf("the pending event was touched")
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
			OrderingKey: h, Payload: json.RawMessage(`{"note": ` + mustJSON(h) + `}`), Headers: map[string]string{h: h}})
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

func mustJSON(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}
