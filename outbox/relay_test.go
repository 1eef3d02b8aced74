package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/leakcheck"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/outbox"
)

// recorder is a Publisher that records every attempt.
type recorder struct {
	mu       sync.Mutex
	attempts map[uuid.UUID]int
	ok       map[uuid.UUID]int
	log      []attempt // in publish order
	fail     func(m outbox.Message) error
	after    func(ctx context.Context, msgs []outbox.Message, errs []error) // runs after recording
}

type attempt struct {
	m  outbox.Message
	ok bool
}

func newRecorder() *recorder {
	return &recorder{attempts: map[uuid.UUID]int{}, ok: map[uuid.UUID]int{}}
}

func (r *recorder) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	r.mu.Lock()
	for i, m := range msgs {
		if r.fail != nil {
			errs[i] = r.fail(m)
		}
		r.attempts[m.EventID]++
		if errs[i] == nil {
			r.ok[m.EventID]++
		}
		r.log = append(r.log, attempt{m, errs[i] == nil})
	}
	r.mu.Unlock()
	if r.after != nil {
		r.after(ctx, msgs, errs)
	}
	return errs
}

// counters is an Observer that adds up what the relays report and closes
// done once cond holds.
type counters struct {
	claimed, published, failed, dead, recovered, batches atomic.Int64
	cond                                                 func(c *counters) bool
	once                                                 sync.Once
	done                                                 chan struct{}
}

func newCounters(cond func(c *counters) bool) *counters {
	return &counters{cond: cond, done: make(chan struct{})}
}

func (c *counters) check() {
	if c.cond != nil && c.cond(c) {
		c.once.Do(func() { close(c.done) })
	}
}
func (c *counters) BatchStart(ctx context.Context, e outbox.RelayEvent) context.Context {
	c.claimed.Add(int64(len(e.Messages)))
	c.check()
	return ctx
}

func (c *counters) BatchEnd(_ context.Context, e outbox.RelayEvent) {
	c.published.Add(int64(e.Published))
	c.failed.Add(int64(e.Failed))
	c.dead.Add(int64(e.Dead))
	c.batches.Add(1)
	c.check()
}

func (c *counters) RecoverEnd(_ context.Context, e outbox.RelayEvent) {
	c.recovered.Add(int64(e.Recovered))
	c.dead.Add(int64(e.Dead))
	c.check()
}

func (c *counters) wait(t testing.TB, ctx context.Context) {
	t.Helper()
	ctx = testwait.Context(t, ctx, testwait.Step)
	select {
	case <-c.done:
	case <-ctx.Done():
		t.Fatalf("timed out: claimed %d published %d failed %d dead %d recovered %d",
			c.claimed.Load(), c.published.Load(), c.failed.Load(), c.dead.Load(), c.recovered.Load())
	}
}

// startRelays runs n relays with cfg (Store filled in) and returns a stop
// function that cancels them and waits until every Run has returned nil.
func (b *bundle) startRelays(t testing.TB, n int, cfg outbox.RelayConfig, configure func(*outbox.Relay)) (stop func()) {
	t.Helper()
	cfg.Store = b.store
	ctx, cancel := context.WithCancel(b.ctx)
	errc := make(chan error, n)
	for range n {
		r, err := outbox.NewRelay(b.pool, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if configure != nil {
			configure(r)
		}
		go func() { errc <- r.Run(ctx) }()
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		for range n {
			if err := testwait.Recv(t, errc, "the goroutine to return"); err != nil {
				t.Errorf("Run = %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

// bothModes runs test in parallel subtests, for a relay in lease mode and
// in InTx mode.
func bothModes(t *testing.T, test func(t *testing.T, inTx bool)) {
	t.Parallel()
	for _, inTx := range []bool{false, true} {
		t.Run(map[bool]string{false: "lease", true: "intx"}[inTx], func(t *testing.T) {
			t.Parallel()
			test(t, inTx)
		})
	}
}

func manyEvents(n int, mod func(i int, e *outbox.Event)) []outbox.Event {
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = event(i)
		if mod != nil {
			mod(i, &evs[i])
		}
	}
	return evs
}

// 4 relays, 10,000 events: every event published at least once, none lost,
// each marked SENT exactly once.
func TestRelayFourRelaysNoLoss(t *testing.T) { bothModes(t, testRelayFourRelaysNoLoss) }

func testRelayFourRelaysNoLoss(t *testing.T, inTx bool) {
	b := setup(t, outbox.Config{})
	const n = 10000
	enq := b.enqueue(t, manyEvents(n, nil)...)
	rec := newRecorder()
	m := newCounters(func(c *counters) bool { return c.published.Load() >= n })
	stop := b.startRelays(t, 4, outbox.RelayConfig{InTx: inTx, Publish: rec.Publish, Observer: observe(m), BatchSize: 200}, nil)
	m.wait(t, b.ctx)
	stop()

	if got := m.published.Load(); got != n {
		t.Fatalf("marked SENT %d times, want exactly %d", got, n)
	}
	for _, e := range enq {
		if rec.ok[e.EventID] < 1 {
			t.Fatalf("event %s never published", e.EventID)
		}
	}
	if len(rec.ok) != n {
		t.Fatalf("published %d distinct events, want %d", len(rec.ok), n)
	}
	st := b.stats(t)
	if st.Sent != n || st.Pending+st.Sending+st.Retry+st.Dead != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

// A relay that published a claim and died before marking it: after the
// lease expires the events are published again, and only those.
func TestRelayRepublishesAfterCrash(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	const n, crashed = 1000, 50
	b.enqueue(t, manyEvents(n, nil)...)
	rec := newRecorder()

	// The crashed relay: claim, publish, never mark.
	dead := b.claim(t, "crashed-relay", crashed)
	if errs := rec.Publish(b.ctx, dead.Messages); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// Its lease expired long ago (moving locked_at back stands in for the
	// wait): the lease check compares the server's clock with locked_at.
	b.exec(t, `UPDATE `+b.table()+` SET locked_at = locked_at - interval '1 hour' WHERE locked_by = 'crashed-relay'`)

	m := newCounters(func(c *counters) bool { return c.published.Load() >= n })
	stop := b.startRelays(t, 2, outbox.RelayConfig{Publish: rec.Publish, Observer: observe(m)}, nil)
	m.wait(t, b.ctx)
	stop()

	if m.recovered.Load() != crashed || m.published.Load() != n {
		t.Fatalf("recovered %d, marked %d", m.recovered.Load(), m.published.Load())
	}
	crashedIDs := map[uuid.UUID]bool{}
	for _, msg := range dead.Messages {
		crashedIDs[msg.EventID] = true
	}
	twice := 0
	for id, k := range rec.ok {
		switch {
		case crashedIDs[id] && k != 2:
			t.Fatalf("crashed event %s published %d times, want 2", id, k)
		case !crashedIDs[id] && k != 1:
			t.Fatalf("event %s published %d times, want 1", id, k)
		case k == 2:
			twice++
		}
	}
	if twice != crashed || len(rec.ok) != n {
		t.Fatalf("%d republished, %d distinct; want %d, %d", twice, len(rec.ok), crashed, n)
	}
	// The crashed relay's late MarkSent cannot touch the rows.
	if _, err := b.store.Mark(b.ctx, b.pool, outbox.Outcome{Lease: dead.Lease, Sent: claimIDs(dead)}); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("late MarkSent = %v, want ErrLeaseLost", err)
	}
	if st := b.stats(t); st.Sent != n {
		t.Fatalf("stats = %+v", st)
	}
}

// Stopping mid-batch: what was published is marked SENT, the rest goes back
// to RETRY at once without counting an attempt; nothing stays SENDING.
func TestRelayGracefulStopReleases(t *testing.T) { bothModes(t, testRelayGracefulStopReleases) }

func testRelayGracefulStopReleases(t *testing.T, inTx bool) {
	b := setup(t, outbox.Config{})
	b.enqueue(t, manyEvents(20, nil)...)
	// The publisher cancels ctx; the deadline bounds a relay that never
	// calls it.
	ctx, cancel := context.WithTimeout(b.ctx, testwait.Step)
	defer cancel()
	rec := newRecorder()
	var calls atomic.Int32
	var ends []outbox.RelayEvent // the Observer's BatchEnd events, from Run's goroutine
	r, err := outbox.NewRelay(b.pool, outbox.RelayConfig{InTx: inTx, Store: b.store, BatchSize: 20, DisableListen: true,
		Observer: outbox.Observer{BatchEnd: func(_ context.Context, e outbox.RelayEvent) { ends = append(ends, e) }},
		Publish: func(pctx context.Context, msgs []outbox.Message) []error {
			calls.Add(1)
			errs := rec.Publish(pctx, msgs[:10]) // the first half goes out
			cancel()                             // then the service shuts down
			<-pctx.Done()
			for range msgs[10:] {
				errs = append(errs, pctx.Err())
			}
			return errs
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Fatalf("publisher called %d times", calls.Load())
	}
	if len(ends) != 1 || ends[0].Published != 10 || ends[0].Released != 10 || ends[0].Failed != 0 {
		t.Fatalf("BatchEnd events %+v; want one: 10 published, 10 released, none failed", ends)
	}
	// Released: RETRY under a lease; in InTx mode never touched (PENDING).
	released := map[bool]string{false: "status = 30", true: "status = 0"}[inTx] + " AND retry_count = 0 AND available_at <= statement_timestamp()"
	if s, rt, sd := b.count(t, "status = 20"), b.count(t, released),
		b.count(t, "status = 10"); s != 10 || rt != 10 || sd != 0 {
		t.Fatalf("SENT %d, released %d, SENDING %d; want 10, 10, 0", s, rt, sd)
	}
	// Another relay picks the released events up at once.
	m := newCounters(func(c *counters) bool { return c.published.Load() >= 10 })
	stop := b.startRelays(t, 1, outbox.RelayConfig{InTx: inTx, Publish: rec.Publish, Observer: observe(m)}, nil)
	m.wait(t, b.ctx)
	stop()
	if len(rec.ok) != 20 {
		t.Fatalf("published %d distinct", len(rec.ok))
	}
}

// A failing publisher: retries with the configured backoff, DEAD after
// MaxRetries attempts, last_error bounded; partial failure handled per
// message.
func TestRelayRetryBackoffDead(t *testing.T) { bothModes(t, testRelayRetryBackoffDead) }

func testRelayRetryBackoffDead(t *testing.T, inTx bool) {
	b := setup(t, outbox.Config{})
	const n = 20
	enq := b.enqueue(t, manyEvents(n, func(i int, e *outbox.Event) { e.MaxRetries = 3 })...)
	failing := map[uuid.UUID]bool{}
	for i, e := range enq {
		if i%2 == 0 {
			failing[e.EventID] = true
		}
	}
	huge := errors.New(strings.Repeat("失败", 3000))
	rec := newRecorder()
	rec.fail = func(m outbox.Message) error {
		if failing[m.EventID] {
			return huge
		}
		return nil
	}
	var mu sync.Mutex
	backoffs := map[int]int{}
	m := newCounters(func(c *counters) bool { return c.published.Load() >= n/2 && c.dead.Load() >= n/2 })
	stop := b.startRelays(t, 2, outbox.RelayConfig{InTx: inTx, Publish: rec.Publish, Observer: observe(m), BatchSize: 7,
		Backoff: func(attempt int) time.Duration {
			mu.Lock()
			backoffs[attempt]++
			mu.Unlock()
			return time.Millisecond
		}}, nil)
	m.wait(t, b.ctx)
	stop()

	for _, e := range enq {
		st, retries, lastErr := b.status(t, e.EventID)
		if failing[e.EventID] {
			if st != outbox.StatusDead || retries != 3 || rec.attempts[e.EventID] != 3 || rec.ok[e.EventID] != 0 {
				t.Fatalf("failing event: %v retries %d attempts %d", st, retries, rec.attempts[e.EventID])
			}
			if len(lastErr) > outbox.MaxLastErrorBytes || !strings.HasPrefix(lastErr, "失败") {
				t.Fatalf("last_error %d bytes", len(lastErr))
			}
		} else if st != outbox.StatusSent || rec.attempts[e.EventID] != 1 {
			t.Fatalf("good event: %v attempts %d", st, rec.attempts[e.EventID])
		}
	}
	if backoffs[1] != n/2 || backoffs[2] != n/2 || m.failed.Load() != 3*n/2 {
		t.Fatalf("backoff calls %v, failed %d", backoffs, m.failed.Load())
	}
}

// Ordered mode under 4 relays with 10% random publish failures: per ordering
// key, events are published (successfully) in enqueue order, and no event is
// attempted before every earlier event of its key was published.
func TestRelayOrderedUnderFailures(t *testing.T) { bothModes(t, testRelayOrderedUnderFailures) }

func testRelayOrderedUnderFailures(t *testing.T, inTx bool) {
	b := setup(t, outbox.Config{})
	const keys, perKey, producers = 50, 40, 4
	// 4 producers enqueue concurrently; each owns perKey/producers events of
	// every key, in its own order.
	var wg sync.WaitGroup
	errc := make(chan error, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < perKey/producers; n++ {
				var evs []outbox.Event
				for k := range keys {
					e := event(0)
					e.AggregateID = fmt.Sprint(k)
					e.OrderingKey = fmt.Sprintf("key-%d", k)
					e.DedupKey = fmt.Sprintf("%d-%d-%d", k, p, n)
					e.MaxRetries = 1000
					e.Payload = json.RawMessage(fmt.Sprintf(`{"p": %d, "n": %d}`, p, n))
					evs = append(evs, e)
				}
				err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
					_, err := b.store.Enqueue(b.ctx, tx, evs...)
					return err
				})
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	testwait.WaitWithin(t, &wg, testwait.Long, "the concurrent transactions")
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}

	rec := newRecorder()
	var rmu sync.Mutex
	rnd := rand.New(rand.NewPCG(1, 2))
	rec.fail = func(outbox.Message) error { // called under rec.mu
		rmu.Lock()
		defer rmu.Unlock()
		if rnd.IntN(10) == 0 {
			return errors.New("injected failure")
		}
		return nil
	}
	const total = keys * perKey
	m := newCounters(func(c *counters) bool { return c.published.Load() >= total })
	stop := b.startRelays(t, 4, outbox.RelayConfig{InTx: inTx, Publish: rec.Publish, Observer: observe(m), BatchSize: 25,
		Backoff: func(int) time.Duration { return 0 }}, nil)
	m.wait(t, b.ctx)
	stop()

	if m.failed.Load() == 0 {
		t.Fatal("no failures were injected")
	}
	lastOK := map[string]int64{}   // key → seq of the last successful publish
	lastProd := map[string][]int{} // key → per producer, last n published
	for _, a := range rec.log {
		k := a.m.OrderingKey
		if a.m.Seq <= lastOK[k] && lastOK[k] != 0 {
			t.Fatalf("key %s: event seq %d attempted after seq %d was published", k, a.m.Seq, lastOK[k])
		}
		if !a.ok {
			continue
		}
		lastOK[k] = a.m.Seq
		var pl struct{ P, N int }
		if err := json.Unmarshal(a.m.Payload, &pl); err != nil {
			t.Fatal(err)
		}
		if lastProd[k] == nil {
			lastProd[k] = []int{-1, -1, -1, -1}
		}
		if pl.N != lastProd[k][pl.P]+1 {
			t.Fatalf("key %s producer %d: published n=%d after n=%d", k, pl.P, pl.N, lastProd[k][pl.P])
		}
		lastProd[k][pl.P] = pl.N
	}
	// Every attempt of a key happens after the previous event of the key
	// was published: the attempts of one event are contiguous per key.
	prevSeq := map[string]int64{}
	for _, a := range rec.log {
		k := a.m.OrderingKey
		if a.m.Seq < prevSeq[k] {
			t.Fatalf("key %s: seq %d attempted after seq %d", k, a.m.Seq, prevSeq[k])
		}
		prevSeq[k] = a.m.Seq
	}
	if len(rec.ok) != total || len(lastOK) != keys {
		t.Fatalf("published %d distinct events of %d keys", len(rec.ok), len(lastOK))
	}
	for id, k := range rec.ok {
		if k != 1 {
			t.Fatalf("event %s published %d times", id, k)
		}
	}
}

// A key whose head keeps failing blocks only itself.
func TestRelayBlockedKeyDoesNotBlockOthers(t *testing.T) {
	bothModes(t, testRelayBlockedKeyDoesNotBlockOthers)
}

func testRelayBlockedKeyDoesNotBlockOthers(t *testing.T, inTx bool) {
	b := setup(t, outbox.Config{})
	var evs []outbox.Event
	for k := range 6 {
		for i := range 10 {
			e := event(k*100 + i)
			e.OrderingKey = fmt.Sprintf("key-%d", k)
			e.MaxRetries = 1000
			evs = append(evs, e)
		}
	}
	enq := b.enqueue(t, evs...)
	bad := enq[0].EventID // head of key-0
	rec := newRecorder()
	rec.fail = func(m outbox.Message) error {
		if m.EventID == bad {
			return errors.New("poison")
		}
		return nil
	}
	m := newCounters(func(c *counters) bool { return c.published.Load() >= 50 && c.failed.Load() >= 3 })
	stop := b.startRelays(t, 2, outbox.RelayConfig{InTx: inTx, Publish: rec.Publish, Observer: observe(m), Backoff: func(int) time.Duration { return 0 }}, nil)
	m.wait(t, b.ctx)
	stop()

	if rec.attempts[bad] < 3 || rec.ok[bad] != 0 {
		t.Fatalf("head of key-0 attempted %d times", rec.attempts[bad])
	}
	for _, e := range enq[1:10] {
		if rec.attempts[e.EventID] != 0 {
			t.Fatalf("event behind the failing head was attempted")
		}
	}
	for _, e := range enq[10:] {
		if rec.ok[e.EventID] != 1 {
			t.Fatalf("event of another key published %d times", rec.ok[e.EventID])
		}
	}
	if n := b.count(t, "ordering_key = 'key-0' AND status IN (0, 30)"); n != 10 {
		t.Fatalf("key-0 waiting = %d", n)
	}
}

// With LISTEN/NOTIFY (Config.Notify) an event enqueued while the relay
// idles on a one-hour poll interval is published: only the notification can
// wake it.
func TestRelayListenWakesUp(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{Notify: true})
	idle := make(chan bool, 100)
	rec := newRecorder()
	m := newCounters(func(c *counters) bool { return c.published.Load() >= 1 })
	stop := b.startRelays(t, 1, outbox.RelayConfig{Publish: rec.Publish, Observer: observe(m),
		PollInterval: time.Hour, RecoverInterval: time.Hour},
		func(r *outbox.Relay) {
			outbox.SetIdleHook(r, func(listening bool) {
				select {
				case idle <- listening:
				default:
				}
			})
		})
	idleCtx := testwait.Context(t, b.ctx, testwait.Step)
	for listening := false; !listening; {
		select {
		case listening = <-idle:
		case <-idleCtx.Done():
			t.Fatal("relay never went idle while listening")
		}
	}
	id := b.enqueue(t, event(1))[0].EventID
	m.wait(t, b.ctx)
	stop()
	if rec.ok[id] != 1 {
		t.Fatalf("published %v", rec.ok)
	}
}

// With LISTEN switched off (and no NOTIFY sent), polling still delivers.
func TestRelayPollingWithoutListen(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	idle := make(chan bool, 100)
	rec := newRecorder()
	m := newCounters(func(c *counters) bool { return c.published.Load() >= 3 })
	stop := b.startRelays(t, 1, outbox.RelayConfig{Publish: rec.Publish, Observer: observe(m), DisableListen: true,
		PollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond},
		func(r *outbox.Relay) {
			outbox.SetIdleHook(r, func(listening bool) {
				select {
				case idle <- listening:
				default:
				}
			})
		})
	if l := testwait.Recv(t, idle, "the relay to go idle"); l {
		t.Fatal("relay listens although DisableListen")
	}
	b.enqueue(t, event(1), event(2), event(3))
	m.wait(t, b.ctx)
	stop()
	if len(rec.ok) != 3 {
		t.Fatalf("published %d", len(rec.ok))
	}
}

func TestRelayConfigAndLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	pub := func(context.Context, []outbox.Message) []error { return nil }
	for _, cfg := range []outbox.RelayConfig{
		{},
		{Publish: pub, BatchSize: -1},
		{Publish: pub, Lease: -time.Second},
		{Publish: pub, PollInterval: -1},
		{Publish: pub, Owner: strings.Repeat("o", 129)},
	} {
		if _, err := outbox.NewRelay(b.pool, cfg); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Fatalf("NewRelay(%+v) = %v", cfg, err)
		}
	}
	if _, err := outbox.NewRelay(nil, outbox.RelayConfig{Publish: pub}); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("nil pool: %v", err)
	}
	r1, _ := outbox.NewRelay(b.pool, outbox.RelayConfig{Publish: pub, Store: b.store})
	r2, _ := outbox.NewRelay(b.pool, outbox.RelayConfig{Publish: pub, Store: b.store})
	if outbox.Owner(r1) == outbox.Owner(r2) || outbox.Owner(r1) == "" {
		t.Fatalf("owners %q %q not unique", outbox.Owner(r1), outbox.Owner(r2))
	}

	ctx, cancel := context.WithCancel(b.ctx)
	idle := make(chan bool, 1)
	outbox.SetIdleHook(r1, func(bool) {
		select {
		case idle <- true:
		default:
		}
	})
	done := make(chan error, 1)
	go func() { done <- r1.Run(ctx) }()
	testwait.Recv(t, idle, "the relay to go idle")
	if err := r1.Run(ctx); !errors.Is(err, outbox.ErrRelayRunning) {
		t.Fatalf("second Run = %v", err)
	}
	cancel()
	if err := testwait.Recv(t, done, "the blocked call to return"); err != nil {
		t.Fatal(err)
	}
	// Run again after it returned; a cancelled ctx returns at once.
	if err := r1.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// A publisher that panics or returns the wrong number of results fails
	// the batch instead of killing the relay.
	id := b.enqueue(t, event(1))[0].EventID
	m := newCounters(func(c *counters) bool { return c.failed.Load() >= 2 })
	var calls atomic.Int32
	bad := func(context.Context, []outbox.Message) []error {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		return []error{nil, nil}
	}
	stop := b.startRelays(t, 1, outbox.RelayConfig{Publish: bad, Observer: observe(m), Backoff: func(int) time.Duration { return 0 }}, nil)
	m.wait(t, b.ctx)
	stop()
	if st, retries, le := b.status(t, id); st == outbox.StatusSent || retries < 2 || le == "" {
		t.Fatalf("after bad publishers: %v %d %q", st, retries, le)
	}
}

// Not parallel on purpose: leakcheck sees every goroutine of the process,
// and the parallel tests' relays would count. Sequential tests run before
// the parallel ones start.
func TestRelayStopLeavesNoGoroutines(t *testing.T) {
	b := setup(t, outbox.Config{})
	b.enqueue(t, manyEvents(500, nil)...)
	rec := newRecorder()
	m := newCounters(func(c *counters) bool { return c.published.Load() >= 500 })
	stop := b.startRelays(t, 3, outbox.RelayConfig{Publish: rec.Publish, Observer: observe(m), BatchSize: 50}, nil)
	m.wait(t, b.ctx)
	stop()
	if err := leakcheck.Wait("outbox", 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestNotifyOnlyWhenAsked: by default Enqueue and EnqueueMany send no
// NOTIFY; with Config.Notify each statement that inserted sends one. A
// sentinel NOTIFY committed after the default enqueues must be the first
// notification the listener sees (notifications arrive in commit order).
func TestNotifyOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	notifying, err := outbox.New(outbox.Config{Schema: b.schema, Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	listener := pgtest.Conn(t)
	if _, err := listener.Exec(b.ctx, `LISTEN `+pgx.Identifier{outbox.Channel(b.store)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		n, err := listener.WaitForNotification(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n.Payload
	}
	enqueue := func(s *outbox.Store, many bool, i int) {
		t.Helper()
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			if many {
				_, err := s.Enqueue(b.ctx, tx, []outbox.Event{event(i), event(i + 1)}...)
				return err
			}
			_, err := s.Enqueue(b.ctx, tx, event(i))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	enqueue(b.store, false, 1)
	enqueue(b.store, true, 2)
	if _, err := b.pool.Exec(b.ctx, `SELECT pg_notify($1, 'sentinel')`, outbox.Channel(b.store)); err != nil {
		t.Fatal(err)
	}
	if p := next(); p != "sentinel" {
		t.Fatalf("first notification %q, want the sentinel: the default store notified", p)
	}
	enqueue(notifying, false, 10)
	if p := next(); p != "" {
		t.Fatalf("notification %q after a Notify Enqueue, want the store's empty payload", p)
	}
	enqueue(notifying, true, 20)
	if p := next(); p != "" {
		t.Fatalf("notification %q after a Notify EnqueueMany, want the store's empty payload", p)
	}
}
