package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/outbox"
)

// records is a slog handler that keeps the records of one relay owner.
type records struct {
	owner string
	mu    sync.Mutex
	msgs  []string
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) WithGroup(string) slog.Handler            { return h }
func (h *records) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		if a.Key == "owner" && a.Value.String() == h.owner {
			return &ownerRecords{h}
		}
	}
	return discard{}
}
func (h *records) Handle(context.Context, slog.Record) error { return nil }

// ownerRecords is records for the relay's own logger.
type ownerRecords struct{ *records }

func (h *ownerRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *ownerRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}

type discard struct{}

func (discard) Enabled(context.Context, slog.Level) bool  { return false }
func (discard) Handle(context.Context, slog.Record) error { return nil }
func (d discard) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discard) WithGroup(string) slog.Handler           { return d }

func (h *records) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

var nopPublisher = func(context.Context, []outbox.Message) []error { return nil }

// TestRelayNotMigrated: a relay whose store names a schema without the
// outbox table is refused by NewRelay with a *migrate.NotMigratedError
// that names the schema and the fix; one whose table disappears after
// construction ends Run with that error instead of idling.
func TestRelayNotMigrated(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	other := pgtest.Schema(t) // never migrated
	st, err := outbox.New(outbox.Config{Schema: other})
	if err != nil {
		t.Fatal(err)
	}
	_, err = outbox.NewRelay(b.pool, outbox.RelayConfig{Store: st, Publish: nopPublisher, DisableListen: true})
	var nm *migrate.NotMigratedError
	if !errors.Is(err, migrate.ErrNotMigrated) || !errors.As(err, &nm) || nm.Schema != other || nm.Component != "outbox" ||
		!strings.Contains(err.Error(), `migrate.Apply(ctx, db, "`+other+`", outbox.Migrations)`) {
		t.Fatalf("NewRelay on schema %s: %v, want a *migrate.NotMigratedError naming it and migrate.Apply", other, err)
	}
	// The default store's schema, "seckill", is not migrated on this
	// server either (the tests migrate schemas of their own).
	if _, err := outbox.NewRelay(b.pool, outbox.RelayConfig{Publish: nopPublisher}); !errors.Is(err, migrate.ErrNotMigrated) ||
		!strings.Contains(err.Error(), `schema "seckill"`) {
		t.Fatalf("NewRelay with the default store: %v, want ErrNotMigrated naming schema seckill", err)
	}

	for _, inTx := range []bool{false, true} {
		b := setup(t, outbox.Config{})
		r, err := outbox.NewRelay(b.pool, outbox.RelayConfig{Store: b.store, Publish: nopPublisher, DisableListen: true,
			PollInterval: time.Millisecond, InTx: inTx})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.pool.Exec(b.ctx, `ALTER TABLE `+pgx.Identifier{b.schema, "event_outbox"}.Sanitize()+` RENAME TO gone`); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		err = r.Run(ctx)
		if !errors.Is(err, migrate.ErrNotMigrated) || !errors.As(err, &nm) || nm.Schema != b.schema || ctx.Err() != nil {
			t.Fatalf("InTx %v: Run without the table: %v (ctx %v), want ErrNotMigrated for %s before the deadline", inTx, err, ctx.Err(), b.schema)
		}
		cancel()
	}
}

// TestRelayGivesUp: a relay whose every cycle fails (its database cannot
// be reached) logs each failure to slog.Default(), counts them in
// Failing, and returns an error matching ErrRelayFailing after
// MaxConsecutiveFailures cycles in a row; without MaxConsecutiveFailures
// it keeps trying until stopped, Failing telling the streak.
func TestRelayGivesUp(t *testing.T) {
	ctx := pgtest.Context(t, time.Minute)
	// Nothing listens on port 1: every connection attempt is refused, and
	// NewRelay's check cannot tell whether the schema is migrated.
	pool, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	h := &records{owner: "gives-up"}
	prev := slog.Default()
	slog.SetDefault(slog.New(h))
	defer slog.SetDefault(prev)
	r, err := outbox.NewRelay(pool, outbox.RelayConfig{Publish: nopPublisher, Owner: "gives-up", DisableListen: true,
		PollInterval: time.Millisecond, MaxPollInterval: time.Millisecond, MaxConsecutiveFailures: 3})
	if err != nil {
		t.Fatalf("NewRelay with an unreachable database: %v, want a relay (Run reports)", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = r.Run(rctx)
	if !errors.Is(err, outbox.ErrRelayFailing) || !strings.Contains(err.Error(), "3 cycles failed in a row") || rctx.Err() != nil {
		t.Fatalf("Run: %v (ctx %v), want ErrRelayFailing after 3 cycles", err, rctx.Err())
	}
	if n := h.count("outbox relay: batch failed"); n != 3 {
		t.Fatalf("the default logger heard %d failed cycles, want 3", n)
	}
	if n, last := r.Failing(); n != 3 || last == nil {
		t.Fatalf("Failing = %d, %v; want 3 and the last failure", n, last)
	}

	forever, err := outbox.NewRelay(pool, outbox.RelayConfig{Publish: nopPublisher, Owner: "forever", DisableListen: true,
		PollInterval: time.Millisecond, MaxPollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if n, last := forever.Failing(); n != 0 || last != nil {
		t.Fatalf("Failing before Run = %d, %v; want 0, nil", n, last)
	}
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- forever.Run(fctx) }()
	for n, _ := forever.Failing(); n < 50; n, _ = forever.Failing() { // well past any bound
		select {
		case err := <-done:
			t.Fatalf("Run without MaxConsecutiveFailures returned %v after %d failures", err, n)
		case <-ctx.Done():
			t.Fatalf("only %d failed cycles before the deadline", n)
		case <-time.After(time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run without MaxConsecutiveFailures: %v, want nil once stopped", err)
	}
	if _, err := outbox.NewRelay(pool, outbox.RelayConfig{Publish: nopPublisher, MaxConsecutiveFailures: -1}); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("negative MaxConsecutiveFailures: %v, want ErrInvalidArgument", err)
	}
}

// TestRelayLogsDeadEvents: a relay warns once for a batch in which events
// went DEAD after their last attempt, and says nothing of the kind for a
// batch without one (InTx and leased).
func TestRelayLogsDeadEvents(t *testing.T) {
	t.Parallel()
	for _, inTx := range []bool{false, true} {
		b := setup(t, outbox.Config{})
		h := &records{owner: "dead-log"}
		doomed := event(1)
		doomed.MaxRetries = 1
		doomed.MessageKey = "doomed"
		var retriedOnce atomic.Bool
		failOnce := func(_ context.Context, msgs []outbox.Message) []error {
			errs := make([]error, len(msgs))
			for i, m := range msgs {
				switch {
				case m.MessageKey == doomed.MessageKey:
					errs[i] = errors.New("broker refused")
				case m.MessageKey == "retried" && retriedOnce.CompareAndSwap(false, true):
					errs[i] = errors.New("broker busy")
				}
			}
			return errs
		}
		cfg := outbox.RelayConfig{Publish: failOnce, Owner: "dead-log", Logger: slog.New(h), InTx: inTx,
			DisableListen: true, PollInterval: 5 * time.Millisecond, MaxPollInterval: 5 * time.Millisecond,
			Backoff: func(int) time.Duration { return 0 }}
		wait := func(what string, done func(outbox.Stats) bool) {
			t.Helper()
			ctx := testwait.Context(t, b.ctx, testwait.Step)
			for !done(b.stats(t)) {
				select {
				case <-ctx.Done():
					t.Fatalf("InTx %v: %s: not before the deadline (%+v)", inTx, what, b.stats(t))
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
		b.enqueue(t, doomed)
		stop := b.startRelays(t, 1, cfg, nil)
		wait("the event to go DEAD", func(s outbox.Stats) bool { return s.Dead == 1 })
		for i := 2; i <= 3; i++ { // two batches without a dead event
			b.enqueue(t, event(i))
			wait("the next to be SENT", func(s outbox.Stats) bool { return s.Sent == int64(i-1) && s.Pending+s.Retry+s.Sending == 0 })
		}
		// A batch whose event fails with attempts left: a failure, no death.
		retried := event(4)
		retried.MessageKey = "retried"
		b.enqueue(t, retried)
		wait("the retried one to be SENT", func(s outbox.Stats) bool { return s.Sent == 3 && s.Pending+s.Retry+s.Sending == 0 })
		stop()
		if !retriedOnce.Load() {
			t.Fatalf("InTx %v: the retried event never failed", inTx)
		}
		if n := h.count("outbox relay: events dead after their last attempt"); n != 1 {
			t.Fatalf("InTx %v: %d warnings of dead events, want 1 (the batch in which the event went DEAD)", inTx, n)
		}
	}
}
