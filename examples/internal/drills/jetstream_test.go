package drills

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seckillkit/seckill/examples/internal/stackharness"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
)

// jsPublisher is the relays' publisher on a JetStream cluster: each event
// goes to the events stream with its event id as Nats-Msg-Id (so a
// re-publish inside the duplicate window is absorbed), and only the
// events JetStream acknowledged are passed on to next (the recorder).
type jsPublisher struct {
	js   jetstream.JetStream
	next func(context.Context, []outbox.Message) []error
	dups atomic.Int64
}

func (p *jsPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	var ok []outbox.Message
	for i, m := range msgs {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ack, err := p.js.PublishMsg(pctx, &nats.Msg{Subject: "events." + m.Tag, Data: m.Payload}, jetstream.WithMsgID(m.EventID.String()))
		cancel()
		if err != nil {
			errs[i] = err
			continue
		}
		if ack.Duplicate {
			p.dups.Add(1)
		}
		ok = append(ok, m)
	}
	if len(ok) > 0 {
		p.next(ctx, ok)
	}
	return errs
}

// createStreamRetry creates (or updates) a stream, retrying while the
// JetStream cluster has no meta leader yet or is electing one.
func createStreamRetry(t *testing.T, ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := js.CreateOrUpdateStream(cctx, cfg)
		ccancel()
		if err == nil {
			return s
		}
		select {
		case <-ctx.Done():
			t.Fatalf("create stream %s: %v", cfg.Name, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// streamInfo reads a stream's info, retrying through a leader election.
func streamInfo(t *testing.T, ctx context.Context, s jetstream.Stream) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		ictx, icancel := context.WithTimeout(ctx, 3*time.Second)
		info, err := s.Info(ictx)
		icancel()
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
			return info
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream info: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestJetStreamClusterNodeKilledMidSale runs the sale through a three-node
// JetStream cluster: the order messages go through a work-queue stream and
// the outbox's events into an events stream, both with Replicas: 3, every
// publish with its id as Nats-Msg-Id. Mid-sale the node that leads the
// order stream is killed (SIGKILL). Publishes, the consumers and the
// relays go on through the other two (a new stream leader is elected;
// clients reconnect by themselves); publishes whose acknowledgement was
// lost are sent again and absorbed by the duplicate window, deliveries
// whose ack was lost come again and are met by the inbox. Then: every
// published order message is processed exactly once, the order stream is
// empty (every message acknowledged), the events stream holds exactly one
// message per outbox event, the killed node comes back and catches up,
// and the audit and the reconciliation pass.
func TestJetStreamClusterNodeKilledMidSale(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 4*time.Minute)
	cluster, err := stackharness.StartThrowawayNATSCluster(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
	nc, err := nats.Connect(cluster.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	orders := createStreamRetry(t, ctx, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.create"},
		Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy, Replicas: 3, Duplicates: 2 * time.Minute})
	events := createStreamRetry(t, ctx, js, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.*"},
		Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy, Replicas: 3, Duplicates: 2 * time.Minute})
	var cons jetstream.Consumer
	for cctx, cancel := context.WithTimeout(ctx, time.Minute); ; {
		cons, err = js.CreateOrUpdateConsumer(cctx, "ORDERS", jetstream.ConsumerConfig{Durable: "order-create",
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: 3 * time.Second, MaxAckPending: 1000, Replicas: 3})
		if err == nil {
			cancel()
			break
		}
		select {
		case <-cctx.Done():
			cancel()
			t.Fatalf("create the consumer: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}

	r := newRig(t, rigConfig{Schema: "jetstream_cluster", Stock: 400, Buckets: 4, Timeout: 4 * time.Minute})
	msgs := r.messages(plan{Users: 400, DoubleClick: 10, Expired: 5, Pay: 2})
	byID := make(map[uuid.UUID]*msg, len(msgs))
	for _, m := range msgs {
		byID[m.ID] = m
	}
	pub := &jsPublisher{js: js, next: r.pub.Publish}
	stopRelays := r.startJSRelays(pub.Publish, 2)
	payments := r.startPayers(2, len(msgs))
	canceller := r.startCanceller(1, 20, 20*time.Millisecond)

	// The front door's side: publish every message until JetStream
	// acknowledges it, a few milliseconds apart.
	var published, pubRetries, pubDups atomic.Int64
	saleCtx, endSale := context.WithCancel(ctx)
	defer endSale()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, m := range msgs {
			for {
				if saleCtx.Err() != nil {
					return
				}
				pctx, cancel := context.WithTimeout(saleCtx, 2*time.Second)
				ack, err := js.PublishMsg(pctx, &nats.Msg{Subject: "orders.create", Data: m.Body}, jetstream.WithMsgID(m.ID.String()))
				cancel()
				if err == nil {
					if ack.Duplicate {
						pubDups.Add(1)
					}
					published.Add(1)
					break
				}
				pubRetries.Add(1)
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
	// The consumers: pull, place the order, acknowledge once committed.
	var delivered, dupDeliveries, ackErrs atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for saleCtx.Err() == nil {
				batch, err := cons.Fetch(10, jetstream.FetchMaxWait(500*time.Millisecond))
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				for jm := range batch.Messages() {
					delivered.Add(1)
					id, err := uuid.Parse(jm.Headers().Get(jetstream.MsgIDHeader))
					m := byID[id]
					if err != nil || m == nil {
						t.Errorf("a message without a known %s: %q", jetstream.MsgIDHeader, jm.Headers().Get(jetstream.MsgIDHeader))
						_ = jm.Term()
						continue
					}
					out, err := r.svc.PlaceOrder(saleCtx, m.ID, m.Body)
					if err != nil {
						r.nack(m, err)
						_ = jm.NakWithDelay(50 * time.Millisecond)
						continue
					}
					if out.Duplicate {
						dupDeliveries.Add(1)
					}
					r.ack(m, out)
					actx, cancel := context.WithTimeout(saleCtx, 2*time.Second)
					if err := jm.DoubleAck(actx); err != nil {
						ackErrs.Add(1) // it comes again after AckWait, and meets the inbox
					}
					cancel()
				}
			}
		}()
	}
	waitProcessed := func(n int) {
		t.Helper()
		for len(r.ackedIDs()) < n {
			select {
			case <-r.events:
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				t.Fatalf("%d of %d messages processed: %v", len(r.ackedIDs()), n, ctx.Err())
			}
		}
	}
	waitProcessed(len(msgs) * 2 / 5)
	info := streamInfo(t, ctx, orders)
	victim := cluster.Node(info.Cluster.Leader)
	if victim < 0 {
		t.Fatalf("the order stream's leader %q is no node of the cluster", info.Cluster.Leader)
	}
	processedBefore := len(r.ackedIDs())
	killed := time.Now()
	cluster.Kill(victim)
	after := streamInfo(t, ctx, orders)
	t.Logf("killed %s (the order stream's leader) after %d of %d messages were processed; %s leads the stream %v later",
		info.Cluster.Leader, processedBefore, len(msgs), after.Cluster.Leader, time.Since(killed).Round(time.Millisecond))

	waitProcessed(len(msgs))
	if err := cluster.Restart(ctx, victim); err != nil {
		t.Fatal(err)
	}
	// A delivery whose ack was lost stays in the work queue until it is
	// delivered again (after AckWait) and met by the inbox: the consumers
	// run until the order stream is empty.
	for deadline := time.Now().Add(time.Minute); ; {
		info := streamInfo(t, ctx, orders)
		if info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the order stream still holds %d messages: %+v", info.State.Msgs, info.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
	endSale()
	wg.Wait()
	t.Logf("published %d (retries %d, duplicates absorbed by the stream %d); delivered %d (duplicate deliveries met by the inbox %d, lost acks %d)",
		published.Load(), pubRetries.Load(), pubDups.Load(), delivered.Load(), dupDeliveries.Load(), ackErrs.Load())
	if published.Load() != int64(len(msgs)) {
		t.Errorf("%d of %d messages published", published.Load(), len(msgs))
	}

	r.drain()
	payments.close()
	canceller.finish(r)
	r.drain()
	stopRelays()
	r.logErrors()
	t.Logf("relay publishes absorbed as duplicates by the events stream: %d", pub.dups.Load())

	// The killed node is back and current on both streams; the order
	// stream is empty; the events stream has one message per event.
	for name, s := range map[string]jetstream.Stream{"ORDERS": orders, "EVENTS": events} {
		deadline := time.Now().Add(time.Minute)
		for {
			info := streamInfo(t, ctx, s)
			current := info.Cluster.Leader != ""
			for _, p := range info.Cluster.Replicas {
				current = current && p.Current && !p.Offline
			}
			if current && len(info.Cluster.Replicas) == 2 && (name != "ORDERS" || info.State.Msgs == 0) {
				t.Logf("stream %s: leader %s, %d replicas current, %d messages", name, info.Cluster.Leader, len(info.Cluster.Replicas), info.State.Msgs)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("stream %s not caught up (or not empty): leader %q, replicas %+v, state %+v", name, info.Cluster.Leader, info.Cluster.Replicas, info.State)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	outboxEvents := r.count(`SELECT count(*) FROM %s.event_outbox`)
	if info := streamInfo(t, ctx, events); int64(info.State.Msgs) != outboxEvents {
		t.Errorf("the events stream holds %d messages, the outbox %d events: want one each", info.State.Msgs, outboxEvents)
	}
	r.assertAcknowledgedSurvive(payments)
	r.assertExactlyOnce(msgs)
	r.assertAllPublished()
	r.assertAudit()
	r.assertReconciled()
}

// startJSRelays runs n relays publishing through pub (and so, for what
// JetStream acknowledged, to the rig's recorder).
func (r *rig) startJSRelays(pub func(context.Context, []outbox.Message) []error, n int) (stop func()) {
	r.t.Helper()
	return r.startRelays(r.svc.Pool, n, outbox.RelayConfig{Publish: pub, Lease: 5 * time.Second, RecoverInterval: 500 * time.Millisecond})
}
