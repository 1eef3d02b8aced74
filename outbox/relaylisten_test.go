package outbox_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/outbox"
)

// warnings records the relay's warnings with their retry_in attribute.
type warnings struct {
	mu    sync.Mutex
	lost  []time.Duration // retry_in of each "LISTEN connection lost"
	attrs []slog.Attr
}

func (h *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (h *warnings) WithGroup(string) slog.Handler            { return h }
func (h *warnings) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "outbox relay: LISTEN connection lost, polling meanwhile" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "retry_in" {
			h.mu.Lock()
			h.lost = append(h.lost, a.Value.Duration())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

func (h *warnings) losses() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.lost...)
}

// A relay whose LISTEN connection is cut logs the loss with the pause
// before it listens again (100ms the first time, doubling), opens another, and is
// woken by the next event's NOTIFY: with a poll interval of an hour, only
// the notification can wake it.
func TestRelayListenReconnects(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{Notify: true})
	pool, app := b.ownPool(t)
	h := &warnings{}
	rec := newRecorder()
	m := newCounters(func(c *counters) bool { return c.published.Load() >= 1 })
	idle := make(chan bool, 100)
	r, err := outbox.NewRelay(pool, outbox.RelayConfig{Publish: rec.Publish, Store: b.store, Observer: observe(m), Logger: slog.New(h),
		PollInterval: time.Hour, MaxPollInterval: time.Hour, RecoverInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	outbox.SetIdleHook(r, func(listening bool) {
		select {
		case idle <- listening:
		default:
		}
	})
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := testwait.Recv(t, done, "Run to return"); err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	waitListening := func(what string) {
		t.Helper()
		wctx := testwait.Context(t, b.ctx, testwait.Step)
		for listening := false; !listening; {
			select {
			case listening = <-idle:
			case <-wctx.Done():
				t.Fatalf("relay never went idle while listening, %s", what)
			}
		}
	}
	waitListening("at start")
	// cut terminates the LISTEN session and checks that its loss is logged
	// with the pause want before the relay listens again.
	wctx := testwait.Context(t, b.ctx, testwait.Step)
	cut := func(nth int, want time.Duration) {
		t.Helper()
		var n int
		if err := b.pool.QueryRow(b.ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&n); err != nil || n != 1 {
			t.Fatalf("cut %d: terminated %d LISTEN sessions (%v), want 1", nth, n, err)
		}
		for len(h.losses()) < nth {
			select {
			case <-wctx.Done():
				t.Fatalf("cut %d: the loss of the LISTEN connection was never logged", nth)
			case <-time.After(2 * time.Millisecond):
			}
		}
		if got := h.losses(); got[nth-1] != want {
			t.Fatalf("cut %d: pause before listening again %v, want %v", nth, got[nth-1], want)
		}
		for len(idle) > 0 {
			<-idle
		}
	}
	cut(1, 100*time.Millisecond)
	waitListening("after the cut") // the new connection wakes the relay
	cut(2, 200*time.Millisecond)   // cut again: the pause doubles
	waitListening("after the second cut")
	id := b.enqueue(t, event(1))[0].EventID
	m.wait(t, b.ctx)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.ok[id] != 1 {
		t.Fatalf("published %v", rec.ok)
	}
}
