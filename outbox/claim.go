package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgval"
	"github.com/seckillkit/seckill/pgtx"
)

// Lease identifies one claim: the relay (owner) and the server time the
// claim statement ran (locked_at, the same for every event of the claim).
// Every update of claimed events compares both, so an old claim can never
// finish a row that was recovered and claimed again — not even by the same
// owner.
type Lease struct {
	// Owner is the relay's id as given to the claim (the rows' locked_by),
	// at most 128 characters.
	Owner string
	// LockedAt is the claim statement's server time (the rows' locked_at,
	// microsecond precision, in the process's local time zone as pgx reads
	// a timestamptz). Pass it back unchanged: it is compared for equality,
	// and the zero time is rejected as invalid.
	LockedAt time.Time
}

// Message is one claimed event, ready to publish.
type Message struct {
	// EventID is event_id, the UUIDv7 assigned at enqueue. It is the same
	// on every attempt: give it to the broker as the message's dedup id
	// (e.g. Nats-Msg-Id).
	EventID uuid.UUID
	// Seq is the enqueue sequence; ordered mode publishes a key in Seq
	// order.
	Seq int64
	// Topic is Event.Topic, where to publish.
	Topic string
	// Tag is Event.Tag; "" when none.
	Tag string
	// MessageKey is Event.MessageKey, or Event.AggregateID when that was
	// "".
	MessageKey string
	// AggregateType and AggregateID are Event's, e.g. "ORDER" and the
	// order id as text.
	AggregateType string
	AggregateID   string // see AggregateType
	// OrderingKey is Event.OrderingKey; "" when not ordered.
	OrderingKey string
	// SchemaVersion is Event.SchemaVersion, at least 1 (0 was stored as 1).
	SchemaVersion int
	// Payload is the event body as stored by jsonb (normalised JSON).
	Payload json.RawMessage
	// Headers are Event.Headers as enqueued; empty when there were none.
	Headers map[string]string
	// Attempt is 1 for the first publish attempt, 2 for the second, …
	// (retry_count + 1: a lease that expired counts as an attempt).
	Attempt int
	// MaxRetries is max_retry, the attempts allowed: when attempt
	// MaxRetries fails (or its lease expires), the event goes DEAD.
	MaxRetries int
	// CreatedAt is created_at, the server time of the enqueuing statement
	// (not of its commit).
	CreatedAt time.Time
	// AvailableAt is available_at, when the event became claimable: the
	// enqueue time plus Event.Delay on the first attempt, the end of the
	// backoff after a failed one.
	AvailableAt time.Time
}

// Claim is the result of [Store.ClaimOutboxBatch]: the lease and the
// claimed messages in enqueue (Seq) order.
type Claim struct {
	Lease
	Messages []Message // the claimed events, sorted by Seq; empty when none was ready
}

// queueClaim reads the claim queued as q into dst; a non-nil cur is moved
// past the claimed events (see claimCursor.advance).
func (s *Store) queueClaim(b *pgx.Batch, owner string, cur *claimCursor, q *pgx.QueuedQuery, dst *Claim) {
	q.Query(func(rows pgx.Rows) error {
		c := Claim{Lease: Lease{Owner: owner}}
		for rows.Next() {
			var m Message
			var version, retry, maxRetry int32
			var payload []byte
			if err := rows.Scan(&m.EventID, &m.Seq, &m.Topic, &m.Tag, &m.MessageKey, &m.AggregateType,
				&m.AggregateID, &m.OrderingKey, &version, &payload, &m.Headers, &retry, &maxRetry,
				&m.CreatedAt, &c.LockedAt, &m.AvailableAt); err != nil {
				return fmt.Errorf("outbox: claim: %w", err)
			}
			m.SchemaVersion, m.Attempt, m.MaxRetries = int(version), int(retry)+1, int(maxRetry)
			m.Payload = json.RawMessage(payload)
			c.Messages = append(c.Messages, m)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("outbox: claim: %w", err)
		}
		if cur != nil {
			cur.advance(c.Messages)
		}
		slices.SortFunc(c.Messages, func(a, b Message) int { return cmp.Compare(a.Seq, b.Seq) })
		*dst = c
		return nil
	})
}

// claimAfter is [Store.ClaimOutboxBatch] for a relay that keeps a cursor:
// it claims from cur's key on when cur is set, from the head otherwise,
// and moves cur past what it claimed. owner and limit are valid (the
// relay's checked config).
func (s *Store) claimAfter(ctx context.Context, db pgtx.Querier, owner string, limit int, cur *claimCursor) (Claim, error) {
	var c Claim
	b := &pgx.Batch{}
	var q *pgx.QueuedQuery
	if cur.set {
		q = b.Queue(s.claimAfterSQL, limit, owner, cur.availableAt, cur.createdAt, pgval.UUID(cur.eventID))
	} else {
		q = b.Queue(s.claimSQL, limit, owner)
	}
	s.queueClaim(b, owner, cur, q, &c)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Claim{}, err
	}
	return c, nil
}

// ClaimOutboxBatch claims up to limit ready events (PENDING or RETRY whose
// available_at has passed) for owner with one statement: oldest first, FOR
// UPDATE SKIP LOCKED (so concurrent relays never claim the same event), set
// to SENDING with locked_by = owner and locked_at = now. In ordered mode
// only the head of each ordering key is claimable. No events ready is an
// empty claim, not an error. Run it outside a long transaction (on a pool):
// the claim must commit before publishing, and publish must not
// hold a transaction open. Invalid input (an empty owner or one over 128
// characters, a limit not positive) returns a *[Error] matching
// [ErrInvalidArgument] and sends nothing.
func (s *Store) ClaimOutboxBatch(ctx context.Context, db pgtx.Querier, owner string, limit int) (_ Claim, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return Claim{}, nilHandle("db")
	}
	if err := checkText("owner", owner, maxOwnerLen, true); err != nil {
		return Claim{}, err
	}
	if limit <= 0 || limit > 1<<31-1 {
		return Claim{}, invalid("limit", "must be positive, got %d", limit)
	}
	var c Claim
	b := &pgx.Batch{}
	s.queueClaim(b, owner, nil, b.Queue(s.claimSQL, limit, owner), &c)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Claim{}, err
	}
	return c, nil
}

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
	if err := checkLease(o.Lease); err != nil {
		return err
	}
	if len(o.Sent)+len(o.Failed)+len(o.Released) == 0 {
		return invalid("outcome", "empty: no Sent, Failed or Released events")
	}
	seen := make(map[uuid.UUID]string, len(o.Sent)+len(o.Failed)+len(o.Released))
	sent, err := checkIDs("Sent", o.Sent, seen)
	if err != nil {
		return err
	}
	ids := make([]uuid.UUID, 0, len(o.Failed))
	msgs := make([]string, 0, len(o.Failed))
	backoffs := make([]int64, 0, len(o.Failed))
	for i, f := range o.Failed {
		field := fmt.Sprintf("Failed[%d]", i)
		switch {
		case f.EventID == uuid.Nil:
			return invalid(field+".EventID", "nil UUID")
		case f.Backoff < 0:
			return invalid(field+".Backoff", "negative (%v)", f.Backoff)
		case seen[f.EventID] == "Failed":
			return invalid(field+".EventID", "duplicate %s", f.EventID)
		case seen[f.EventID] != "":
			return invalid(field+".EventID", "%s is also in %s", f.EventID, seen[f.EventID])
		}
		seen[f.EventID] = "Failed"
		msg := "unknown error"
		if f.Err != nil {
			msg = f.Err.Error()
		}
		ids = append(ids, f.EventID)
		msgs = append(msgs, truncateError(msg))
		backoffs = append(backoffs, f.Backoff.Microseconds())
	}
	released, err := checkIDs("Released", o.Released, seen)
	if err != nil {
		return err
	}
	lease := o.Lease
	var r MarkResult
	pending := 0
	// done ends each statement's callback: the last one reports the whole
	// outcome.
	done := func() error {
		if pending--; pending > 0 {
			return nil
		}
		if dst != nil {
			*dst = r
		}
		if len(r.Lost) > 0 {
			return &Error{Err: ErrLeaseLost, Lease: lease, Lost: r.Lost}
		}
		return nil
	}
	update := func(sql, op string, ids []uuid.UUID) {
		pending++
		b.Queue(sql, uuidTexts(ids), lease.Owner, lease.LockedAt).Query(func(rows pgx.Rows) error {
			lost := 0
			for rows.Next() {
				var l LostEvent
				var st int16
				if err := rows.Scan(&l.EventID, &l.Exists, &st, &l.LockedBy); err != nil {
					return fmt.Errorf("outbox: %s: %w", op, err)
				}
				l.Status = Status(st)
				r.Lost = append(r.Lost, l)
				lost++
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("outbox: %s: %w", op, err)
			}
			r.Marked += len(ids) - lost
			return done()
		})
	}
	if len(sent) > 0 {
		update(s.sentSQL, "mark sent", sent)
	}
	if len(ids) > 0 {
		pending++
		b.Queue(s.failSQL, uuidTexts(ids), msgs, backoffs, lease.Owner, lease.LockedAt).Query(func(rows pgx.Rows) error {
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
					r.Marked++
					if l.Status == StatusDead {
						r.Dead++
					}
				default:
					r.Lost = append(r.Lost, l)
				}
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("outbox: mark failed: %w", err)
			}
			return done()
		})
	}
	if len(released) > 0 {
		update(s.releaseSQL, "release", released)
	}
	return nil
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

// Recovered is one event whose expired lease was recovered.
type Recovered struct {
	EventID  uuid.UUID // the event whose lease expired
	LockedBy string    // the owner whose lease expired
	Status   Status    // StatusRetry, or StatusDead when its attempts ran out
}

// Recover returns events whose lease (locked_at) is older than expiry to
// RETRY, available at once, counting the lost attempt (DEAD when attempts
// ran out), with last_error SEND_LEASE_EXPIRED: up to limit events of every
// expired claim when of is the zero Lease, or only the events still SENDING
// under exactly of (owner and claim time) — a supervisor that knows a relay
// died recovers just that relay's claim. It is a compare-and-set on status,
// owner and claim time: a row marked SENT, failed, released or claimed
// again in the meantime is never touched, and a row being marked right now
// is skipped (SKIP LOCKED). Returns what it recovered (empty: nothing had
// expired). Invalid input (expiry or limit not positive, of half set)
// returns a *[Error] matching [ErrInvalidArgument] and sends nothing.
func (s *Store) Recover(ctx context.Context, db pgtx.Querier, of Lease, expiry time.Duration, limit int) (_ []Recovered, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return nil, nilHandle("db")
	}
	if of != (Lease{}) {
		if err := checkLease(of); err != nil {
			return nil, err
		}
	}
	if expiry <= 0 {
		return nil, invalid("expiry", "must be positive, got %v", expiry)
	}
	if limit <= 0 || limit > 1<<31-1 {
		return nil, invalid("limit", "must be positive, got %d", limit)
	}
	if of == (Lease{}) {
		return s.recover(ctx, db, s.recoverSQL, expiry.Microseconds(), limit)
	}
	return s.recover(ctx, db, s.recoverSpec, expiry.Microseconds(), limit, of.Owner, of.LockedAt)
}

func (s *Store) recover(ctx context.Context, db pgtx.Querier, sql string, args ...any) ([]Recovered, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: recover leases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Recovered, error) {
		var r Recovered
		var st int16
		err := row.Scan(&r.EventID, &r.LockedBy, &st)
		r.Status = Status(st)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: recover leases: %w", err)
	}
	return out, nil
}
