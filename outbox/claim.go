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
	// at most MaxOwnerLen characters.
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

// IDs returns the event ids of the claim's messages.
func (c Claim) IDs() []uuid.UUID {
	ids := make([]uuid.UUID, len(c.Messages))
	for i, m := range c.Messages {
		ids[i] = m.EventID
	}
	return ids
}

// QueueClaimOutboxBatch queues [Store.ClaimOutboxBatch] into b; *dst receives
// the claim when the results are read. The returned error is only for
// invalid input.
func (s *Store) QueueClaimOutboxBatch(b *pgx.Batch, owner string, limit int, dst *Claim) error {
	if b == nil || dst == nil {
		return invalid("batch", "nil batch or destination")
	}
	if err := checkText("owner", owner, MaxOwnerLen, true); err != nil {
		return err
	}
	if limit <= 0 || limit > 1<<31-1 {
		return invalid("limit", "must be positive, got %d", limit)
	}
	s.queueClaim(b, owner, nil, b.Queue(s.claimSQL, limit, owner), dst)
	return nil
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
// hold a transaction open.
func (s *Store) ClaimOutboxBatch(ctx context.Context, db pgtx.Querier, owner string, limit int) (Claim, error) {
	if db == nil {
		return Claim{}, nilHandle("db")
	}
	var c Claim
	b := &pgx.Batch{}
	if err := s.QueueClaimOutboxBatch(b, owner, limit, &c); err != nil {
		return Claim{}, err
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Claim{}, err
	}
	return c, nil
}

// MarkResult reports a lease-checked update.
type MarkResult struct {
	// Marked is the number of events updated.
	Marked int
	// Dead is the number of events MarkFailed (or lease recovery) moved to
	// DEAD; they are included in Marked.
	Dead int
	// Lost lists the events that were not held under the lease and were
	// left untouched; when non-empty the call also returns a
	// *LeaseLostError.
	Lost []LostEvent
}

func checkLease(l Lease) error {
	if err := checkText("lease.Owner", l.Owner, MaxOwnerLen, true); err != nil {
		return err
	}
	if l.LockedAt.IsZero() {
		return invalid("lease.LockedAt", "zero")
	}
	return nil
}

func checkIDs(ids []uuid.UUID) ([]uuid.UUID, error) {
	if len(ids) == 0 {
		return nil, invalid("ids", "empty")
	}
	seen := make(map[uuid.UUID]bool, len(ids))
	out := make([]uuid.UUID, 0, len(ids))
	for i, id := range ids {
		if id == uuid.Nil {
			return nil, invalid(fmt.Sprintf("ids[%d]", i), "nil UUID")
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

func (s *Store) queueLeaseUpdate(b *pgx.Batch, sql, op string, lease Lease, ids []uuid.UUID, dst *MarkResult) error {
	if b == nil || dst == nil {
		return invalid("batch", "nil batch or destination")
	}
	if err := checkLease(lease); err != nil {
		return err
	}
	ids, err := checkIDs(ids)
	if err != nil {
		return err
	}
	b.Queue(sql, uuidTexts(ids), lease.Owner, lease.LockedAt).Query(func(rows pgx.Rows) error {
		var lost []LostEvent
		for rows.Next() {
			var l LostEvent
			var st int16
			if err := rows.Scan(&l.EventID, &l.Exists, &st, &l.LockedBy); err != nil {
				return fmt.Errorf("outbox: %s: %w", op, err)
			}
			l.Status = Status(st)
			lost = append(lost, l)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("outbox: %s: %w", op, err)
		}
		*dst = MarkResult{Marked: len(ids) - len(lost), Lost: lost}
		if len(lost) > 0 {
			return &LeaseLostError{Lease: lease, Lost: lost}
		}
		return nil
	})
	return nil
}

// QueueMarkSent queues [Store.MarkSent] into b; *dst receives the result
// and a lost lease surfaces as a *LeaseLostError from BatchResults.Close.
func (s *Store) QueueMarkSent(b *pgx.Batch, lease Lease, ids []uuid.UUID, dst *MarkResult) error {
	return s.queueLeaseUpdate(b, s.sentSQL, "mark sent", lease, ids, dst)
}

// MarkSent marks the published events ids SENT with one statement
// (event_id = ANY($1)), but only those still SENDING under lease (same
// owner and same claim time). It returns how many were marked; events that
// lost their lease (recovered after expiry, claimed again, already
// finished, unknown) are not touched and are reported in MarkResult.Lost and
// by a *LeaseLostError matching [ErrLeaseLost]. They will be (or were)
// published again: at least once, never lost.
func (s *Store) MarkSent(ctx context.Context, db pgtx.Querier, lease Lease, ids []uuid.UUID) (MarkResult, error) {
	if db == nil {
		return MarkResult{}, nilHandle("db")
	}
	var r MarkResult
	b := &pgx.Batch{}
	if err := s.QueueMarkSent(b, lease, ids, &r); err != nil {
		return MarkResult{}, err
	}
	err := db.SendBatch(ctx, b).Close()
	return r, err
}

// QueueReleaseLease queues [Store.ReleaseLease] into b.
func (s *Store) QueueReleaseLease(b *pgx.Batch, lease Lease, ids []uuid.UUID, dst *MarkResult) error {
	return s.queueLeaseUpdate(b, s.releaseSQL, "release", lease, ids, dst)
}

// ReleaseLease hands claimed events back without counting an attempt: RETRY,
// available now, lease cleared, so another relay can claim them at once
// instead of waiting for the lease to expire. A relay that stops calls it
// for what it did not publish. Lease-checked like [Store.MarkSent].
func (s *Store) ReleaseLease(ctx context.Context, db pgtx.Querier, lease Lease, ids []uuid.UUID) (MarkResult, error) {
	if db == nil {
		return MarkResult{}, nilHandle("db")
	}
	var r MarkResult
	b := &pgx.Batch{}
	if err := s.QueueReleaseLease(b, lease, ids, &r); err != nil {
		return MarkResult{}, err
	}
	err := db.SendBatch(ctx, b).Close()
	return r, err
}

// Failure is one failed publish for [Store.MarkFailed].
type Failure struct {
	// EventID is the failed event, one of the lease's claimed events.
	EventID uuid.UUID
	// Err is recorded in last_error, truncated to 4000 bytes on a UTF-8
	// boundary (NUL bytes and invalid UTF-8 are replaced). May be nil.
	Err error
	// Backoff delays the next attempt; 0 means at once, negative is invalid.
	Backoff time.Duration
}

// QueueMarkFailed queues [Store.MarkFailed] into b.
func (s *Store) QueueMarkFailed(b *pgx.Batch, lease Lease, failures []Failure, dst *MarkResult) error {
	if b == nil || dst == nil {
		return invalid("batch", "nil batch or destination")
	}
	if err := checkLease(lease); err != nil {
		return err
	}
	if len(failures) == 0 {
		return invalid("failures", "empty")
	}
	ids := make([]uuid.UUID, 0, len(failures))
	msgs := make([]string, 0, len(failures))
	backoffs := make([]int64, 0, len(failures))
	seen := make(map[uuid.UUID]bool, len(failures))
	for i, f := range failures {
		switch {
		case f.EventID == uuid.Nil:
			return invalid(fmt.Sprintf("failures[%d].EventID", i), "nil UUID")
		case f.Backoff < 0:
			return invalid(fmt.Sprintf("failures[%d].Backoff", i), "negative (%v)", f.Backoff)
		case seen[f.EventID]:
			return invalid(fmt.Sprintf("failures[%d].EventID", i), "duplicate %s", f.EventID)
		}
		seen[f.EventID] = true
		msg := "unknown error"
		if f.Err != nil {
			msg = f.Err.Error()
		}
		ids = append(ids, f.EventID)
		msgs = append(msgs, TruncateError(msg))
		backoffs = append(backoffs, f.Backoff.Microseconds())
	}
	b.Queue(s.failSQL, uuidTexts(ids), msgs, backoffs, lease.Owner, lease.LockedAt).Query(func(rows pgx.Rows) error {
		var r MarkResult
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
		*dst = r
		if len(r.Lost) > 0 {
			return &LeaseLostError{Lease: lease, Lost: r.Lost}
		}
		return nil
	})
	return nil
}

// MarkFailed records failed publishes under lease with one statement: each
// event's retry_count grows by one and it goes to RETRY, claimable again
// after its Backoff, or to DEAD when that was its last allowed attempt
// (retry_count reaches max_retry). last_error keeps the message, bounded.
// Lease-checked like [Store.MarkSent]; MarkResult.Dead counts the events
// that went DEAD.
func (s *Store) MarkFailed(ctx context.Context, db pgtx.Querier, lease Lease, failures []Failure) (MarkResult, error) {
	if db == nil {
		return MarkResult{}, nilHandle("db")
	}
	var r MarkResult
	b := &pgx.Batch{}
	if err := s.QueueMarkFailed(b, lease, failures, &r); err != nil {
		return MarkResult{}, err
	}
	err := db.SendBatch(ctx, b).Close()
	return r, err
}

// TruncateError makes msg fit last_error: NUL bytes and invalid UTF-8
// become U+FFFD and the result is cut to at most [MaxLastErrorBytes] bytes
// on a character boundary.
func TruncateError(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	msg = strings.ReplaceAll(msg, "\x00", "\uFFFD")
	if len(msg) <= MaxLastErrorBytes {
		return msg
	}
	cut := MaxLastErrorBytes
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

// RecoverExpired returns up to limit events whose lease (locked_at) is
// older than lease to RETRY, available at once, counting the lost attempt
// (DEAD when attempts ran out), with last_error SEND_LEASE_EXPIRED. It is a
// compare-and-set on status, owner and claim time: a row marked SENT,
// failed, released or claimed again in the meantime is never touched, and
// a row being marked right now is skipped (SKIP LOCKED). Returns what it
// recovered (empty: nothing had expired).
func (s *Store) RecoverExpired(ctx context.Context, db pgtx.Querier, lease time.Duration, limit int) ([]Recovered, error) {
	if db == nil {
		return nil, nilHandle("db")
	}
	if lease <= 0 {
		return nil, invalid("lease", "must be positive, got %v", lease)
	}
	if limit <= 0 || limit > 1<<31-1 {
		return nil, invalid("limit", "must be positive, got %d", limit)
	}
	return s.recover(ctx, db, s.recoverSQL, lease.Microseconds(), limit)
}

// RecoverLease is [Store.RecoverExpired] restricted to one claim: only the
// events still SENDING under exactly l (owner and claim time) and older
// than lease. A supervisor that knows a relay died uses it to recover just
// that relay's claim; it never touches a row that was finished or claimed
// again since.
func (s *Store) RecoverLease(ctx context.Context, db pgtx.Querier, l Lease, lease time.Duration) ([]Recovered, error) {
	if db == nil {
		return nil, nilHandle("db")
	}
	if err := checkLease(l); err != nil {
		return nil, err
	}
	if lease <= 0 {
		return nil, invalid("lease", "must be positive, got %v", lease)
	}
	return s.recover(ctx, db, s.recoverSpec, lease.Microseconds(), 1<<31-1, l.Owner, l.LockedAt)
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
