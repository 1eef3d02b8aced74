package broker

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

	"github.com/seckillkit/seckill/examples/internal/stackharness"
	"github.com/seckillkit/seckill/pgtx"
)

// Tests of the JetStream broker on its own: the consumer's ack rules, the
// poison record, the progress of slow work and the duplicate window.

// jsTest is a JetStream stack of its own with a handler under test.
func jsTest(t *testing.T, cfg JetStreamConfig) *JetStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := stackharness.StartNATS(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	j, err := NewJetStream(ctx, srv.URL, "t"+strings.ReplaceAll(uuid.NewString()[:8], "-", ""), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Close)
	return j
}

// consumeUntil runs one worker on the order consumer until done is closed.
func consumeUntil(t *testing.T, j *JetStream, handle func(context.Context, Message) error, done <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wait := j.Consume(ctx, 1, handle)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Error("timed out")
	}
	cancel()
	wait()
}

// TestJetStreamUnknownCommitIsNotAcked: a delivery whose transaction ended
// with an unknown commit is neither acked nor nak'ed: the server redelivers
// it only when AckWait has passed (a nak would bring it back at once).
func TestJetStreamUnknownCommitIsNotAcked(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	j := jsTest(t, JetStreamConfig{AckWait: ackWait, FetchWait: 200 * time.Millisecond})
	id := uuid.New()
	if err := j.Publish(context.Background(), Message{ID: id, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	var times []time.Time
	done := make(chan struct{})
	consumeUntil(t, j, func(_ context.Context, m Message) error {
		times = append(times, time.Now())
		if len(times) == 1 {
			return fmt.Errorf("commit: %w", pgtx.ErrCommitOutcomeUnknown)
		}
		close(done)
		return nil
	}, done)
	if len(times) != 2 {
		t.Fatalf("%d deliveries, want 2", len(times))
	}
	if gap := times[1].Sub(times[0]); gap < ackWait-200*time.Millisecond {
		t.Fatalf("redelivered %v after an unknown commit: before AckWait (%v), so it was nak'ed", gap, ackWait)
	}
	if err := j.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestJetStreamMaxDeliverRecordsPoison: a message that fails every
// delivery is recorded as poison once, at MaxDeliver, and terminated: the
// consumer goes idle, nothing is dropped silently.
func TestJetStreamMaxDeliverRecordsPoison(t *testing.T) {
	t.Parallel()
	j := jsTest(t, JetStreamConfig{MaxDeliver: 3, RetryDelay: time.Millisecond, FetchWait: 200 * time.Millisecond})
	var recorded []uint64
	var mu sync.Mutex
	j.OnPoison = func(_ context.Context, stream string, m Message, deliveries uint64, cause error) error {
		mu.Lock()
		defer mu.Unlock()
		if stream != j.OrderStream || !strings.Contains(cause.Error(), "always fails") {
			t.Errorf("poison recorded for %s: %v", stream, cause)
		}
		recorded = append(recorded, deliveries)
		return nil
	}
	if err := j.Publish(context.Background(), Message{ID: uuid.New(), Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	var deliveries atomic.Int64
	idle := make(chan struct{})
	go func() { _ = j.WaitIdle(context.Background()); close(idle) }()
	consumeUntil(t, j, func(context.Context, Message) error {
		deliveries.Add(1)
		return errors.New("always fails")
	}, idle)
	mu.Lock()
	defer mu.Unlock()
	if deliveries.Load() != 3 || len(recorded) != 1 || recorded[0] != 3 {
		t.Fatalf("%d deliveries, poison recorded %v: want 3 deliveries, recorded once at the 3rd", deliveries.Load(), recorded)
	}
}

// TestJetStreamInProgressKeepsSlowWork: a transaction slower than AckWait
// reports progress, so the message is not handed to another consumer
// meanwhile.
func TestJetStreamInProgressKeepsSlowWork(t *testing.T) {
	t.Parallel()
	j := jsTest(t, JetStreamConfig{AckWait: time.Second, FetchWait: 200 * time.Millisecond})
	if err := j.Publish(context.Background(), Message{ID: uuid.New(), Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	var deliveries atomic.Int64
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	wait := j.Consume(ctx, 2, func(context.Context, Message) error { // two workers: a redelivery would reach the other
		if deliveries.Add(1) == 1 {
			time.Sleep(3 * time.Second) // three AckWaits
			close(done)
		}
		return nil
	})
	<-done
	if err := j.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	wait()
	if n := deliveries.Load(); n != 1 {
		t.Fatalf("%d deliveries of a message whose handler ran 3×AckWait: InProgress did not hold it", n)
	}
}

// TestJetStreamDuplicateWindow: publishing twice with one Nats-Msg-Id
// stores one message.
func TestJetStreamDuplicateWindow(t *testing.T) {
	t.Parallel()
	j := jsTest(t, JetStreamConfig{})
	m := Message{ID: uuid.New(), Body: []byte(`{}`)}
	for range 3 {
		if err := j.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	st, err := j.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f := j.Figures(); st.OrderMessages != 1 || f.Published != 1 || f.Deduplicated != 2 {
		t.Fatalf("stream holds %d, figures %+v: want 1 stored, 2 deduplicated", st.OrderMessages, f)
	}
}
