package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

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
		return Claim{}, invalid("limit", "must be from 1 to 2147483647, got %d", limit)
	}
	var c Claim
	b := &pgx.Batch{}
	s.queueClaim(b, owner, nil, b.Queue(s.claimSQL, limit, owner), &c)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Claim{}, err
	}
	return c, nil
}
