package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/outbox"
)

// TestRelayPollBackoff: an idle relay (no events, no LISTEN) waits
// PollInterval, then twice as long after each full wait, up to
// MaxPollInterval; a wait cut short by the next lease recovery does not
// double the interval.
func TestRelayPollBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	pub := func(context.Context, []outbox.Message) []error { return nil }
	type idle struct{ wait, interval time.Duration }
	run := func(cfg outbox.RelayConfig, n int) []idle {
		t.Helper()
		waits := make(chan idle, 64)
		cfg.Publish, cfg.DisableListen = pub, true
		stop := b.startRelays(t, 1, cfg, func(r *outbox.Relay) {
			outbox.SetWaitHook(r, func(wait, interval time.Duration) {
				select {
				case waits <- idle{wait, interval}:
				default:
				}
			})
		})
		defer stop()
		out := make([]idle, n)
		for i := range out {
			out[i] = testwait.Recv(t, waits, "the relay's next idle wait")
		}
		return out
	}

	got := run(outbox.RelayConfig{PollInterval: 2 * time.Millisecond, MaxPollInterval: 32 * time.Millisecond, RecoverInterval: time.Hour}, 8)
	for i, want := range []time.Duration{2, 4, 8, 16, 32, 32, 32, 32} {
		want *= time.Millisecond
		if got[i].interval != want || got[i].wait != want {
			t.Fatalf("idle wait %d: %+v; want %v (all: %+v)", i, got[i], want, got)
		}
	}

	const maxPoll = 10 * time.Second
	got = run(outbox.RelayConfig{PollInterval: 20 * time.Millisecond, MaxPollInterval: maxPoll, RecoverInterval: 50 * time.Millisecond}, 10)
	short := 0
	for i := 1; i < len(got); i++ {
		prev, want := got[i-1], got[i-1].interval
		if prev.wait == prev.interval {
			want = min(2*prev.interval, maxPoll)
		} else {
			short++
		}
		if got[i].interval != want || got[i].wait > got[i].interval {
			t.Fatalf("idle wait %d after %+v: %+v; want the interval %v (all: %+v)", i, prev, got[i], want, got)
		}
	}
	if short == 0 {
		t.Fatalf("no wait was cut short by the recovery every 50ms: %+v", got)
	}
}
