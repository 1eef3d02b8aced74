package outbox

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// Outcome is what a relay did with the events of one claim, for
// [Store.Mark]: at least one event in Sent, Failed or Released, each event
// in one of them only.
type Outcome struct {
	// Lease is the claim's lease ([Claim].Lease).
	Lease Lease
	// Sent are the published events: they go SENT.
	Sent []uuid.UUID
	// Failed are the failed publishes: each event's retry_count grows by
	// one and it goes to RETRY, claimable again after its Backoff, or to
	// DEAD when that was its last allowed attempt (retry_count reaches
	// max_retry). last_error keeps the message, bounded.
	Failed []Failure
	// Released are events handed back without counting an attempt: RETRY,
	// available now, lease cleared, so another relay can claim them at
	// once instead of waiting for the lease to expire. A relay that stops
	// releases what it did not publish.
	Released []uuid.UUID
}

// MarkResult reports the outcome of [Store.Mark].
type MarkResult struct {
	// Marked is the number of events updated.
	Marked int
	// Dead is the number of events [Store.Mark] (Outcome.Failed) moved to
	// DEAD; they are included in Marked.
	Dead int
	// Lost lists the events that were not held under the lease and were
	// left untouched; when non-empty the call also returns a
	// *[Error] matching [ErrLeaseLost].
	Lost []LostEvent
}

func checkLease(l Lease) error {
	if err := checkText("lease.Owner", l.Owner, maxOwnerLen, true); err != nil {
		return err
	}
	if l.LockedAt.IsZero() {
		return invalid("lease.LockedAt", "zero")
	}
	return nil
}

// checkIDs validates the ids of field, drops repeats and records them in
// seen (an id of another list of the Outcome is refused).
func checkIDs(field string, ids []uuid.UUID, seen map[uuid.UUID]string) ([]uuid.UUID, error) {
	out := make([]uuid.UUID, 0, len(ids))
	for i, id := range ids {
		if id == uuid.Nil {
			return nil, invalid(fmt.Sprintf("%s[%d]", field, i), "nil UUID")
		}
		switch seen[id] {
		case field:
			continue
		case "":
			seen[id] = field
			out = append(out, id)
		default:
			return nil, invalid(fmt.Sprintf("%s[%d]", field, i), "%s is also in %s", id, seen[id])
		}
	}
	return out, nil
}

// Mark records the outcome o of a claim under its lease, one statement per
// non-empty list of o, in one round trip: the Sent events go SENT, the
// Failed ones RETRY or DEAD, the Released ones back to RETRY without an
// attempt (see [Outcome]). Every update is a compare-and-set: only events
// still SENDING under o.Lease (same owner and same claim time) are
// touched. It returns how many were marked (and how many went DEAD); events
// that lost their lease (recovered after expiry, claimed again, already
// finished, unknown) are not touched and are reported in MarkResult.Lost
// and by a *[Error] matching [ErrLeaseLost]. They will be (or were)
// published again: at least once, never lost. Run it on a pool, after the
// publish. Invalid input returns a *[Error] matching [ErrInvalidArgument]
// and sends nothing.
func (s *Store) Mark(ctx context.Context, db pgtx.Querier, o Outcome) (_ MarkResult, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return MarkResult{}, nilHandle("db")
	}
	var r MarkResult
	b := &pgx.Batch{}
	if err := s.QueueMark(b, o, &r); err != nil {
		return MarkResult{}, err
	}
	err = db.SendBatch(ctx, b).Close()
	return r, err
}

// QueueMark queues [Store.Mark] into b; *dst (when not nil) receives the
// result and a lost lease surfaces as a *[Error] matching [ErrLeaseLost]
// from BatchResults.Close. The returned error is only for invalid input;
// then nothing is queued.
func (s *Store) QueueMark(b *pgx.Batch, o Outcome, dst *MarkResult) error {
	defer s.fail.Mark(b, "outbox.Store.QueueMark")()
	if b == nil {
		return invalid("batch", "nil")
	}
	in, err := checkOutcome(o)
	if err != nil {
		return err
	}
	m := &markBatch{b: b, lease: o.Lease, dst: dst}
	if len(in.sent) > 0 {
		m.queueUpdate(s.sentSQL, "mark sent", in.sent)
	}
	if len(in.failed) > 0 {
		m.queueFailed(s.failSQL, in)
	}
	if len(in.released) > 0 {
		m.queueUpdate(s.releaseSQL, "release", in.released)
	}
	return nil
}

// markInput is a checked Outcome as the statements take it.
type markInput struct {
	sent, released []uuid.UUID
	failed         []uuid.UUID
	msgs           []string // per failed event: its error, truncated
	backoffs       []int64  // per failed event: microseconds
}

// checkOutcome validates o: a valid lease, at least one event, every id
// set and in one list only, no negative backoff.
func checkOutcome(o Outcome) (markInput, error) {
	var in markInput
	if err := checkLease(o.Lease); err != nil {
		return in, err
	}
	if len(o.Sent)+len(o.Failed)+len(o.Released) == 0 {
		return in, invalid("outcome", "empty: no Sent, Failed or Released events")
	}
	seen := make(map[uuid.UUID]string, len(o.Sent)+len(o.Failed)+len(o.Released))
	var err error
	if in.sent, err = checkIDs("Sent", o.Sent, seen); err != nil {
		return in, err
	}
	for i, f := range o.Failed {
		field := fmt.Sprintf("Failed[%d]", i)
		switch {
		case f.EventID == uuid.Nil:
			return in, invalid(field+".EventID", "nil UUID")
		case f.Backoff < 0:
			return in, invalid(field+".Backoff", "negative (%v)", f.Backoff)
		case seen[f.EventID] == "Failed":
			return in, invalid(field+".EventID", "duplicate %s", f.EventID)
		case seen[f.EventID] != "":
			return in, invalid(field+".EventID", "%s is also in %s", f.EventID, seen[f.EventID])
		}
		seen[f.EventID] = "Failed"
		msg := "unknown error"
		if f.Err != nil {
			msg = f.Err.Error()
		}
		in.failed = append(in.failed, f.EventID)
		in.msgs = append(in.msgs, truncateError(msg))
		in.backoffs = append(in.backoffs, f.Backoff.Microseconds())
	}
	if in.released, err = checkIDs("Released", o.Released, seen); err != nil {
		return in, err
	}
	return in, nil
}

// markBatch gathers the results of QueueMark's statements; the last
// statement's callback reports the whole outcome.
type markBatch struct {
	b       *pgx.Batch
	lease   Lease
	dst     *MarkResult
	r       MarkResult
	pending int
}

// done ends one statement's callback.
func (m *markBatch) done() error {
	if m.pending--; m.pending > 0 {
		return nil
	}
	if m.dst != nil {
		*m.dst = m.r
	}
	if len(m.r.Lost) > 0 {
		return &Error{Err: ErrLeaseLost, Lease: m.lease, Lost: m.r.Lost}
	}
	return nil
}

// queueUpdate queues a mark-sent or release statement for ids; the rows
// it returns are the events whose lease was lost.
func (m *markBatch) queueUpdate(sql, op string, ids []uuid.UUID) {
	m.pending++
	m.b.Queue(sql, uuidTexts(ids), m.lease.Owner, m.lease.LockedAt).Query(func(rows pgx.Rows) error {
		lost := 0
		for rows.Next() {
			var l LostEvent
			var st int16
			if err := rows.Scan(&l.EventID, &l.Exists, &st, &l.LockedBy); err != nil {
				return fmt.Errorf("outbox: %s: %w", op, err)
			}
			l.Status = Status(st)
			m.r.Lost = append(m.r.Lost, l)
			lost++
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("outbox: %s: %w", op, err)
		}
		m.r.Marked += len(ids) - lost
		return m.done()
	})
}

// queueFailed queues the mark-failed statement; it returns a row per
// event, marked (RETRY or DEAD) or lost.
func (m *markBatch) queueFailed(sql string, in markInput) {
	m.pending++
	m.b.Queue(sql, uuidTexts(in.failed), in.msgs, in.backoffs, m.lease.Owner, m.lease.LockedAt).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var l LostEvent
			var marked bool
			var st int16
			if err := rows.Scan(&l.EventID, &marked, &st, &l.Exists, &l.LockedBy); err != nil {
				return fmt.Errorf("outbox: mark failed: %w", err)
			}
			l.Status = Status(st)
			switch {
			case marked:
				m.r.Marked++
				if l.Status == StatusDead {
					m.r.Dead++
				}
			default:
				m.r.Lost = append(m.r.Lost, l)
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("outbox: mark failed: %w", err)
		}
		return m.done()
	})
}

// Failure is one failed publish for [Store.Mark] (Outcome.Failed).
type Failure struct {
	// EventID is the failed event, one of the lease's claimed events.
	EventID uuid.UUID
	// Err is recorded in last_error, truncated to 4000 bytes on a UTF-8
	// boundary (NUL bytes and invalid UTF-8 are replaced). May be nil.
	Err error
	// Backoff delays the next attempt; 0 means at once, negative is invalid.
	Backoff time.Duration
}

// truncateError makes msg fit last_error: NUL bytes and invalid UTF-8
// become U+FFFD and the result is cut to at most maxLastErrorBytes bytes
// on a character boundary.
func truncateError(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	msg = strings.ReplaceAll(msg, "\x00", "\uFFFD")
	if len(msg) <= maxLastErrorBytes {
		return msg
	}
	cut := maxLastErrorBytes
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut]
}
