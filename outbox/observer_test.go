package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckillkit/seckill/outbox"
)

// batchKey marks the context a BatchStart returned.
type batchKey struct{}

// batchTracer checks the pairing of BatchStart and BatchEnd through their
// context, as a tracer's span would ride on it, and keeps every event.
type batchTracer struct {
	*counters
	mu      sync.Mutex
	starts  int
	claimed map[int]int // batch number → messages at BatchStart
	ends    []outbox.RelayEvent
	headers map[string]bool // traceparent headers seen at BatchStart
	wrong   []string
}

func (h *batchTracer) BatchStart(ctx context.Context, e outbox.RelayEvent) context.Context {
	h.mu.Lock()
	h.starts++
	id := h.starts
	h.claimed[id] = len(e.Messages)
	for _, m := range e.Messages {
		h.headers[m.Headers["traceparent"]] = true
	}
	h.mu.Unlock()
	return context.WithValue(h.counters.BatchStart(ctx, e), batchKey{}, id)
}

func (h *batchTracer) BatchEnd(ctx context.Context, e outbox.RelayEvent) {
	h.mu.Lock()
	id, ok := ctx.Value(batchKey{}).(int)
	if !ok || h.claimed[id] != e.Claimed || e.Published+e.Failed+e.Released != e.Claimed || e.Err != nil {
		h.wrong = append(h.wrong, fmt.Sprintf("batch %d (%v): %+v", id, ok, e))
	}
	h.ends = append(h.ends, e)
	h.mu.Unlock()
	h.counters.BatchEnd(ctx, e)
}

// TestRelayObserver: what the relay's Observer adds up equals what the
// table holds afterwards — each batch's marks are reported once, after
// they committed — every BatchEnd gets its own BatchStart's context, and
// BatchStart shows the claimed events' headers.
func TestRelayObserver(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	const n = 40
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = event(i)
		evs[i].Headers = map[string]string{"traceparent": fmt.Sprintf("tp-%d", i)}
		if i%4 == 0 {
			evs[i].MaxRetries = 1 // fails once: DEAD
		}
	}
	enq := b.enqueue(t, evs...)
	poison, flaky := map[string]bool{}, map[string]bool{}
	for i, e := range enq {
		switch i % 4 {
		case 0:
			poison[e.EventID.String()] = true
		case 1:
			flaky[e.EventID.String()] = true
		}
	}
	var mu sync.Mutex
	rec := newRecorder()
	rec.fail = func(m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		id := m.EventID.String()
		switch {
		case poison[id]:
			return errors.New("poison")
		case flaky[id]:
			delete(flaky, id) // fails its first attempt only
			return errors.New("flaky")
		}
		return nil
	}
	obs := &batchTracer{claimed: map[int]int{}, headers: map[string]bool{},
		counters: newCounters(func(c *counters) bool { return c.published.Load() >= n*3/4 && c.dead.Load() >= n/4 })}
	stop := b.startRelays(t, 2, outbox.RelayConfig{Publish: rec.Publish, Observer: observe(obs), BatchSize: 7,
		Backoff: func(int) time.Duration { return 0 }}, nil)
	obs.wait(t, b.ctx)
	stop()

	if len(obs.wrong) > 0 {
		t.Fatalf("batch events: %v", obs.wrong)
	}
	sent, dead := b.count(t, "status = 20"), b.count(t, "status = 40")
	if int64(sent) != obs.published.Load() || int64(dead) != obs.dead.Load() || sent != n*3/4 || dead != n/4 {
		t.Fatalf("observed %d published, %d dead; the table has %d SENT, %d DEAD (want %d, %d)",
			obs.published.Load(), obs.dead.Load(), sent, dead, n*3/4, n/4)
	}
	if f := obs.failed.Load(); f != n/4+n/4 { // every poison event once, every flaky one once
		t.Fatalf("observed %d failed publishes, want %d", f, n/2)
	}
	if obs.counters.claimed.Load() != int64(n+n/4) {
		t.Fatalf("observed %d claimed, want %d (each event, the flaky ones twice)", obs.counters.claimed.Load(), n+n/4)
	}
	for i := range n {
		if !obs.headers[fmt.Sprintf("tp-%d", i)] {
			t.Fatalf("BatchStart never showed the headers of event %d", i)
		}
	}
}
