package drills

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
	"github.com/redis/go-redis/v9"

	"github.com/seckillkit/seckill/examples/internal/patroniharness"
	"github.com/seckillkit/seckill/examples/internal/stackharness"
	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/frontdoor"
	"github.com/seckillkit/seckill/examples/seckill/reconcile"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// redisFront is the drill's side of the sale in front of PostgreSQL, as
// the example's service runs it on the real stack: buyers click through
// the Redis front door (frontdoor.Redis, on a Redis Cluster), a
// reservation becomes an order message on a broker (the in-memory one:
// this drill is about Redis), consumers place the orders, relays publish
// the outbox and apply the front-door releases. A front door that answers
// ErrDown is recovered with frontdoor.Redis.Recover while clicks are
// answered ErrDown, as the service does.
type redisFront struct {
	r     *rig
	front *frontdoor.Redis
	q     *broker.Memory

	inFlight   atomic.Int64
	rebuilding atomic.Bool
	recovering sync.WaitGroup
	downs      atomic.Int64 // clicks answered ErrDown (and clicked again)
	soldOut    atomic.Int64
	already    atomic.Int64
	releases   atomic.Int64 // releases the front door applied

	mu        sync.Mutex
	gate      chan struct{}        // the recovery waits for it to close before it quiesces
	byID      map[uuid.UUID]*msg   // order messages by message id
	msgs      []*msg               // every order message published
	started   []time.Time          // when the Reserve call of each reservation (msgs[i]) began
	answers   [][2]time.Time       // every definite answer of the front door: its call's start and end
	rebuilt   []time.Time          // when each recovery rebuilt the front door
	published map[string]int64     // distinct events published, by tag
	seenEvent map[uuid.UUID]string // events published, for the distinct count
}

func newRedisFront(t *testing.T, r *rig, rdb redis.UniversalClient) *redisFront {
	t.Helper()
	f := &redisFront{r: r, q: broker.NewMemory(broker.MemoryConfig{Depth: 2000, DupRate: 0.05, Visibility: 10 * time.Second, Redelay: 50 * time.Millisecond}),
		gate: closedChan(), byID: map[uuid.UUID]*msg{}, published: map[string]int64{}, seenEvent: map[uuid.UUID]string{}}
	f.front = frontdoor.NewRedis(rdb, "drill:"+r.svc.Schema, r.svc.Item, orderIDs.Next)
	img, err := frontdoor.LoadImage(r.ctx, r.svc)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.front.Rebuild(r.ctx, img, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	// The reconciliation reads the poison messages recorded for review,
	// as the example keeps them.
	if _, err := r.admin.Exec(r.ctx, r.q(`CREATE TABLE IF NOT EXISTS %s.poison_message (stream TEXT NOT NULL,
		message_id UUID NOT NULL, deliveries BIGINT NOT NULL, error TEXT NOT NULL, body BYTEA NOT NULL,
		recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (stream, message_id))`)); err != nil {
		t.Fatal(err)
	}
	return f
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// click is one buyer's click, clicked again while the front door is down
// (a buyer retrying); expired makes the order already expired (the
// canceller takes it and its release goes back to the front door), pay
// makes the buyer pay once ORDER_CREATED is published.
func (f *redisFront) click(ctx context.Context, user int64, expired, pay bool) {
	for ctx.Err() == nil {
		// In flight before the check: a recovery that starts after the
		// check waits for this click (its reservation reaches PostgreSQL
		// before the image is read).
		f.inFlight.Add(1)
		if f.rebuilding.Load() {
			f.inFlight.Add(-1)
			f.downs.Add(1)
			time.Sleep(20 * time.Millisecond)
			continue
		}
		start := time.Now()
		res, err := f.front.Reserve(ctx, user)
		end := time.Now()
		if err == nil {
			err = f.publish(ctx, res, start, expired, pay)
		}
		f.inFlight.Add(-1)
		switch {
		case err == nil, errors.Is(err, frontdoor.ErrSoldOut), errors.Is(err, frontdoor.ErrAlreadyBought):
			if errors.Is(err, frontdoor.ErrSoldOut) {
				f.soldOut.Add(1)
			} else if err != nil {
				f.already.Add(1)
			}
			f.mu.Lock()
			f.answers = append(f.answers, [2]time.Time{start, end})
			f.mu.Unlock()
			return
		case errors.Is(err, frontdoor.ErrDown):
			f.downs.Add(1)
			f.recover()
			time.Sleep(20 * time.Millisecond)
		default:
			f.r.t.Errorf("click of buyer %d: %v", user, err)
			return
		}
	}
}

// publish queues the order message of res (retrying while the queue is
// full) and records it.
func (f *redisFront) publish(ctx context.Context, res frontdoor.Reservation, started time.Time, expired, pay bool) error {
	it := f.r.svc.Item
	m := flow.OrderMessage{RequestID: res.RequestID, ReservationID: res.ReservationID, OrderID: res.OrderID,
		ActivityID: it.ActivityID, SKUID: it.SKUID, UserID: res.UserID, Bucket: res.Bucket,
		UnitPrice: it.UnitPrice, Currency: it.Currency, SKUTitle: it.Title,
		ReservedAt: res.ReservedAt, ReservationTo: res.ReservedAt.Add(15 * time.Minute), OrderExpireAt: res.ReservedAt.Add(time.Hour)}
	if expired {
		m.OrderExpireAt = res.ReservedAt.Add(-time.Second)
	}
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	om := &msg{ID: uuid.Must(uuid.NewV7()), Body: body, M: m, Pay: pay && !expired}
	f.mu.Lock()
	f.byID[om.ID] = om
	f.mu.Unlock()
	f.r.mu.Lock()
	f.r.byOrder[m.OrderID] = om
	f.r.mu.Unlock()
	for {
		err := f.q.Publish(ctx, broker.Message{ID: om.ID, Body: body})
		if !errors.Is(err, broker.ErrBusy) || ctx.Err() != nil {
			if err == nil {
				f.mu.Lock()
				f.msgs = append(f.msgs, om)
				f.started = append(f.started, started)
				f.mu.Unlock()
			}
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// recover starts, once at a time, the recovery of the front door.
func (f *redisFront) recover() {
	if !f.rebuilding.CompareAndSwap(false, true) {
		return
	}
	f.recovering.Add(1)
	go func() {
		defer f.recovering.Done()
		defer f.rebuilding.Store(false)
		ctx := f.r.ctx
		quiesce := func(ctx context.Context) error {
			f.mu.Lock()
			gate := f.gate
			f.mu.Unlock()
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
			for f.inFlight.Load() > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
			return f.q.WaitIdle(ctx)
		}
		load := func(ctx context.Context) (frontdoor.Image, error) { return frontdoor.LoadImage(ctx, f.r.svc) }
		if rebuilt, _ := f.front.Recover(ctx, quiesce, load, nil); rebuilt {
			f.mu.Lock()
			f.rebuilt = append(f.rebuilt, time.Now())
			f.mu.Unlock()
		}
	}()
}

// consume places the order of one delivery and records what the consumer
// was told.
func (f *redisFront) consume(ctx context.Context, bm broker.Message) error {
	f.mu.Lock()
	m := f.byID[bm.ID]
	f.mu.Unlock()
	if m == nil {
		f.r.t.Errorf("delivery of an unknown message %s", bm.ID)
		return nil
	}
	out, err := f.r.svc.PlaceOrder(ctx, bm.ID, bm.Body)
	switch {
	case err == nil:
		f.r.ack(m, out)
	case errors.Is(err, flow.ErrPoison):
		f.r.t.Errorf("message %s is poison: %v", bm.ID, err)
		return nil
	default:
		f.r.nack(m, err)
	}
	return err
}

// publisher is the relays' broker: a FRONTDOOR_RELEASE is applied to the
// front door by its consumer (inbox claim, release, RELEASED, in one
// transaction; an error leaves the event to the relay's next attempt);
// every event that went out reaches the rig's recorder (payments follow
// ORDER_CREATED).
func (f *redisFront) publisher() func(context.Context, []outbox.Message) []error {
	return func(ctx context.Context, msgs []outbox.Message) []error {
		errs := make([]error, len(msgs))
		var sent []outbox.Message
		for i, m := range msgs {
			if m.Tag == flow.TagFrontDoorRelease {
				errs[i] = f.applyRelease(ctx, m)
			}
			if errs[i] == nil {
				sent = append(sent, m)
				f.mu.Lock()
				if _, seen := f.seenEvent[m.EventID]; !seen {
					f.seenEvent[m.EventID] = m.Tag
					f.published[m.Tag]++
				}
				f.mu.Unlock()
			}
		}
		f.r.pub.Publish(ctx, sent)
		return errs
	}
}

// applyRelease is the front-door release consumer (the example's, on the
// in-memory broker).
func (f *redisFront) applyRelease(ctx context.Context, m outbox.Message) error {
	var p struct {
		ReservationID uuid.UUID `json:"reservation_id"`
	}
	if err := json.Unmarshal(m.Payload, &p); err != nil || p.ReservationID == uuid.Nil {
		return fmt.Errorf("release payload %s: %v", m.Payload, err)
	}
	const group = "frontdoor-release-consumer"
	svc := f.r.svc
	err := pgtx.RunInTx(ctx, svc.Pool, pgtx.Options{Name: group}, func(tx pgx.Tx) error {
		claim, err := svc.Inbox.ClaimMessage(ctx, tx, inbox.Message{Group: group, MessageID: m.EventID, Topic: flow.EventTopic,
			Tag: m.Tag, PayloadHash: inbox.HashPayload(m.Payload)})
		if err != nil {
			return err
		}
		if !claim.Fresh {
			return flow.ErrDuplicate
		}
		res, err := f.front.Release(ctx, p.ReservationID, 0)
		if err != nil {
			return err // ErrDown: the relay tries again
		}
		if res == frontdoor.Released {
			f.releases.Add(1)
		}
		code, err := svc.FrontDoorReleased(ctx, tx, p.ReservationID)
		if err != nil {
			return err
		}
		return svc.Inbox.Complete(ctx, tx, inbox.Key{Group: group, MessageID: m.EventID}, inbox.Result{Code: code})
	})
	if errors.Is(err, flow.ErrDuplicate) {
		return nil
	}
	return err
}

// startRelays runs n relays through the front side's publisher, trying a
// failed release again after 100ms, doubling up to 1s (the front door's
// outage is seconds long).
func (f *redisFront) startRelays(n int) (stop func()) {
	return f.r.startRelays(f.r.svc.Pool, n, outbox.RelayConfig{
		Publish: f.publisher(),
		Backoff: func(attempt int) time.Duration {
			return min(100*time.Millisecond<<min(max(attempt-1, 0), 4), time.Second)
		},
	})
}

// counts returns how many reservations were acknowledged, when the first
// click that started after t got a definite answer, and when the first
// rebuild after t ended.
func (f *redisFront) counts(t time.Time) (reserved int, answered, rebuilt time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.answers {
		if a[0].After(t) && (answered.IsZero() || a[1].Before(answered)) {
			answered = a[1]
		}
	}
	for _, b := range f.rebuilt {
		if b.After(t) && rebuilt.IsZero() {
			rebuilt = b
		}
	}
	return len(f.msgs), answered, rebuilt
}

// waitUntil polls cond every 10ms until it holds, failing the test with
// what after timeout.
func waitUntil(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: not within %v (%v)", what, timeout, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// quietRedis drops go-redis's own log lines: its pools report every
// failed dial to the killed master on stderr, which the drill expects.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

var quietRedisOnce sync.Once

// startRedisCluster starts three masters with a replica each and a
// cluster client on them; the cleanup stops them and checks that no
// process is left.
func startRedisCluster(t *testing.T, ctx context.Context) (*stackharness.RedisCluster, *redis.ClusterClient) {
	t.Helper()
	cl, err := stackharness.StartThrowawayRedisCluster(ctx, stackharness.RedisClusterOptions{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl.Stop()
		if left := patroniharness.Leftovers(cl.Dir()); len(left) > 0 {
			t.Errorf("processes left after the Redis Cluster stopped: %v", left)
		}
	})
	quietRedisOnce.Do(func() { redis.SetLogger(quietRedis{}) })
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: 1,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	return cl, rdb
}

// TestRedisMasterKilledMidSale runs the sale through the Redis front door
// on a Redis Cluster of three masters with a replica each. Mid-sale the
// master of the sale's slot acknowledges reservations its replica never
// receives (the replica frozen, its link cut: Redis replication is
// asynchronous) and is killed with SIGKILL; the replica is promoted. The
// promoted replica holds the sale's keys without those reservations: the
// front door notices that another server serves its keys, answers
// ErrDown (buyers click again) and is rebuilt from PostgreSQL once the
// reservations in flight reached it. The killed master comes back as a
// replica. Then: every acknowledged order is present, every order message
// is processed exactly once, every event is published, the audit passes
// (no oversell, no second order) and so does the three-way reconciliation
// (the front door against PostgreSQL's buckets, the ledger and the
// orders). The outage is reported: kill → replica promoted, kill → the
// front door answers again.
func TestRedisMasterKilledMidSale(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	cl, rdb := startRedisCluster(t, ctx)
	r := newRig(t, rigConfig{Schema: "redis_cluster", Stock: 300, Buckets: 4, Timeout: 3 * time.Minute})
	f := newRedisFront(t, r, rdb)
	slot, err := cl.KeySlot("drill:" + r.svc.Schema + fmt.Sprintf(":{%d:%d}:meta", r.svc.Item.ActivityID, r.svc.Item.SKUID))
	if err != nil {
		t.Fatal(err)
	}
	master, replicas, err := cl.MasterOf(0, slot)
	if err != nil || len(replicas) != 1 {
		t.Fatalf("master of the sale's slot %d: %d, replicas %v, %v", slot, master, replicas, err)
	}
	replica := replicas[0]

	consCtx, stopConsumers := context.WithCancel(ctx)
	waitConsumers := f.q.Consume(consCtx, 8, f.consume)
	defer func() { stopConsumers(); waitConsumers() }()
	stopRelays := f.startRelays(2)
	payments := r.startPayers(2, 1000)
	canceller := r.startCanceller(1, 50, 20*time.Millisecond)

	// 360 buyers for 300 units, every tenth clicks twice; every fifth
	// order expires at once (its release goes back through the front
	// door), every other one is paid. Eight clickers, 15ms apart.
	var clicks []int64
	for u := int64(1); u <= 360; u++ {
		clicks = append(clicks, u)
		if u%10 == 0 {
			clicks = append(clicks, u)
		}
	}
	rand.Shuffle(len(clicks), func(i, j int) { clicks[i], clicks[j] = clicks[j], clicks[i] })
	var next atomic.Int64
	var clickers sync.WaitGroup
	for range 8 {
		clickers.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(clicks) || ctx.Err() != nil {
					return
				}
				f.click(ctx, clicks[i], i%5 == 4, i%2 == 0)
				time.Sleep(15 * time.Millisecond)
			}
		})
	}
	clickersDone := make(chan struct{})
	go func() { clickers.Wait(); close(clickersDone) }()

	killed, lost := killSaleMaster(t, ctx, f, cl, master, replica, slot)
	promoted := time.Now()
	t.Logf("replica %d promoted %v after the kill of master %d; %d reservations made after the cut (and acknowledged) missing on it", replica, promoted.Sub(killed).Round(time.Millisecond), master, lost)

	var answered, rebuilt time.Time
	waitUntil(t, ctx, time.Minute, "the front door to answer a click again after the failover", func() bool {
		_, answered, rebuilt = f.counts(killed)
		return !answered.IsZero() && !rebuilt.IsZero()
	})
	select {
	case <-clickersDone:
	case <-time.After(time.Minute):
		t.Fatalf("the buyers did not finish within a minute of the failover (%d of %d clicks started)", next.Load(), len(clicks))
	}
	f.recovering.Wait()

	// The killed master comes back, empty, as the new master's replica.
	if err := cl.Restart(ctx, master); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if role, err := cl.Role(master); err != nil || role != "slave" {
		t.Errorf("the killed master restarted: role %q, %v; want a replica (slave)", role, err)
	}

	finishRedisSale(t, r, f, payments, canceller, stopRelays)
	reserved, _, _ := f.counts(killed)
	t.Logf("front door: %d reservations, %d sold out, %d already reserved, %d clicks answered ErrDown (clicked again), %d rebuilds, %d releases applied",
		reserved, f.soldOut.Load(), f.already.Load(), f.downs.Load(), len(f.rebuilt), f.releases.Load())
	t.Logf("outage: kill → replica promoted %v; kill → front door rebuilt %v, answers again %v",
		promoted.Sub(killed).Round(time.Millisecond), rebuilt.Sub(killed).Round(time.Millisecond), answered.Sub(killed).Round(time.Millisecond))
}

// killSaleMaster waits until a third of the stock is reserved, cuts the
// replica off (frozen, link dropped), waits for ten reservations more (at
// most 1s), kills the master, thaws the replica, waits until it is
// promoted and counts the reservations made after the cut (their Reserve
// call began once the link was cut) that it lacks: all of them must be
// missing. The front door's recovery waits
// until this count is taken. It returns the instant of the kill.
func killSaleMaster(t *testing.T, ctx context.Context, f *redisFront, cl *stackharness.RedisCluster, master, replica, slot int) (killed time.Time, lost int) {
	t.Helper()
	waitUntil(t, ctx, time.Minute, "100 reservations before the fault", func() bool { n, _, _ := f.counts(time.Now()); return n >= 100 })
	gate := make(chan struct{})
	f.mu.Lock()
	f.gate = gate
	f.mu.Unlock()
	defer close(gate)
	if err := cl.CutReplica(replica, master); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	madeAfter := func() []*msg {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []*msg
		for i, m := range f.msgs {
			if f.started[i].After(cut) {
				out = append(out, m)
			}
		}
		return out
	}
	for deadline := cut.Add(time.Second); len(madeAfter()) < 10 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	cl.Kill(master)
	killed = time.Now()
	cl.Thaw(replica)
	waitUntil(t, ctx, time.Minute, fmt.Sprintf("replica %d to be promoted to serve slot %d", replica, slot), func() bool {
		m, _, err := cl.MasterOf(replica, slot)
		return err == nil && m == replica
	})
	after := madeAfter()
	key := "drill:" + f.r.svc.Schema + fmt.Sprintf(":{%d:%d}:resv", f.r.svc.Item.ActivityID, f.r.svc.Item.SKUID)
	for _, m := range after {
		v, err := cl.Read(replica, "HEXISTS", key, m.M.ReservationID.String())
		if err != nil {
			t.Fatalf("HEXISTS on the promoted replica: %v", err)
		}
		if v == "1" {
			t.Errorf("reservation %s, made after the replica was cut off, is on the promoted replica", m.M.ReservationID)
			continue
		}
		lost++
	}
	if lost == 0 {
		t.Fatal("no reservation was made between the cut and the kill: the drill shows no lost write")
	}
	return killed, lost
}

// finishRedisSale lets the sale finish and runs every check.
func finishRedisSale(t *testing.T, r *rig, f *redisFront, payments *payer, canceller *canceller, stopRelays func()) {
	t.Helper()
	qctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	if err := f.q.WaitIdle(qctx); err != nil {
		t.Fatalf("the order queue did not empty within a minute: %v (%d pending)", err, f.q.Pending(qctx))
	}
	r.drain()
	payments.close()
	canceller.finish(r)
	r.drain()
	stopRelays()
	r.logErrors()
	r.assertAcknowledgedSurvive(payments)
	f.mu.Lock()
	msgs := append([]*msg(nil), f.msgs...)
	f.mu.Unlock()
	r.assertExactlyOnce(msgs)
	r.assertAllPublished()
	r.assertAudit()
	r.assertReconciled()
	rec, err := reconcile.Run(r.ctx, reconcile.Sources{Flow: r.audit, Queue: f.q, Front: f.front,
		UnknownPublish: func(uuid.UUID) bool { return false }, InFlight: f.inFlight.Load,
		PublishedTag: func(tag string) int64 { f.mu.Lock(); defer f.mu.Unlock(); return f.published[tag] }})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rec.Print(&b)
	t.Logf("three-way reconciliation:\n%s", b.String())
	if !rec.Passed() {
		t.Errorf("three-way reconciliation: unexplained differences")
	}
}
