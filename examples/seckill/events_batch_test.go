package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// batchService is a service on the in-memory stack whose ORDER_CREATED
// consumer takes batches, with the buyer's notices counted by order id.
func batchService(t *testing.T, ctx context.Context, pool *pgxpool.Pool) (*service, config, func() map[int64]int) {
	t.Helper()
	cfg := smallConfig(t)
	cfg.EventBatch = 16
	useStack(t, &cfg, stackMemory, false)
	s, err := newService(ctx, pool, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	var mu sync.Mutex
	notices := map[int64]int{}
	s.onOrderCreated = func(id int64) {
		mu.Lock()
		defer mu.Unlock()
		notices[id]++
	}
	return s, cfg, func() map[int64]int {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[int64]int, len(notices))
		for k, v := range notices {
			out[k] = v
		}
		return out
	}
}

// orderEvent is an ORDER_CREATED event of order id.
func orderEvent(id int64) broker.Message {
	return broker.Message{ID: uuid.Must(uuid.NewV7()), Body: fmt.Appendf(nil, `{"order_id":%d}`, id)}
}

// inboxRow is an event's stored inbox row: who wrote it and what it says.
type inboxRow struct {
	xmin   string
	status int
	code   string
}

func inboxRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema, group string) map[uuid.UUID]inboxRow {
	t.Helper()
	rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT message_id, xmin::text, status, coalesce(result_code, '') FROM %s.consumer_inbox WHERE consumer_group = $1`,
		pgx.Identifier{schema}.Sanitize()), group)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uuid.UUID]inboxRow{}
	for rows.Next() {
		var id uuid.UUID
		var r inboxRow
		if err := rows.Scan(&id, &r.xmin, &r.status, &r.code); err != nil {
			t.Fatal(err)
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEventBatchConsumer: the ORDER_CREATED consumer's batch claims every
// fresh event of the batch in one transaction (their rows share one xmin),
// stored PROCESSED with BUYER_NOTIFIED, and applies each once. An event
// already stored, or twice in the batch, is answered as a duplicate and
// not applied again. A batch with a poison event, or with a redelivery
// whose payload differs from its stored one, is handled one event at a
// time: the good events are stored, the bad one alone fails, and nothing
// of the bad one is stored.
func TestEventBatchConsumer(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	s, cfg, notices := batchService(t, ctx, pool)
	const group = "order-created-consumer"
	hb := s.eventBatchHandlers()["order-created"]
	if hb == nil {
		t.Fatal("no batch handler for order-created with EventBatch 16")
	}
	prior := orderEvent(100)
	if err := s.eventHandlers()["order-created"](ctx, prior); err != nil {
		t.Fatal(err)
	}

	e1, e2, e3 := orderEvent(1), orderEvent(2), orderEvent(3)
	errs := hb(ctx, []broker.Message{e1, e2, prior, e2, e3})
	if err := errors.Join(errs...); err != nil || len(errs) != 5 {
		t.Fatalf("batch: %d answers, %v; want 5, all nil", len(errs), err)
	}
	rows := inboxRows(t, ctx, pool, cfg.Schema, group)
	for _, e := range []broker.Message{e1, e2, e3} {
		r, ok := rows[e.ID]
		if !ok || r.status != int(inbox.StatusProcessed) || r.code != "BUYER_NOTIFIED" {
			t.Errorf("event %s: row %+v (stored %v), want PROCESSED BUYER_NOTIFIED", e.ID, r, ok)
		}
		if r.xmin != rows[e1.ID].xmin {
			t.Errorf("event %s written by transaction %s, e1 by %s: want one transaction for the batch", e.ID, r.xmin, rows[e1.ID].xmin)
		}
	}
	if rows[prior.ID].xmin == rows[e1.ID].xmin {
		t.Error("the stored event was written again by the batch")
	}
	if got, want := notices(), map[int64]int{100: 1, 1: 1, 2: 1, 3: 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("buyer notices by order %v, want %v", got, want)
	}
	if d, b, n, sp := s.stats.eventDuplicates.Load(), s.stats.eventBatches.Load(), s.stats.eventsBatched.Load(), s.stats.eventBatchesSplit.Load(); d != 2 || b != 1 || n != 5 || sp != 0 {
		t.Errorf("duplicates %d, batches %d of %d events, split %d; want 2, 1 of 5, 0", d, b, n, sp)
	}

	e4, e5 := orderEvent(4), orderEvent(5)
	bad := broker.Message{ID: uuid.Must(uuid.NewV7()), Body: []byte(`{}`)}
	changed := broker.Message{ID: prior.ID, Body: []byte(`{"order_id":999}`)}
	errs = hb(ctx, []broker.Message{e4, bad, changed, e5})
	if len(errs) != 4 || errs[0] != nil || !errors.Is(errs[1], flow.ErrPoison) || !errors.Is(errs[2], inbox.ErrPayloadMismatch) || errs[3] != nil {
		t.Fatalf("batch with a poison event and a changed payload: %v; want nil, ErrPoison, ErrPayloadMismatch, nil", errs)
	}
	rows = inboxRows(t, ctx, pool, cfg.Schema, group)
	for _, e := range []broker.Message{e4, e5} {
		if r := rows[e.ID]; r.status != int(inbox.StatusProcessed) || r.code != "BUYER_NOTIFIED" {
			t.Errorf("event %s beside a poison one: row %+v, want PROCESSED BUYER_NOTIFIED", e.ID, r)
		}
	}
	if _, ok := rows[bad.ID]; ok {
		t.Error("the poison event was stored")
	}
	if got := notices(); got[4] != 1 || got[5] != 1 || got[999] != 0 || got[100] != 1 {
		t.Errorf("buyer notices by order %v: want orders 4 and 5 once, 100 still once, 999 never", got)
	}
	if sp := s.stats.eventBatchesSplit.Load(); sp != 1 {
		t.Errorf("batches handled one by one: %d, want 1", sp)
	}
}

// TestEventBatchesRace: the same events reach several batches and single
// handlers at once (redeliveries racing the first delivery's COMMIT, in
// opposite orders): no batch deadlocks with another, every answer is nil,
// each event is stored once,
// PROCESSED, and applied by exactly the transaction that stored it (a
// notice from a transaction that rolled back may repeat; the buyer
// ignores it, and the stored row is the one that counts).
func TestEventBatchesRace(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 2*time.Minute)
	pool := pgtest.Pool(t)
	s, cfg, notices := batchService(t, ctx, pool)
	hb, h := s.eventBatchHandlers()["order-created"], s.eventHandlers()["order-created"]
	const rounds, perRound = 30, 6
	var all []broker.Message
	for r := range rounds {
		evs := make([]broker.Message, perRound)
		for i := range evs {
			evs[i] = orderEvent(int64(r*perRound + i + 1))
		}
		all = append(all, evs...)
		rev := make([]broker.Message, len(evs))
		for i := range evs {
			rev[i] = evs[len(evs)-1-i]
		}
		var wg sync.WaitGroup
		answers := make([][]error, 4)
		run := func(k int, f func() []error) {
			wg.Add(1)
			go func() { defer wg.Done(); answers[k] = f() }()
		}
		run(0, func() []error { return hb(ctx, evs) })
		run(1, func() []error { return hb(ctx, rev) })
		run(2, func() []error { return hb(ctx, evs[2:5]) })
		run(3, func() []error { return []error{h(ctx, evs[3])} })
		wg.Wait()
		for k, errs := range answers {
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("round %d, handler %d: %v", r, k, err)
			}
		}
	}
	rows := inboxRows(t, ctx, pool, cfg.Schema, "order-created-consumer")
	if len(rows) != len(all) {
		t.Errorf("%d inbox rows, want %d", len(rows), len(all))
	}
	got := notices()
	for i, e := range all {
		if r := rows[e.ID]; r.status != int(inbox.StatusProcessed) || r.code != "BUYER_NOTIFIED" {
			t.Errorf("event %s: row %+v, want PROCESSED BUYER_NOTIFIED", e.ID, r)
		}
		if got[int64(i+1)] < 1 {
			t.Errorf("order %d: the buyer was never notified", i+1)
		}
	}
	t.Logf("batches committed %d, handled one by one %d", s.stats.eventBatches.Load(), s.stats.eventBatchesSplit.Load())
	if n := s.stats.deadlocks.Load(); n != 0 {
		t.Errorf("%d transaction attempts deadlocked: batches that share events must claim them in one order", n)
	}
	if d, want := s.stats.eventDuplicates.Load(), int64(rounds*(perRound+3+1)); d != want {
		t.Errorf("duplicates answered: %d, want %d (every claim but each event's first)", d, want)
	}
}

// TestEventBatchKnownResultGuard: in a batch as alone, an apply that
// returns a result other than the one the claims stored fails every event
// of the batch, and nothing is stored.
func TestEventBatchKnownResultGuard(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	s, cfg, _ := batchService(t, ctx, pool)
	hb := s.eventBatchHandler("guard-consumer", flow.TagOrderCreated, "KNOWN", func(context.Context, pgx.Tx, []byte) (string, error) {
		return "OTHER", nil
	})
	errs := hb(ctx, []broker.Message{orderEvent(1), orderEvent(2)})
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), `"KNOWN"`) {
			t.Errorf("event %d: %v, want an error naming the stored result", i, err)
		}
	}
	if rows := inboxRows(t, ctx, pool, cfg.Schema, "guard-consumer"); len(rows) != 0 {
		t.Errorf("%d inbox rows stored for events whose apply lied, want 0", len(rows))
	}
	if b := s.stats.eventBatches.Load(); b != 0 {
		t.Errorf("%d batches committed, want 0", b)
	}
}
