package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	store  *outbox.Store
}

func setup(t testing.TB, cfg outbox.Config) *bundle {
	t.Helper()
	b := &bundle{ctx: pgtest.Context(t, 2*time.Minute), pool: pgtest.Pool(t), schema: pgtest.Schema(t)}
	if err := migrateOutbox(b.ctx, b.pool, b.schema); err != nil {
		t.Fatal(err)
	}
	cfg.Schema = b.schema
	s, err := outbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.store = s
	return b
}

// event returns a valid event with dedup key "k<i>".
func event(i int) outbox.Event {
	return outbox.Event{
		Topic:         "ORDER_EVENT",
		Tag:           "ORDER_CREATED",
		AggregateType: "ORDER",
		AggregateID:   fmt.Sprint(i),
		Payload:       json.RawMessage(fmt.Sprintf(`{"order_id": %d}`, i)),
		DedupKey:      fmt.Sprintf("k%d", i),
	}
}

// enqueue commits evs in one transaction (chunks of 1000 events per
// statement).
func (b *bundle) enqueue(t testing.TB, evs ...outbox.Event) []outbox.Enqueued {
	t.Helper()
	var out []outbox.Enqueued
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		for len(evs) > 0 {
			n := min(len(evs), 1000)
			res, err := b.store.Enqueue(b.ctx, tx, evs[:n]...)
			if err != nil {
				return err
			}
			out = append(out, res...)
			evs = evs[n:]
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (b *bundle) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := b.pool.Exec(b.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (b *bundle) count(t testing.TB, where string, args ...any) int {
	t.Helper()
	var n int
	q := `SELECT count(*) FROM ` + pgx.Identifier{b.schema, "event_outbox"}.Sanitize() + ` WHERE ` + where
	if err := b.pool.QueryRow(b.ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (b *bundle) table() string { return pgx.Identifier{b.schema, "event_outbox"}.Sanitize() }

func (b *bundle) stats(t testing.TB) outbox.Stats {
	t.Helper()
	st, err := b.store.Stats(b.ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// migrateOutbox applies the outbox's migrations to schema.
func migrateOutbox(ctx context.Context, db pgtx.TxBeginner, schema string) error {
	_, err := migrate.Apply(ctx, db, schema, outbox.Migrations)
	return err
}

// claimIDs returns the event ids of c's messages.
func claimIDs(c outbox.Claim) []uuid.UUID {
	ids := make([]uuid.UUID, len(c.Messages))
	for i, m := range c.Messages {
		ids[i] = m.EventID
	}
	return ids
}

// hooks is an observer written as methods.
type hooks interface {
	BatchStart(ctx context.Context, e outbox.RelayEvent) context.Context
	BatchEnd(ctx context.Context, e outbox.RelayEvent)
	RecoverEnd(ctx context.Context, e outbox.RelayEvent)
}

// observe is the Observer of h's methods.
func observe(h hooks) outbox.Observer {
	return outbox.Observer{BatchStart: h.BatchStart, BatchEnd: h.BatchEnd, RecoverEnd: h.RecoverEnd}
}

// enqueueOne enqueues ev alone and returns its outcome.
func enqueueOne(ctx context.Context, s *outbox.Store, tx pgx.Tx, ev outbox.Event) (outbox.Enqueued, error) {
	res, err := s.Enqueue(ctx, tx, ev)
	if err != nil {
		return outbox.Enqueued{}, err
	}
	return res[0], nil
}
