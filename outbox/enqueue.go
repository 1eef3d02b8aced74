package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/jsonb"
	"github.com/seckillkit/seckill/internal/pgval"
	"github.com/seckillkit/seckill/internal/textcheck"
	"github.com/seckillkit/seckill/pgtx"
)

// Event is one event to enqueue.
type Event struct {
	// Topic the relay publishes to. Required, at most 128 characters.
	Topic string
	// Tag is an optional sub-type (RocketMQ tag, e.g. "ORDER_CREATED"), at
	// most 64 characters.
	Tag string
	// MessageKey is the broker's message key (partitioning, lookup). At most
	// 160 characters. Defaults to AggregateID.
	MessageKey string
	// AggregateType and AggregateID name the entity the event is about, e.g.
	// "ORDER" and the order id. Required, at most 64 and 128 characters.
	AggregateType string
	AggregateID   string // see AggregateType
	// SchemaVersion of the payload. 0 means 1; negative is invalid.
	SchemaVersion int
	// Payload is the event body: valid JSON (an object, array, string, …),
	// at most Config.MaxPayloadBytes. A []byte converts implicitly. Stored as
	// jsonb, so it is published normalised (key order and whitespace may
	// differ from the input; the JSON value is the same).
	Payload json.RawMessage
	// Headers travel with the message. Keys must be non-empty. Optional.
	Headers map[string]string
	// DedupKey makes the enqueue idempotent: at most one row per key ever
	// exists (e.g. "ORDER_CREATED:" + order id). Required, at most 160
	// characters.
	DedupKey string
	// OrderingKey, when not empty, puts the event in ordered mode: events
	// with the same key are published one at a time in enqueue (= commit)
	// order. At most 160 characters. See the package documentation.
	OrderingKey string
	// Delay postpones the first publish attempt. 0 means now; negative is
	// invalid.
	Delay time.Duration
	// MaxRetries is the number of publish attempts before the event goes
	// DEAD. 0 means Config.DefaultMaxRetries; negative is invalid.
	MaxRetries int
}

// Enqueued reports the outcome of enqueuing one event.
type Enqueued struct {
	// New is true when this call inserted the row, false when an event with
	// the same dedup key already existed (nothing was written for it).
	New bool
	// EventID is the id of the row that holds the dedup key: the new
	// time-ordered (UUIDv7) id when New; the existing row's id when it is a
	// duplicate the statement could see, uuid.Nil when the existing row was
	// committed by a concurrent transaction after this statement started.
	EventID uuid.UUID
}

// enqueueArgs holds the parallel arrays of one enqueue statement.
type enqueueArgs struct {
	ids                                  []uuid.UUID
	dedup, aggType, aggID, topic, msgKey []string
	tag, ordKey                          []*string
	version, maxRetry                    []int32
	payload, headers                     []string
	delayUS                              []int64
}

func (s *Store) buildEnqueue(field string, evs []Event) (*enqueueArgs, error) {
	if len(evs) == 0 {
		return nil, invalid(field, "no events")
	}
	n := len(evs)
	a := &enqueueArgs{
		ids: make([]uuid.UUID, n), dedup: make([]string, n), aggType: make([]string, n),
		aggID: make([]string, n), topic: make([]string, n), msgKey: make([]string, n),
		tag: make([]*string, n), ordKey: make([]*string, n), version: make([]int32, n),
		maxRetry: make([]int32, n), payload: make([]string, n), headers: make([]string, n),
		delayUS: make([]int64, n),
	}
	for i, ev := range evs {
		f := field
		if field == "events" {
			f = fmt.Sprintf("%s[%d]", field, i)
		}
		if err := s.validateEvent(f, &ev); err != nil {
			return nil, err
		}
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("outbox: generate event id: %w", err)
		}
		a.ids[i] = id
		a.dedup[i], a.aggType[i], a.aggID[i], a.topic[i] = ev.DedupKey, ev.AggregateType, ev.AggregateID, ev.Topic
		a.msgKey[i] = ev.MessageKey
		if ev.Tag != "" {
			a.tag[i] = &evs[i].Tag
		}
		if ev.OrderingKey != "" {
			a.ordKey[i] = &evs[i].OrderingKey
		}
		a.version[i] = int32(ev.SchemaVersion)
		a.maxRetry[i] = int32(ev.MaxRetries)
		a.payload[i] = string(ev.Payload)
		h := []byte("{}")
		if len(ev.Headers) > 0 {
			if h, err = json.Marshal(ev.Headers); err != nil {
				return nil, invalid(f+".Headers", "%v", err)
			}
		}
		a.headers[i] = string(h)
		a.delayUS[i] = ev.Delay.Microseconds()
	}
	return a, nil
}

// validateEvent checks ev and fills its defaults.
func (s *Store) validateEvent(f string, ev *Event) error {
	if ev.MessageKey == "" {
		ev.MessageKey = ev.AggregateID
	}
	for _, c := range []struct {
		name     string
		v        string
		max      int
		required bool
	}{
		{"Topic", ev.Topic, maxTopicLen, true},
		{"Tag", ev.Tag, maxTagLen, false},
		{"AggregateType", ev.AggregateType, maxAggregateTypeLen, true},
		{"AggregateID", ev.AggregateID, maxAggregateIDLen, true},
		{"MessageKey", ev.MessageKey, maxMessageKeyLen, true},
		{"DedupKey", ev.DedupKey, maxDedupKeyLen, true},
		{"OrderingKey", ev.OrderingKey, maxOrderingKeyLen, false},
	} {
		if err := checkText(f+"."+c.name, c.v, c.max, c.required); err != nil {
			return err
		}
	}
	switch {
	case ev.SchemaVersion < 0 || ev.SchemaVersion > 1<<31-1:
		return invalid(f+".SchemaVersion", "must be positive (0 means 1), got %d", ev.SchemaVersion)
	case ev.MaxRetries < 0 || ev.MaxRetries > 1<<31-1:
		return invalid(f+".MaxRetries", "must be positive (0 means the default), got %d", ev.MaxRetries)
	case ev.Delay < 0:
		return invalid(f+".Delay", "negative (%v)", ev.Delay)
	case len(ev.Payload) == 0:
		return invalid(f+".Payload", "empty (use a JSON value such as {} or null)")
	case len(ev.Payload) > s.cfg.MaxPayloadBytes:
		return invalid(f+".Payload", "%d bytes, more than the limit of %d", len(ev.Payload), s.cfg.MaxPayloadBytes)
	case !json.Valid(ev.Payload):
		return invalid(f+".Payload", "not valid JSON")
	}
	if err := jsonb.Check(ev.Payload); err != nil {
		return invalid(f+".Payload", "%v", err)
	}
	if ev.SchemaVersion == 0 {
		ev.SchemaVersion = 1
	}
	if ev.MaxRetries == 0 {
		ev.MaxRetries = s.cfg.DefaultMaxRetries
	}
	for k, v := range ev.Headers {
		if err := checkText(f+".Headers key", k, 0, true); err != nil {
			return err
		}
		if err := checkText(f+".Headers["+k+"]", v, 0, false); err != nil {
			return err
		}
	}
	return nil
}

// checkText rejects invalid UTF-8, NUL bytes (PostgreSQL text cannot hold
// them), empty required values and values longer than max characters (0: no
// limit).
func checkText(field, v string, max int, required bool) error {
	if r := textcheck.Reason(v, max, required); r != "" {
		return invalid(field, "%s", r)
	}
	return nil
}

// uuidTexts renders ids for a $n::text[]::uuid[] parameter: pgx cannot
// encode a []uuid.UUID when it does not know the parameter's type (query
// exec modes exec and simple_protocol), but always encodes a []string.
func uuidTexts(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

func (s *Store) enqueueArgs(a *enqueueArgs) []any {
	args := []any{uuidTexts(a.ids), a.dedup, a.aggType, a.aggID, a.topic, a.tag, a.msgKey,
		a.ordKey, a.version, a.payload, a.headers, a.delayUS, a.maxRetry, s.schema}
	if s.cfg.notify() {
		args = append(args, s.channel)
	}
	return args
}

// insertOneArgs are the parameters of the single-event statements (sql/enqueue.sql: enqueue_insert, enqueue_abort) for event i of a.
func insertOneArgs(a *enqueueArgs, i int) []any {
	return []any{pgval.UUID(a.ids[i]), a.dedup[i], a.aggType[i], a.aggID[i], a.topic[i], a.tag[i], a.msgKey[i],
		a.version[i], a.payload[i], a.headers[i], a.delayUS[i], a.maxRetry[i], a.ordKey[i]}
}

// enqueueOneArgs are the parameters of enqueue_insert or enqueue_one_notify
// (sql/enqueue.sql) for the single event
// in a.
func (s *Store) enqueueOneArgs(a *enqueueArgs) []any {
	args := insertOneArgs(a, 0)
	if s.cfg.notify() {
		args = append(args, s.channel)
	}
	return args
}

// QueueEnqueue queues the enqueue of evs (at least one) into b and
// arranges for *dst to receive one [Enqueued] per event, in order, when the
// batch's results are read (errors surface from BatchResults.Close); dst
// may be nil (the outcome is then discarded). Send b on the transaction
// that writes the business data the events describe. The returned error is
// only for invalid input (a *[Error] matching [ErrInvalidArgument]); then
// nothing is queued.
//
// With on = [pgtx.Return] it queues the statements of [Store.Enqueue]: the
// insert of evs as ONE statement, then a read of the events that hold
// their dedup keys (a new snapshot, which sees a duplicate committed while
// the insert waited for it); a duplicate dedup key is an Enqueued with New
// false. One event without an ordering key, from a Store without
// [Config].Notify, is inserted by a plain INSERT: the shape Citus routes
// whole to one node (the general statement, a data-modifying CTE, makes a
// Citus transaction commit with two phases).
//
// With on = [pgtx.Abort] it queues, for a transaction sent as one batch
// ([pgtx.RunBatch]) that commits only when every event is new, one plain
// INSERT per event (routed whole by Citus) and the NOTIFY of a Store with
// Config.Notify: an event whose dedup key exists raises unique_violation
// (SQLSTATE 23505 on uq_outbox_dedup), which aborts the whole transaction,
// COMMIT included; the error [pgtx.RunBatch] returns names this call and
// the event's dedup key ([pgtx.StatementError].Call,
// "outbox.Store.QueueEnqueue(<dedup key>)") and matches [ErrDuplicate]. An
// insert that meets the key held by a transaction still in flight waits for
// it, then raises (it committed) or proceeds (it rolled back). *dst then
// receives the new events (New true). An event with an ordering key is
// refused in this mode (ErrInvalidArgument): ordered events take their
// key's lock first, which only the Return mode's statements do.
func (s *Store) QueueEnqueue(b *pgx.Batch, evs []Event, dst *[]Enqueued, on pgtx.OnRefusal) error {
	if on == pgtx.Abort {
		return s.queueEnqueueAbort(b, evs, dst)
	}
	defer s.fail.Mark(b, "outbox.Store.QueueEnqueue")()
	return s.queueEnqueue(b, "events", evs, func(out []Enqueued) {
		if dst != nil {
			*dst = out
		}
	})
}

func (s *Store) queueEnqueue(b *pgx.Batch, field string, evs []Event, done func([]Enqueued)) error {
	if b == nil {
		return invalid("batch", "nil")
	}
	a, err := s.buildEnqueue(field, evs)
	if err != nil {
		return err
	}
	inserted := make(map[uuid.UUID]bool, len(a.ids))
	readInserted := func(rows pgx.Rows) error {
		for rows.Next() {
			var kind int32
			var id, other *uuid.UUID
			if err := rows.Scan(&kind, &id, &other); err != nil {
				return fmt.Errorf("outbox: enqueue: %w", err)
			}
			if kind == 1 {
				inserted[*id] = true
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("outbox: enqueue: %w", err)
		}
		return nil
	}
	oneSimple := len(a.ids) == 1 && a.ordKey[0] == nil && !s.cfg.notify()
	switch {
	case s.cfg.Citus && !oneSimple:
		s.queueEnqueueRouted(b, a, readInserted)
	case len(a.ids) == 1 && a.ordKey[0] == nil:
		sql := s.enqueueInsert
		if s.cfg.notify() {
			sql = s.enqueueOneNotify
		}
		b.Queue(sql, s.enqueueOneArgs(a)...).Query(readInserted)
	default:
		b.Queue(s.enqueueSQL, s.enqueueArgs(a)...).Query(readInserted)
	}
	// The holders of the dedup keys, read with a new snapshot: the rows
	// just inserted, rows that existed, and rows a concurrent transaction
	// committed while the insert waited for them (which the insert's own
	// snapshot cannot see).
	b.Queue(s.enqueueHolders, a.dedup).Query(func(rows pgx.Rows) error {
		holder := make(map[string]uuid.UUID, len(a.ids))
		for rows.Next() {
			var key string
			var id uuid.UUID
			if err := rows.Scan(&key, &id); err != nil {
				return fmt.Errorf("outbox: enqueue: %w", err)
			}
			holder[key] = id
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("outbox: enqueue: %w", err)
		}
		out := make([]Enqueued, len(a.ids))
		for i, id := range a.ids {
			h, held := holder[a.dedup[i]]
			switch {
			case inserted[id]:
				out[i] = Enqueued{New: true, EventID: id}
			case held:
				out[i] = Enqueued{EventID: h}
			default:
				// Only a purge between the two statements can do this.
				return fmt.Errorf("outbox: enqueue: no event holds dedup key %q after the insert", a.dedup[i])
			}
		}
		done(out)
		return nil
	})
	return nil
}

// queueEnqueueRouted queues the enqueue of Config.Citus (see
// enqueue_locks) but for the holders' read; read receives each insert's
// row.
func (s *Store) queueEnqueueRouted(b *pgx.Batch, a *enqueueArgs, read func(pgx.Rows) error) {
	for _, k := range a.ordKey {
		if k != nil {
			b.Queue(s.enqueueLocks, s.schema, a.ordKey)
			break
		}
	}
	for i := range a.ids {
		b.Queue(s.enqueueInsert, insertOneArgs(a, i)...).Query(read)
	}
	if s.cfg.notify() {
		b.Queue(s.enqueueNotify, s.channel)
	}
}

// Enqueue inserts evs (at least one event) in the caller's transaction
// with ONE statement (arrays through unnest), plus the read of the events
// holding their dedup keys in the same round trip, and reports, per event
// in order, whether it was new or a duplicate of an existing dedup key (ON
// CONFLICT DO NOTHING: a duplicate writes nothing and is not an error).
// Events with an ordering key take a transaction advisory lock per key,
// held until tx ends; enqueue the events of one transaction in one call (it
// locks their keys in sorted order). With Config.Citus it sends one INSERT
// per event instead, still in one round trip. Invalid input returns a
// *[Error] matching [ErrInvalidArgument] and sends nothing.
func (s *Store) Enqueue(ctx context.Context, tx pgx.Tx, evs ...Event) (_ []Enqueued, err error) {
	defer s.fail.Explain(&err)
	if tx == nil {
		return nil, nilHandle("tx")
	}
	var out []Enqueued
	b := &pgx.Batch{}
	if err := s.QueueEnqueue(b, evs, &out, pgtx.Return); err != nil {
		return nil, err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// queueEnqueueAbort is [Store.QueueEnqueue] with [pgtx.Abort]: one
// enqueue_abort statement per event, each named after its dedup key, then the
// NOTIFY of a Store with Config.Notify.
func (s *Store) queueEnqueueAbort(b *pgx.Batch, evs []Event, dst *[]Enqueued) error {
	if b == nil {
		return invalid("batch", "nil")
	}
	for i, ev := range evs {
		if ev.OrderingKey != "" {
			return invalid(fmt.Sprintf("events[%d].OrderingKey", i), "set: an ordered event needs pgtx.Return")
		}
	}
	a, err := s.buildEnqueue("events", evs)
	if err != nil {
		return err
	}
	out := make([]Enqueued, len(a.ids))
	for i := range a.ids {
		from := b.Len()
		b.Queue(s.enqueueOrAbort, insertOneArgs(a, i)...).QueryRow(func(row pgx.Row) error {
			var id uuid.UUID
			if err := row.Scan(&id); err != nil {
				return fmt.Errorf("outbox: enqueue: %w", err)
			}
			out[i] = Enqueued{New: true, EventID: id}
			if i == len(out)-1 && dst != nil {
				*dst = out
			}
			return nil
		})
		if i == len(a.ids)-1 && s.cfg.notify() {
			b.Queue(s.enqueueNotify, s.channel)
		}
		pgtx.NameCall(b, from, "outbox.Store.QueueEnqueue("+a.dedup[i]+")", s.fail.Classify)
	}
	return nil
}
