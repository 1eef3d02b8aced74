package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/outbox"
)

// startBackground starts the order consumers, the outbox relays and, with
// the real stack, the event consumers. The returned stop ends them and
// waits for them; calling it again is a no-op. The service's connections
// stay open (for the audit and the reconciliation) until service.close.
func (s *service) startBackground(ctx context.Context, consumers, relays int) (stop func(), err error) {
	bg, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var waits []func()
	fail := func(err error) (func(), error) {
		cancel()
		wg.Wait()
		for _, w := range waits {
			w()
		}
		return nil, err
	}
	var backoff func(int) time.Duration // default
	if s.js == nil {
		// -stack memory applies the front-door releases in the publish: a
		// failed release is tried again as the JetStream consumer would
		// (100ms, doubling, at most 2s), not after the relay's default backoff.
		backoff = func(attempt int) time.Duration {
			return min(100*time.Millisecond<<min(max(attempt-1, 0), 10), 2*time.Second)
		}
	}
	for i := range relays {
		r, err := outbox.NewRelay(s.Pool, outbox.RelayConfig{
			Store: s.Outbox, Publish: s.publisher(), Owner: fmt.Sprintf("seckill-relay-%d-%s", i, uuid.NewString()[:8]),
			BatchSize: 200, PollInterval: 20 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond,
			// The order path sends no NOTIFY (see flow.Config.Notify): relays poll.
			DisableListen: true, Logger: s.log, Backoff: backoff, Observer: s.tel.obs.Outbox,
			InTx: s.relayInTx,
		})
		if err != nil {
			return fail(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(bg) }()
	}
	if s.js != nil {
		batched := s.eventBatchHandlers()
		for durable, h := range s.eventHandlers() {
			hb, inBatches := batched[durable]
			workers := 2                                  // a batch consumer's two take every event the pull holds: few workers, full batches
			if durable == "order-created" && !inBatches { // one per order: the busiest
				workers = max(consumers/2, 2)
			}
			var w func()
			if inBatches {
				w, err = s.js.ConsumeEventBatches(bg, durable, workers, s.eventBatch, hb)
			} else {
				w, err = s.js.ConsumeEvents(bg, durable, workers, h)
			}
			if err != nil {
				return fail(err)
			}
			waits = append(waits, w)
		}
	}
	waits = append(waits, s.q.Consume(bg, consumers, s.consume))
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			for _, w := range waits {
				w()
			}
			wg.Wait()
		})
	}, nil
}
