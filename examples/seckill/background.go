package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/outbox"
)

// startBackground starts the queue consumers and the outbox relays. The
// returned stop ends them and waits for them; calling it again is a no-op.
func (s *service) startBackground(ctx context.Context, consumers, relays int) (stop func(), err error) {
	bg, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range relays {
		r, err := outbox.NewRelay(s.Pool, outbox.RelayConfig{
			Store: s.Outbox, Publisher: s.publisher(), Owner: fmt.Sprintf("seckill-relay-%d-%s", i, uuid.NewString()[:8]),
			BatchSize: 200, PollInterval: 20 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond,
			// The order path sends no NOTIFY (see flow.Config.Notify): relays poll.
			DisableListen: true, Logger: s.log,
		})
		if err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(bg) }()
	}
	cw := s.q.Consume(bg, consumers, s.consume)
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			cw.Wait()
			wg.Wait()
			s.q.Close()
		})
	}, nil
}
