package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/outbox"
)

// events are n ORDER_CREATED events with new ids.
func events(n int) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{EventID: uuid.Must(uuid.NewV7()), Tag: "ORDER_CREATED",
			Payload: fmt.Appendf(nil, `{"order_id":%d}`, i+1), Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	}
	return msgs
}

// TestEventPublisherWays: in both ways (a batch sent at once, its PubAcks
// collected after; each event's PubAck awaited before the next), every
// event of a batch is stored once, in order, with its headers and tag, and
// reported published; a batch sent again is stored no second time, each
// event counted as deduplicated; a PubAck the fault test drops fails that
// event alone.
func TestEventPublisherWays(t *testing.T) {
	t.Parallel()
	for _, each := range []bool{false, true} {
		t.Run(fmt.Sprintf("each=%v", each), func(t *testing.T) {
			t.Parallel()
			j := jsTest(t, JetStreamConfig{PublishEachEvent: each})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var mu sync.Mutex
			var published []uuid.UUID
			pub := j.EventPublisher(func(m outbox.Message) { mu.Lock(); published = append(published, m.EventID); mu.Unlock() })
			msgs := events(50)
			if errs := pub(ctx, msgs); errs != nil {
				t.Fatal(errors.Join(errs...))
			}
			if errs := pub(ctx, msgs); errs != nil { // the relay's retry of a batch it did not mark SENT
				t.Fatal(errors.Join(errs...))
			}
			dropped := msgs[7].EventID
			j.InjectFaultsForTest(Faults{DropPubAck: func(m outbox.Message) bool { return m.EventID == dropped }})
			errs := pub(ctx, msgs[:10])
			for i, err := range errs {
				if (i == 7) != (err != nil) {
					t.Errorf("event %d with a dropped PubAck on event 7: %v", i, err)
				}
			}
			st, err := j.State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n := st.EventsBySubject["ORDER_CREATED"]; n != 50 {
				t.Errorf("%d events stored, want 50", n)
			}
			if n := j.EventDedup.Load(); n != 59 {
				t.Errorf("%d publishes deduplicated, want 59 (the batch again, and 9 of the last 10)", n)
			}
			if len(published) != 109 {
				t.Errorf("%d events reported published, want 109", len(published))
			}
			for i, m := range msgs {
				if published[i] != m.EventID {
					t.Fatalf("event %d reported published out of order", i)
				}
			}
			stream, err := j.js.Stream(ctx, j.EventStream)
			if err != nil {
				t.Fatal(err)
			}
			got, err := stream.GetMsg(ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			if got.Header.Get("Nats-Msg-Id") != msgs[2].EventID.String() || got.Header.Get("Seckill-Event-Tag") != "ORDER_CREATED" ||
				got.Header.Get("traceparent") == "" || string(got.Data) != `{"order_id":3}` {
				t.Errorf("the third stored event: headers %v, data %s", got.Header, got.Data)
			}
		})
	}
}

// BenchmarkEventPublish puts the relays' two ways of publishing a batch of
// 200 events side by side in one run, each on a throwaway nats-server of
// its own: sent at once and the PubAcks collected after (the default), and
// one PubAck awaited per event (PublishEachEvent). It reports the CPU per
// event of nats-server (from /proc) and of this process, and events per
// second.
//
//	cd examples && go test -run '^$' -bench BenchmarkEventPublish -benchtime 40000x ./seckill/broker/
func BenchmarkEventPublish(b *testing.B) {
	for _, each := range []bool{false, true} {
		b.Run(map[bool]string{false: "async", true: "each"}[each], func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			j, cpu := benchJetStream(ctx, b, JetStreamConfig{PublishEachEvent: each})
			pub := j.EventPublisher(func(outbox.Message) {})
			batches := make([][]outbox.Message, 0, b.N/200+1)
			for n := b.N; n > 0; n -= 200 {
				batches = append(batches, events(min(n, 200)))
			}
			server0, client0 := cpu()
			b.ResetTimer()
			start := time.Now()
			for _, batch := range batches {
				if errs := pub(ctx, batch); errs != nil {
					b.Fatal(errors.Join(errs...))
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			server, client1 := cpu()
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			b.ReportMetric(per(server-server0), "server-µs/event")
			b.ReportMetric(per(client1-client0), "client-µs/event")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
		})
	}
}
