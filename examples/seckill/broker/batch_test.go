package broker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/seckillkit/seckill/outbox"
)

// TestJetStreamEventBatches: ConsumeEventBatches hands a worker every
// event its pull holds, at most the batch's bound, and settles each event
// by its own error: the events that succeed are acked once, one that fails
// is nakked and comes back alone or in a later batch, and one without a
// message id is recorded as poison without reaching the handler. The
// consumer ends idle: nothing acknowledged, nothing lost.
func TestJetStreamEventBatches(t *testing.T) {
	t.Parallel()
	const events, most = 40, 8
	j := jsTest(t, JetStreamConfig{RetryDelay: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var poison []error
	j.OnPoison = func(_ context.Context, stream string, _ Message, _ uint64, cause error) error {
		mu.Lock()
		defer mu.Unlock()
		if stream != j.EventStream {
			t.Errorf("poison recorded on %s", stream)
		}
		poison = append(poison, cause)
		return nil
	}
	msgs := make([]outbox.Message, events)
	for i := range msgs {
		msgs[i] = outbox.Message{EventID: uuid.Must(uuid.NewV7()), Tag: "ORDER_CREATED", Payload: []byte(`{}`)}
	}
	if errs := j.EventPublisher(func(outbox.Message) {})(ctx, msgs); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	// An event without Nats-Msg-Id: nothing names it, so it is poison.
	if _, err := j.js.PublishMsg(ctx, &nats.Msg{Subject: j.eventPrefix + "ORDER_CREATED", Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	failOnce := msgs[5].EventID
	var sizes []int
	handled := map[uuid.UUID]int{}
	failed := 0
	wait, err := j.ConsumeEventBatches(ctx, "order-created", 1, most, func(_ context.Context, ms []Message) []error {
		mu.Lock()
		defer mu.Unlock()
		if len(sizes) == 0 {
			time.Sleep(100 * time.Millisecond) // the pull fills meanwhile: the next batches are full
		}
		sizes = append(sizes, len(ms))
		errs := make([]error, len(ms))
		for i, m := range ms {
			if m.ID == failOnce && failed == 0 {
				failed++
				errs[i] = errors.New("fails once")
				continue
			}
			handled[m.ID]++
		}
		return errs
	})
	if err != nil {
		t.Fatal(err)
	}
	idle := eventConsumerIdle(ctx, t, j, "order-created")
	cancel()
	wait()
	if !idle {
		t.Fatal("the event consumer did not go idle within its deadline")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range msgs {
		if handled[m.EventID] != 1 {
			t.Errorf("event %s handled successfully %d times, want 1", m.EventID, handled[m.EventID])
		}
	}
	if failed != 1 {
		t.Errorf("the failing event failed %d times, want 1", failed)
	}
	if len(poison) != 1 {
		t.Errorf("poison recorded %d times (%v), want once for the event without an id", len(poison), poison)
	}
	t.Logf("batch sizes: %v", sizes)
	if slices.Max(sizes) > most || slices.Max(sizes) < 2 {
		t.Errorf("batch sizes %v: want at most %d, and some batch of more than one", sizes, most)
	}
}

// eventConsumerIdle polls durable until it has nothing pending or unacked,
// or ctx ends (false).
func eventConsumerIdle(ctx context.Context, t *testing.T, j *JetStream, durable string) bool {
	t.Helper()
	for ctx.Err() == nil {
		st, err := j.State(ctx)
		if err == nil {
			for _, c := range st.Consumers {
				if c.Durable == durable && c.Pending == 0 && c.AckPending == 0 {
					return true
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// TestConsumeEventBatchesRefusesEmptyBatches: a bound under one is an
// error, not a worker that never takes anything.
func TestConsumeEventBatchesRefusesEmptyBatches(t *testing.T) {
	t.Parallel()
	j := jsTest(t, JetStreamConfig{})
	if _, err := j.ConsumeEventBatches(context.Background(), "order-created", 1, 0, nil); err == nil {
		t.Fatal("a batch of 0 messages accepted")
	}
}
