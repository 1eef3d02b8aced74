package broker

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
)

// Broker carries the order messages from the front door to the consumers:
// NATS JetStream in a real deployment ([JetStream]), an in-process queue
// with -stack memory. Delivery is at least once; a message is acknowledged
// only when handle returned nil, that is after its transaction committed.
type Broker interface {
	// Name says what it is, for the report.
	Name() string
	// Publish queues m, or returns [ErrBusy] when the queue is full.
	Publish(ctx context.Context, m Message) error
	// Consume runs workers that hand deliveries to handle until ctx ends;
	// the returned func waits for them.
	Consume(ctx context.Context, workers int, handle func(context.Context, Message) error) (wait func())
	// WaitIdle blocks until every published message has been acknowledged
	// (or given up as poison) or ctx ends.
	WaitIdle(ctx context.Context) error
	// Pending is how many published messages wait for an acknowledgement.
	Pending(ctx context.Context) int64
	// Figures are the broker's counters.
	Figures() Figures
	// Close stops what the broker runs by itself; call it after the
	// consumers have stopped.
	Close()
}

// Figures are a broker's counters for the report and the audit.
type Figures struct {
	Published    int64 // distinct messages accepted
	Deliveries   int64
	Redeliveries int64
	Deduplicated int64 // publishes the broker recognised as duplicates (Nats-Msg-Id)
}

// ErrBusy is Publish's answer when the queue (or the stream) is full:
// backpressure, the click is refused and may be tried again.
var ErrBusy = errors.New("busy: queue full, try again")

// Message is one order message: its id (the deduplication key, the
// inbox's MessageID) and its body.
type Message struct {
	ID   uuid.UUID
	Body []byte
	// Header holds the message's headers: the trace context of the hop
	// that sent it (traceparent, tracestate) among them. NATS headers on
	// the real stack, carried as they are by the in-memory queue. Read and
	// write the trace context through [HeaderCarrier].
	Header nats.Header
}

type delivery struct {
	msg     Message
	attempt int
}

// MemoryConfig tunes the in-memory queue.
type MemoryConfig struct {
	Depth      int           // bound on queued deliveries
	DupRate    float64       // share of messages delivered twice on purpose
	Visibility time.Duration // redeliver when a handler takes longer
	Redelay    time.Duration // wait before a nacked message comes back
}

// Memory stands in for the message broker with -stack memory: in-process,
// at-least-once. A message is delivered again when its handler fails
// (nack) or does not finish within the visibility timeout, and a
// configurable share of messages is delivered twice on purpose. Its depth
// is bounded: a full queue answers [ErrBusy] instead of growing
// (backpressure).
type Memory struct {
	cfg MemoryConfig
	ch  chan delivery

	done chan struct{} // closed by Close: pending redeliveries give up

	mu      sync.Mutex
	pending map[uuid.UUID]bool // published and not yet acknowledged
	idle    *sync.Cond

	published, deliveries, redeliveries, duplicates, acks, nacks atomic.Int64
	timers                                                       sync.WaitGroup
}

// NewMemory returns an empty in-memory queue.
func NewMemory(cfg MemoryConfig) *Memory {
	q := &Memory{cfg: cfg, ch: make(chan delivery, cfg.Depth), done: make(chan struct{}), pending: map[uuid.UUID]bool{}}
	q.idle = sync.NewCond(&q.mu)
	return q
}

// Publish queues m, or returns [ErrBusy] when the queue is full.
func (q *Memory) Publish(_ context.Context, m Message) error {
	select {
	case q.ch <- delivery{msg: m, attempt: 1}:
	default:
		return ErrBusy
	}
	q.mu.Lock()
	q.pending[m.ID] = true
	q.mu.Unlock()
	q.published.Add(1)
	if q.cfg.DupRate > 0 && rand.Float64() < q.cfg.DupRate {
		q.duplicates.Add(1)
		q.later(delivery{msg: m, attempt: 1}, 0)
	}
	return nil
}

// later delivers d again after wait, blocking (not dropping) when the
// queue is full: a redelivery must never be lost.
func (q *Memory) later(d delivery, wait time.Duration) {
	q.timers.Add(1)
	go func() {
		defer q.timers.Done()
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-q.done:
			return
		}
		select {
		case q.ch <- d:
		case <-q.done:
		}
	}()
}

// Close makes pending redeliveries give up and waits for them. Call it
// after the consumers have stopped.
func (q *Memory) Close() {
	close(q.done)
	q.timers.Wait()
}

// Consume runs workers that hand deliveries to handle until ctx ends. A nil
// error acknowledges the message; anything else redelivers it.
func (q *Memory) Consume(ctx context.Context, workers int, handle func(context.Context, Message) error) (wait func()) {
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case d := <-q.ch:
					q.deliver(ctx, d, handle)
				}
			}
		}()
	}
	return wg.Wait
}

func (q *Memory) deliver(ctx context.Context, d delivery, handle func(context.Context, Message) error) {
	q.deliveries.Add(1)
	var finished atomic.Bool
	vt := time.AfterFunc(q.cfg.Visibility, func() {
		if !finished.Load() && q.isPending(d.msg.ID) {
			// The broker gives up on this delivery and hands the message to
			// another consumer while the first may still be working on it.
			q.redeliveries.Add(1)
			q.later(delivery{msg: d.msg, attempt: d.attempt + 1}, 0)
		}
	})
	err := handle(ctx, d.msg)
	finished.Store(true)
	vt.Stop()
	if err != nil {
		q.nacks.Add(1)
		if ctx.Err() == nil {
			q.redeliveries.Add(1)
			q.later(delivery{msg: d.msg, attempt: d.attempt + 1}, q.cfg.Redelay)
		}
		return
	}
	q.acks.Add(1)
	q.mu.Lock()
	if q.pending[d.msg.ID] {
		delete(q.pending, d.msg.ID)
		if len(q.pending) == 0 {
			q.idle.Broadcast()
		}
	}
	q.mu.Unlock()
}

func (q *Memory) isPending(id uuid.UUID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pending[id]
}

// WaitIdle blocks until every published message has been acknowledged or
// ctx ends.
func (q *Memory) WaitIdle(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.idle.Broadcast()
		q.mu.Unlock()
	})
	defer stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.pending) > 0 && ctx.Err() == nil {
		q.idle.Wait()
	}
	return ctx.Err()
}

// Pending is how many published messages wait for an acknowledgement.
func (q *Memory) Pending(context.Context) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return int64(len(q.pending))
}

// Name says what it is, for the report.
func (q *Memory) Name() string { return "memory (in-process stand-in for a broker)" }

// Figures are the queue's counters (Deduplicated stays 0: it has no
// duplicate window).
func (q *Memory) Figures() Figures {
	return Figures{Published: q.published.Load(), Deliveries: q.deliveries.Load(), Redeliveries: q.redeliveries.Load()}
}
