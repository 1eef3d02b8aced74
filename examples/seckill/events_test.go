package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// TestEventConsumerWays: the ORDER_CREATED consumer, in both of its ways
// (its result claimed with the event, or claimed and then completed with
// -event-two-step), applies an event once when it arrives three times at
// once, stores the event's row as PROCESSED with BUYER_NOTIFIED, and
// answers the two others as duplicates. The one-step way writes the row
// once: its only version is the first on the table's first page, where
// the two-step way's Complete leaves a second version.
func TestEventConsumerWays(t *testing.T) {
	t.Parallel()
	for _, twoStep := range []bool{false, true} {
		t.Run(fmt.Sprintf("two-step=%v", twoStep), func(t *testing.T) {
			t.Parallel()
			ctx := pgtest.Context(t, time.Minute)
			pool := pgtest.Pool(t)
			cfg := smallConfig(t)
			cfg.EventTwoStep = twoStep
			useStack(t, &cfg, stackMemory, false)
			s, err := newService(ctx, pool, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			var notified atomic.Int64
			s.onOrderCreated = func(id int64) {
				if id == 42 {
					notified.Add(1)
				}
			}
			h := s.eventHandlers()["order-created"]
			ev := broker.Message{ID: uuid.Must(uuid.NewV7()), Body: []byte(`{"order_id":42}`)}
			var wg sync.WaitGroup
			errs := make([]error, 3)
			for i := range errs {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = h(ctx, ev) }()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if got := notified.Load(); got != 1 {
				t.Errorf("buyer notified %d times, want 1", got)
			}
			if got := s.stats.eventDuplicates.Load(); got != 2 {
				t.Errorf("duplicates answered by the inbox: %d, want 2", got)
			}
			rec, err := s.Inbox.Lookup(ctx, pool, inbox.Key{Group: "order-created-consumer", MessageID: ev.ID})
			if err != nil {
				t.Fatal(err)
			}
			if rec.Status != inbox.StatusProcessed || rec.Result.Code != "BUYER_NOTIFIED" {
				t.Errorf("inbox row: %s %q, want PROCESSED BUYER_NOTIFIED", rec.Status, rec.Result.Code)
			}
			var rows int
			var ctid string
			if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) OVER (), ctid::text FROM %s.consumer_inbox`,
				pgx.Identifier{cfg.Schema}.Sanitize())).Scan(&rows, &ctid); err != nil {
				t.Fatal(err)
			}
			want := map[bool]string{false: "(0,1)", true: "(0,2)"}[twoStep]
			if rows != 1 || ctid != want {
				t.Errorf("inbox: %d row(s), the event's at %s; want 1 at %s", rows, ctid, want)
			}
		})
	}
}

// TestEventConsumerKnownResultGuard: a consumer whose apply returns a
// result other than the one its claim stored fails, and its transaction
// stores nothing: the row is not left claiming a result that was not the
// consumer's.
func TestEventConsumerKnownResultGuard(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	cfg := smallConfig(t)
	useStack(t, &cfg, stackMemory, false)
	s, err := newService(ctx, pool, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	h := s.eventHandler("guard-consumer", flow.TagOrderCreated, "KNOWN", func(_ context.Context, _ pgx.Tx, _ []byte) (string, error) {
		return "OTHER", nil
	})
	ev := broker.Message{ID: uuid.Must(uuid.NewV7()), Body: []byte(`{"order_id":7}`)}
	if err := h(ctx, ev); err == nil || !strings.Contains(err.Error(), `"KNOWN"`) {
		t.Fatalf("apply's other result: %v, want an error naming the stored one", err)
	}
	if _, err := s.Inbox.Lookup(ctx, pool, inbox.Key{Group: "guard-consumer", MessageID: ev.ID}); !errors.Is(err, inbox.ErrNotFound) {
		t.Fatalf("inbox row after the failed apply: %v, want ErrNotFound", err)
	}
}
