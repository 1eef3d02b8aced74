package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// JetStreamConfig tunes the JetStream side of the real stack.
type JetStreamConfig struct {
	Depth      int           // bound on unacknowledged order messages; a full stream answers busy
	DupRate    float64       // share of order messages published twice and acked only on redelivery, on purpose
	AckWait    time.Duration // redelivery when a consumer neither acks nor reports progress
	MaxDeliver int           // deliveries before a message is recorded as poison and terminated
	Duplicates time.Duration // the streams' duplicate window (Nats-Msg-Id)
	MaxAge     time.Duration // the streams' MaxAge; with Duplicates and RepairTime, the inbox's minimum retention
	RepairTime time.Duration // compensation and manual repair time added to the inbox's minimum retention
	PubAckWait time.Duration // how long a publish waits for its PubAck before trying again
	PublishFor time.Duration // how long a click keeps republishing an unanswered order message
	RetryDelay time.Duration // NakWithDelay after a failed transaction
	FetchWait  time.Duration // with FetchPerPull, a pull request's expiry
	FetchBatch int           // messages per pull request: each worker holds at most this many undelivered
	// FetchPerPull makes each worker ask with Consumer.Fetch, which opens a
	// subscription per pull request and closes it after the batch, instead
	// of one continuous pull per worker (Consumer.Messages: one
	// subscription for the worker's life, the next pull request sent when
	// half its buffer is used). The longer way, kept to measure what the
	// continuous pull saves (bench -stack -stack-off).
	FetchPerPull bool
	// PublishEachEvent makes the relays' publisher wait for each event's
	// PubAck before it sends the next, instead of sending a batch's events
	// at once (PublishMsgAsync) and then collecting their PubAcks. The
	// longer way, kept to measure what the shorter one saves.
	PublishEachEvent bool
	ProgressDiv      int // InProgress every AckWait/ProgressDiv while a handler runs
	// Replicas is each stream's number of replicas (its consumers have as
	// many): 1, the default, on one server; 3 on a three-node JetStream
	// cluster, where a publish is acknowledged once two of them stored it.
	Replicas int
}

func (c JetStreamConfig) withDefaults() JetStreamConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.AckWait, 10*time.Second)
	def(&c.Duplicates, 2*time.Minute)
	def(&c.MaxAge, defaultStreamMaxAge)
	def(&c.RepairTime, defaultRepairTime)
	def(&c.PubAckWait, 2*time.Second)
	def(&c.PublishFor, time.Minute)
	def(&c.RetryDelay, 100*time.Millisecond)
	def(&c.FetchWait, 500*time.Millisecond)
	if c.Depth == 0 {
		c.Depth = 2000
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = 10
	}
	if c.FetchBatch == 0 {
		c.FetchBatch = 4
	}
	if c.ProgressDiv == 0 {
		c.ProgressDiv = 3
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	return c
}

// JetStream is the broker of the real stack: the order messages on a
// work-queue stream (bounded, duplicate window, durable pull consumer, ack
// after COMMIT) and the outbox events on a second stream that keeps them
// (duplicate window; one durable pull consumer per event the service
// consumes).
type JetStream struct {
	cfg JetStreamConfig
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger

	OrderStream, EventStream  string
	orderSubject, eventPrefix string
	orders                    jetstream.Consumer
	// ordersStat is a second handle on the order consumer, for Info alone:
	// jetstream.Consumer.Info caches its answer in the handle unguarded,
	// and Consumer.Messages reads that cache, so the workers' handle
	// (orders) is never asked. ordersInfo lets one Info call run at a time.
	ordersStat   jetstream.Consumer
	ordersInfo   sync.Mutex
	OrderBaseSeq uint64 // the order stream's last sequence when this service set it up

	// OnPoison records a message that will never be processed (MaxDeliver
	// reached); it must succeed before the message is terminated.
	OnPoison func(ctx context.Context, stream string, m Message, deliveries uint64, cause error) error
	// faults are the fault tests' hooks (see faults.go); nil in production.
	faults atomic.Pointer[Faults]

	ids                                                       sync.Map // order message ids this process published (stored)
	published, deliveries, redeliveries, deduplicated, poison atomic.Int64
	EventDedup                                                atomic.Int64
	Resends                                                   atomic.Int64 // publishes sent again for want of a PubAck
}

// EventConsumers are the event consumers' durable names, filter tags and
// inbox groups: one durable pull consumer per event the service consumes.
var EventConsumers = []struct{ Durable, Tag, Group string }{
	{"order-created", "ORDER_CREATED", "order-created-consumer"},
	{"frontdoor-release", "FRONTDOOR_RELEASE", "frontdoor-release-consumer"},
	{"refund-requested", "REFUND_REQUESTED", "refund-consumer"},
}

// streamToken makes name usable in stream names and subjects.
func streamToken(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, name)
}

// NewJetStream connects to url and creates (or updates) the streams and
// consumers of the sale named name.
func NewJetStream(ctx context.Context, url, name string, cfg JetStreamConfig, log *slog.Logger) (*JetStream, error) {
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	nc, err := nats.Connect(url, nats.Name("seckill-"+name), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(false))
	if err != nil {
		return nil, fmt.Errorf("nats: connect %s: %w", url, err)
	}
	// An async publish (the relays' events) whose PubAck has not come
	// within PubAckWait fails with ErrAsyncPublishTimeout, as a sync one
	// would: the relay sends it again, with the same id.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.withDefaults().PubAckWait))
	if err != nil {
		nc.Close()
		return nil, err
	}
	tok := streamToken(name)
	j := &JetStream{cfg: cfg, nc: nc, js: js, log: log,
		OrderStream: "SECKILL_ORDERS_" + tok, EventStream: "SECKILL_EVENTS_" + tok,
		orderSubject: "seckill." + tok + ".orders", eventPrefix: "seckill." + tok + ".events."}
	if err := j.setup(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return j, nil
}

func (j *JetStream) setup(ctx context.Context) error {
	_, err := j.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: j.OrderStream, Subjects: []string{j.orderSubject}, Storage: jetstream.FileStorage,
		Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardNew, MaxMsgs: int64(j.cfg.Depth),
		Duplicates: j.cfg.Duplicates, MaxAge: j.cfg.MaxAge, Replicas: j.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("jetstream: order stream: %w", err)
	}
	if os, err := j.js.Stream(ctx, j.OrderStream); err == nil {
		if info, err := os.Info(ctx); err == nil {
			j.OrderBaseSeq = info.State.LastSeq
		}
	}
	j.orders, err = j.js.CreateOrUpdateConsumer(ctx, j.OrderStream, jetstream.ConsumerConfig{
		Durable: "order-create", AckPolicy: jetstream.AckExplicitPolicy, AckWait: j.cfg.AckWait,
		MaxDeliver: j.cfg.MaxDeliver, MaxAckPending: 4 * j.cfg.Depth, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("jetstream: order consumer: %w", err)
	}
	if j.ordersStat, err = j.js.Consumer(ctx, j.OrderStream, "order-create"); err != nil {
		return fmt.Errorf("jetstream: order consumer: %w", err)
	}
	_, err = j.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: j.EventStream, Subjects: []string{j.eventPrefix + "*"}, Storage: jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy, Duplicates: j.cfg.Duplicates, MaxAge: j.cfg.MaxAge, Replicas: j.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("jetstream: event stream: %w", err)
	}
	for _, ec := range EventConsumers {
		_, err = j.js.CreateOrUpdateConsumer(ctx, j.EventStream, jetstream.ConsumerConfig{
			Durable: ec.Durable, FilterSubject: j.eventPrefix + ec.Tag, AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: j.cfg.AckWait, MaxDeliver: j.cfg.MaxDeliver, MaxAckPending: 10000, DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return fmt.Errorf("jetstream: %s consumer: %w", ec.Durable, err)
		}
	}
	return nil
}

// Name says what it is, for the report.
func (j *JetStream) Name() string {
	return fmt.Sprintf("nats jetstream (server %s; streams %s, %s at %d replica(s); dedup window %v)", j.nc.ConnectedServerVersion(),
		j.OrderStream, j.EventStream, j.cfg.Replicas, j.cfg.Duplicates)
}

// isStreamFull matches the answer of a work-queue stream at MaxMsgs with
// DiscardNew: the message was not stored.
func isStreamFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && strings.Contains(strings.ToLower(apiErr.Description), "maximum messages")
}

// publish sends data with Nats-Msg-Id = id and waits for the PubAck. A
// publish that got no answer (timeout, no responders while the server
// restarts, a dropped connection) is sent again with the same id until
// give-up: the stream's duplicate window makes the retry safe, so the
// answer is definite (stored, stored before, or refused) or an error after
// giveUp. retried reports whether it had to send again: a Duplicate
// PubAck after a retry may be the answer to this call's own first send.
func (j *JetStream) publish(ctx context.Context, subject string, id uuid.UUID, hdr nats.Header, data []byte, giveUp time.Duration) (ack *jetstream.PubAck, retried bool, err error) {
	deadline := time.Now().Add(giveUp)
	msg := &nats.Msg{Subject: subject, Data: data, Header: hdr}
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, j.cfg.PubAckWait)
		ack, err := j.js.PublishMsg(pctx, msg, jetstream.WithMsgID(id.String()))
		cancel()
		if err == nil || isStreamFull(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return ack, attempt > 0, err
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			return nil, attempt > 0, err // a definite refusal
		}
		j.Resends.Add(1)
		select {
		case <-ctx.Done():
			return nil, true, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Publish sends an order message (Nats-Msg-Id = message id). A full stream
// answers [ErrBusy]. With DupRate, some messages are published a second
// time with the same id, as a producer that lost the first PubAck would:
// the stream's duplicate window absorbs them. Publishing an id the stream
// already holds stores nothing and counts as deduplicated.
func (j *JetStream) Publish(ctx context.Context, m Message) error {
	ack, retried, err := j.publish(ctx, j.orderSubject, m.ID, maps.Clone(m.Header), m.Body, j.cfg.PublishFor)
	switch {
	case isStreamFull(err):
		return ErrBusy
	case err != nil:
		return fmt.Errorf("jetstream: publish order message %s: %w", m.ID, err)
	}
	switch {
	case ack.Duplicate && retried && !j.seen(m.ID):
		// The first send was stored, its PubAck lost; the resend was
		// recognised. Stored once, by this call.
		j.deduplicated.Add(1)
		j.published.Add(1)
	case ack.Duplicate:
		j.deduplicated.Add(1)
		return nil
	default:
		j.published.Add(1)
	}
	j.ids.Store(m.ID, struct{}{})
	if j.cfg.DupRate > 0 && rand.Float64() < j.cfg.DupRate {
		if ack, _, err := j.publish(ctx, j.orderSubject, m.ID, maps.Clone(m.Header), m.Body, j.cfg.PublishFor); err == nil && ack.Duplicate {
			j.deduplicated.Add(1)
		}
	}
	return nil
}

// seen reports whether this process published id before.
func (j *JetStream) seen(id uuid.UUID) bool {
	_, ok := j.ids.Load(id)
	return ok
}

// Consume runs workers on the durable order consumer: ack only after
// handle returned nil (its transaction committed); no ack at all on
// pgtx.ErrCommitOutcomeUnknown (the redelivery after AckWait meets the
// inbox); NakWithDelay on other errors; poison recorded then terminated
// at MaxDeliver. With DupRate, some committed messages are not acked but
// redelivered at once, as after a consumer that died between COMMIT and
// ack: the inbox answers them.
func (j *JetStream) Consume(ctx context.Context, workers int, handle func(context.Context, Message) error) (wait func()) {
	return j.pull(ctx, j.orders, j.OrderStream, workers, j.cfg.DupRate, handle)
}

// pull runs workers on cons, each with a continuous pull of its own (or,
// with FetchPerPull, a Fetch per batch), handing each message to deliver.
func (j *JetStream) pull(ctx context.Context, cons jetstream.Consumer, stream string, workers int, dupRate float64, handle func(context.Context, Message) error) (wait func()) {
	return j.run(ctx, workers, func() error {
		if j.cfg.FetchPerPull {
			return j.fetchOnce(ctx, cons, stream, dupRate, handle)
		}
		return j.pullUntilError(ctx, cons, stream, dupRate, handle)
	})
}

// run runs workers goroutines, each calling pull until ctx ends, and
// waiting 100ms after an error (the server away) before the next call.
func (j *JetStream) run(ctx context.Context, workers int, pull func() error) (wait func()) {
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := pull(); err != nil {
					select { // the server is away: try again shortly
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
		}()
	}
	return wg.Wait
}

// fetchOnce asks for one batch (a subscription of its own) and delivers it.
func (j *JetStream) fetchOnce(ctx context.Context, cons jetstream.Consumer, stream string, dupRate float64, handle func(context.Context, Message) error) error {
	batch, err := cons.Fetch(j.cfg.FetchBatch, jetstream.FetchMaxWait(j.cfg.FetchWait))
	if err != nil {
		return err
	}
	for msg := range batch.Messages() {
		j.deliver(ctx, msg, stream, dupRate, handle)
	}
	return nil // a batch cut short (expired, the server away) is asked again
}

// pullUntilError delivers from one continuous pull (at most FetchBatch
// messages buffered) until ctx ends or the pull reports an error (the
// server away, missed heartbeats). Messages still buffered then are not
// acked: they are delivered again after AckWait, as a fetched batch's
// would be.
func (j *JetStream) pullUntilError(ctx context.Context, cons jetstream.Consumer, stream string, dupRate float64, handle func(context.Context, Message) error) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(j.cfg.FetchBatch))
	if err != nil {
		return err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop) // ends a Next waiting for messages
	defer stop()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped: ctx ended
			}
			return err
		}
		j.deliver(ctx, msg, stream, dupRate, handle)
	}
}

// jsDelivery is one JetStream message being handled: the message, its
// metadata and what the handler receives.
type jsDelivery struct {
	msg jetstream.Msg
	md  *jetstream.MsgMetadata
	m   Message
}

// open reads msg's metadata and id and counts an order delivery; false
// when msg has no metadata (logged; it is redelivered after AckWait). A
// message without a usable id has m.ID uuid.Nil: settle records it as
// poison.
func (j *JetStream) open(msg jetstream.Msg, stream string) (jsDelivery, bool) {
	md, err := msg.Metadata()
	if err != nil {
		j.log.Error("jetstream message without metadata", "error", err)
		return jsDelivery{}, false
	}
	if stream == j.OrderStream {
		j.deliveries.Add(1)
		if md.NumDelivered > 1 {
			j.redeliveries.Add(1)
		}
	}
	id, err := uuid.Parse(msg.Headers().Get(jetstream.MsgIDHeader))
	if err != nil {
		id = uuid.Nil // handled as poison: the message has no usable id
	}
	return jsDelivery{msg: msg, md: md, m: Message{ID: id, Body: msg.Data(), Header: msg.Headers()}}, true
}

// noID is the handler's error for a message without a usable id.
func noID() error { return fmt.Errorf("no %s header", jetstream.MsgIDHeader) }

// inProgress reports InProgress on ds every AckWait/ProgressDiv until stop
// is called, so that a slow transaction's messages are not redelivered to
// another consumer meanwhile.
func (j *JetStream) inProgress(ds []jsDelivery) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(j.cfg.AckWait / time.Duration(j.cfg.ProgressDiv))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, d := range ds {
					_ = d.msg.InProgress()
				}
			}
		}
	}()
	return func() { close(done) }
}

func (j *JetStream) deliver(ctx context.Context, msg jetstream.Msg, stream string, dupRate float64, handle func(context.Context, Message) error) {
	if ctx.Err() != nil {
		return // stopping: not acked, redelivered after AckWait
	}
	d, ok := j.open(msg, stream)
	if !ok {
		return
	}
	var err error
	if d.m.ID == uuid.Nil {
		err = noID()
	} else {
		stop := j.inProgress([]jsDelivery{d})
		err = handle(ctx, d.m)
		stop()
	}
	j.settle(ctx, d, stream, dupRate, err)
}

// deliverBatch hands the messages of msgs that have an id to handle in one
// call, then settles each by its own error, as deliver does.
func (j *JetStream) deliverBatch(ctx context.Context, msgs []jetstream.Msg, stream string, handle func(context.Context, []Message) []error) {
	if ctx.Err() != nil {
		return // stopping: not acked, redelivered after AckWait
	}
	ds := make([]jsDelivery, 0, len(msgs))
	for _, msg := range msgs {
		d, ok := j.open(msg, stream)
		switch {
		case !ok:
		case d.m.ID == uuid.Nil:
			j.settle(ctx, d, stream, 0, noID())
		default:
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return
	}
	ms := make([]Message, len(ds))
	for i, d := range ds {
		ms[i] = d.m
	}
	stop := j.inProgress(ds)
	errs := handle(ctx, ms)
	stop()
	if len(errs) != len(ds) { // a handler's bug: nothing is acked, all is redelivered
		j.log.Error("batch handler answered for a different number of messages", "messages", len(ds), "answers", len(errs))
		return
	}
	for i, d := range ds {
		j.settle(ctx, d, stream, 0, errs[i])
	}
}

// settle acks, naks or records as poison the delivery d, whose handler
// returned err.
func (j *JetStream) settle(ctx context.Context, d jsDelivery, stream string, dupRate float64, err error) {
	msg, md, m := d.msg, d.md, d.m
	switch {
	case err == nil:
		if stream == j.OrderStream && md.NumDelivered == 1 && j.crashAfterCommit(m) {
			return // the consumer "died" after COMMIT, before the ack: redelivered after AckWait
		}
		if dupRate > 0 && md.NumDelivered == 1 && rand.Float64() < dupRate {
			_ = msg.Nak() // committed, but "crashed" before the ack: redelivered, answered by the inbox
			return
		}
		_ = msg.Ack()
	case ctx.Err() != nil:
		// Stopping: no ack; redelivered after AckWait.
	case errors.Is(err, pgtx.ErrCommitOutcomeUnknown):
		// No ack, no nak: the redelivery after AckWait meets the inbox,
		// which knows whether the transaction committed.
	case m.ID == uuid.Nil || md.NumDelivered >= uint64(j.cfg.MaxDeliver):
		for {
			perr := j.OnPoison(ctx, stream, m, md.NumDelivered, err)
			if perr == nil {
				j.poison.Add(1)
				_ = msg.Term()
				return
			}
			j.log.Error("recording a poison message failed; trying again", "message_id", m.ID, "error", perr)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	default:
		// Exponential backoff, so that MaxDeliver spans an outage of a
		// few seconds (Redis restarting, PostgreSQL failing over).
		delay := j.cfg.RetryDelay << min(md.NumDelivered-1, 10)
		_ = msg.NakWithDelay(min(delay, 2*time.Second))
	}
}

// WaitIdle polls the order consumer until nothing is pending or unacked.
func (j *JetStream) WaitIdle(ctx context.Context) error {
	for {
		info, err := j.ordersInfoNow(ctx)
		if err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ordersInfoNow asks the server for the order consumer's state; it is safe
// for concurrent use (the /stats handler, the progress line and the
// operator view ask at once).
func (j *JetStream) ordersInfoNow(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	j.ordersInfo.Lock()
	defer j.ordersInfo.Unlock()
	return j.ordersStat.Info(ctx)
}

// Pending is the order messages not yet acknowledged (-1 when the server
// does not answer).
func (j *JetStream) Pending(ctx context.Context) int64 {
	info, err := j.ordersInfoNow(ctx)
	if err != nil {
		return -1
	}
	return int64(info.NumPending) + int64(info.NumAckPending)
}

// Figures are the broker's counters.
func (j *JetStream) Figures() Figures {
	return Figures{Published: j.published.Load(), Deliveries: j.deliveries.Load(),
		Redeliveries: j.redeliveries.Load(), Deduplicated: j.deduplicated.Load()}
}

// Close drains nothing (the consumers have stopped) and closes the
// connection.
func (j *JetStream) Close() { j.nc.Close() }

// EventPublisher is the outbox relay's Publish: each event goes to the
// event stream with Nats-Msg-Id = event id, and counts as published only
// once its PubAck came back. The events of a batch go out at once
// (PublishMsgAsync), and their PubAcks are then collected, each waited for
// at most PubAckWait; with PublishEachEvent, one after the other, each
// PubAck awaited before the next event. A relay that retries an event
// (lease lost, PubAck timed out) publishes it again with the same id: the
// duplicate window absorbs it, and past the window the consumers' inbox
// does.
func (j *JetStream) EventPublisher(published func(outbox.Message)) func(context.Context, []outbox.Message) []error {
	return func(ctx context.Context, msgs []outbox.Message) []error {
		var acks []*jetstream.PubAck
		var errs []error
		if j.cfg.PublishEachEvent {
			acks, errs = j.publishEach(ctx, msgs)
		} else {
			acks, errs = j.publishAsync(ctx, msgs)
		}
		failed := false
		for i, m := range msgs {
			err := errs[i]
			if err == nil && j.dropPubAck(m) {
				err = fmt.Errorf("jetstream: publish event %s: %w (PubAck dropped by the fault test)", m.EventID, context.DeadlineExceeded)
			}
			if err != nil {
				errs[i], failed = err, true
				continue
			}
			if acks[i].Duplicate {
				j.EventDedup.Add(1)
			}
			published(m)
		}
		if !failed {
			return nil
		}
		return errs
	}
}

// eventMsg is the NATS message of event m: its headers (the trace among
// them) travel as NATS headers, with its tag.
func (j *JetStream) eventMsg(m outbox.Message) *nats.Msg {
	hdr := nats.Header{}
	for k, v := range m.Headers {
		hdr[k] = []string{v}
	}
	hdr.Set("Seckill-Event-Tag", m.Tag)
	return &nats.Msg{Subject: j.eventPrefix + m.Tag, Data: m.Payload, Header: hdr}
}

// publishEach publishes msgs one after the other, each PubAck awaited.
func (j *JetStream) publishEach(ctx context.Context, msgs []outbox.Message) ([]*jetstream.PubAck, []error) {
	acks, errs := make([]*jetstream.PubAck, len(msgs)), make([]error, len(msgs))
	for i, m := range msgs {
		nm := j.eventMsg(m)
		acks[i], _, errs[i] = j.publish(ctx, nm.Subject, m.EventID, nm.Header, nm.Data, j.cfg.PubAckWait)
	}
	return acks, errs
}

// publishAsync sends every event of msgs, then collects their PubAcks:
// one that has not come within PubAckWait of its send is an error
// (jetstream.ErrAsyncPublishTimeout), and so is every one still awaited
// when ctx ends.
func (j *JetStream) publishAsync(ctx context.Context, msgs []outbox.Message) ([]*jetstream.PubAck, []error) {
	acks, errs := make([]*jetstream.PubAck, len(msgs)), make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		futures[i], errs[i] = j.js.PublishMsgAsync(j.eventMsg(m), jetstream.WithMsgID(m.EventID.String()))
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case acks[i] = <-f.Ok():
		case errs[i] = <-f.Err():
		case <-ctx.Done():
			errs[i] = ctx.Err()
		}
	}
	return acks, errs
}

// ConsumeEvents runs workers on the event consumer of durable.
func (j *JetStream) ConsumeEvents(ctx context.Context, durable string, workers int, handle func(context.Context, Message) error) (wait func(), err error) {
	cons, err := j.js.Consumer(ctx, j.EventStream, durable)
	if err != nil {
		return nil, err
	}
	return j.pull(ctx, cons, j.EventStream, workers, 0, handle), nil
}

// ConsumeEventBatches runs workers on the event consumer of durable, each
// with a continuous pull that holds at most max(FetchBatch, most)
// messages. A worker hands handle every message it holds at that moment,
// at most most and at least one: under load one call takes many, alone
// it takes one, and no message waits for others to arrive. handle
// returns one error per message, and each message is then acked, nakked
// or recorded as poison by its own error, as with [JetStream.Consume].
func (j *JetStream) ConsumeEventBatches(ctx context.Context, durable string, workers, most int, handle func(context.Context, []Message) []error) (wait func(), err error) {
	if most < 1 {
		return nil, fmt.Errorf("jetstream: %s: a batch of %d messages", durable, most)
	}
	cons, err := j.js.Consumer(ctx, j.EventStream, durable)
	if err != nil {
		return nil, err
	}
	return j.run(ctx, workers, func() error {
		return j.pullBatchesUntilError(ctx, cons, j.EventStream, most, handle)
	}), nil
}

// pullBatchesUntilError is pullUntilError for batches: a goroutine moves
// the pull's messages into a channel of most, and the worker takes the
// first it finds there and every other one already in it.
func (j *JetStream) pullBatchesUntilError(ctx context.Context, cons jetstream.Consumer, stream string, most int, handle func(context.Context, []Message) []error) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(max(j.cfg.FetchBatch, most)))
	if err != nil {
		return err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	held := make(chan jetstream.Msg, most)
	quit := make(chan struct{})
	defer close(quit)
	var pullErr error // written before held is closed
	go func() {
		defer close(held)
		for {
			msg, err := it.Next()
			if err != nil {
				pullErr = err
				return
			}
			select {
			case held <- msg:
			case <-quit:
				return
			}
		}
	}()
	for {
		msg, ok := <-held
		if !ok {
			if ctx.Err() != nil {
				return nil // stopped: ctx ended
			}
			return pullErr
		}
		batch := []jetstream.Msg{msg}
	more:
		for len(batch) < most {
			select {
			case msg, ok := <-held:
				if !ok {
					break more
				}
				batch = append(batch, msg)
			default:
				break more
			}
		}
		j.deliverBatch(ctx, batch, stream, handle)
	}
}

// StreamState is what the reconciliation reads of JetStream.
type StreamState struct {
	OrderMessages, OrderLastSeq uint64            // in the work queue now; ever stored
	EventsBySubject             map[string]uint64 // tag → events stored
	Consumers                   []ConsumerState
}

// ConsumerState is what the reconciliation reads of one durable consumer.
type ConsumerState struct {
	Stream, Durable                        string
	Pending, AckPending, Redelivered, Acks uint64
}

// State reads the streams and their consumers, for the reconciliation
// and the end of a run.
func (j *JetStream) State(ctx context.Context) (StreamState, error) {
	st := StreamState{EventsBySubject: map[string]uint64{}}
	os, err := j.js.Stream(ctx, j.OrderStream)
	if err != nil {
		return st, err
	}
	oi, err := os.Info(ctx)
	if err != nil {
		return st, err
	}
	st.OrderMessages, st.OrderLastSeq = oi.State.Msgs, oi.State.LastSeq
	es, err := j.js.Stream(ctx, j.EventStream)
	if err != nil {
		return st, err
	}
	ei, err := es.Info(ctx, jetstream.WithSubjectFilter(j.eventPrefix+"*"))
	if err != nil {
		return st, err
	}
	for subj, n := range ei.State.Subjects {
		st.EventsBySubject[strings.TrimPrefix(subj, j.eventPrefix)] = n
	}
	add := func(s jetstream.Stream, stream, durable string) error {
		c, err := s.Consumer(ctx, durable)
		if err != nil {
			return err
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return err
		}
		st.Consumers = append(st.Consumers, ConsumerState{Stream: stream, Durable: durable, Pending: ci.NumPending,
			AckPending: uint64(ci.NumAckPending), Redelivered: uint64(ci.NumRedelivered), Acks: ci.AckFloor.Consumer})
		return nil
	}
	if err := add(os, j.OrderStream, "order-create"); err != nil {
		return st, err
	}
	for _, ec := range EventConsumers {
		if err := add(es, j.EventStream, ec.Durable); err != nil {
			return st, err
		}
	}
	return st, nil
}
