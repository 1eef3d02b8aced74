package outbox_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/outbox"
)

// recoveries records each RecoverEnd event and counts the events marked
// SENT.
type recoveries struct {
	*counters
	mu     sync.Mutex
	events []outbox.RelayEvent
}

func (r *recoveries) RecoverEnd(ctx context.Context, e outbox.RelayEvent) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	r.counters.RecoverEnd(ctx, e)
}

// A relay takes back every expired lease in one pass, a thousand at a
// time, without waiting for its next RecoverInterval (an hour here): 1,001
// leases of a crashed relay come back as one event of 1,000 and one of 1,
// and the one event that had used its last attempt is counted DEAD, in
// the event that recovered it, and never published.
func TestRelayRecoversEveryExpiredLeaseInOnePass(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	const n = 1001
	b.enqueue(t, manyEvents(n, func(i int, e *outbox.Event) {
		if i == 500 {
			e.MaxRetries = 1
		}
	})...)
	if c := b.claim(t, "crashed-relay", n); len(c.Messages) != n {
		t.Fatalf("claimed %d, want %d", len(c.Messages), n)
	}
	b.exec(t, `UPDATE `+b.table()+` SET locked_at = locked_at - interval '1 hour' WHERE locked_by = 'crashed-relay'`)
	rec := newRecorder()
	m := &recoveries{counters: newCounters(func(c *counters) bool { return c.recovered.Load() >= n && c.published.Load() >= n-1 })}
	stop := b.startRelays(t, 1, outbox.RelayConfig{Publish: rec.Publish, Observer: observe(m), RecoverInterval: time.Hour, DisableListen: true}, nil)
	m.wait(t, b.ctx)
	stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.events) != 2 || m.events[0].Recovered != 1000 || m.events[1].Recovered != 1 || m.events[0].Dead+m.events[1].Dead != 1 {
		t.Fatalf("RecoverEnd events %+v; want 1,000 then 1 recovered, 1 of them DEAD", m.events)
	}
	if m.published.Load() != n-1 || len(rec.ok) != n-1 || b.count(t, "status = 40") != 1 {
		t.Fatalf("published %d (%d distinct), DEAD %d; want %d and 1", m.published.Load(), len(rec.ok), b.count(t, "status = 40"), n-1)
	}
}

// A lease recovery the database refuses is logged as an error (the
// relay's only report of it) while the relay runs, and tried again at the
// next RecoverInterval; the event stays SENDING. A trigger refuses the
// recovery of the crashed relay's lease.
func TestRelayLogsARecoveryFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	b.enqueue(t, event(1))
	b.claim(t, "crashed-relay", 1)
	b.exec(t, `UPDATE `+b.table()+` SET locked_at = locked_at - interval '1 hour' WHERE locked_by = 'crashed-relay'`)
	fn := pgx.Identifier{b.schema, "refuse_recovery"}.Sanitize()
	b.exec(t, `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'recovery refused' USING ERRCODE = 'P0001'; END $$`)
	b.exec(t, `CREATE TRIGGER refuse_recovery BEFORE UPDATE ON `+b.table()+`
		FOR EACH ROW WHEN (OLD.locked_by = 'crashed-relay') EXECUTE FUNCTION `+fn+`()`)
	h := &records{owner: "recover-log"}
	cfg := outbox.RelayConfig{Publish: newRecorder().Publish, Owner: "recover-log", Logger: slog.New(h), DisableListen: true,
		PollInterval: 5 * time.Millisecond, MaxPollInterval: 5 * time.Millisecond, RecoverInterval: 5 * time.Millisecond}
	stop := b.startRelays(t, 1, cfg, nil)
	defer stop()
	ctx := testwait.Context(t, b.ctx, testwait.Step)
	for h.count("outbox relay: recover expired leases") < 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d errors logged of the refused recovery; want it logged at each try", h.count("outbox relay: recover expired leases"))
		case <-time.After(5 * time.Millisecond):
		}
	}
	if n := b.count(t, "status = 10"); n != 1 {
		t.Fatalf("%d events SENDING; want the crashed relay's one, its recovery refused", n)
	}
}
