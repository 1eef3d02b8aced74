package main

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
)

// The faults of the real parts, each in the middle of a sale on the real
// stack, each ending with the audit and the reconciliation (checkSale).

// TestFaultRedisKilledRestartedEmpty: Redis is killed a third into the
// sale and comes back empty. Clicks meanwhile are answered "front door
// unavailable"; the front door is rebuilt from PostgreSQL (after the order
// messages in flight were consumed), never the other way round: no
// oversell, no second order for a buyer, the reconciliation explains
// every difference.
func TestFaultRedisKilledRestartedEmpty(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 4*time.Minute)
	cfg := smallConfig(t)
	srv := useStack(t, &cfg, stackReal, true)
	restarted := make(chan error, 1)
	var killed atomic.Bool
	hooks := &saleHooks{click: func(i, total int) {
		if i != total/3 {
			return
		}
		if err := srv.redis.Kill(); err != nil {
			t.Error(err)
		}
		killed.Store(true)
		go func() {
			time.Sleep(300 * time.Millisecond) // down for a while: clicks and releases fail meanwhile
			restarted <- srv.redis.Restart(ctx)
		}()
	}}
	rep, err := runSaleHooked(ctx, pgtest.Pool(t), cfg, nil, nil, hooks)
	if err != nil {
		t.Fatal(err)
	}
	if !killed.Load() {
		t.Fatal("the sale ended before Redis was killed")
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	checkSale(t, cfg, rep)
	if rep.FrontDown == 0 || rep.Rebuilds == 0 {
		t.Errorf("front door unavailable %d times, rebuilt %d times: want both > 0", rep.FrontDown, rep.Rebuilds)
	}
}

// TestFaultNATSKilledRestarted: nats-server is killed early in the sale
// and restarted on the same store once a publish has gone unanswered. Publishes without a PubAck are
// sent again with the same Nats-Msg-Id, consumers and relays resume: no
// order lost (every accepted reservation became an order or a
// rejection), duplicates absorbed.
func TestFaultNATSKilledRestarted(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 4*time.Minute)
	cfg := smallConfig(t)
	srv := useStack(t, &cfg, stackReal, true)
	restarted := make(chan error, 1)
	var killed atomic.Bool
	var svc *service
	hooks := &saleHooks{started: func(s *service) { svc = s }, click: func(i, total int) {
		if i != total/6 { // early: the front door still hands out units, so clicks publish
			return
		}
		if err := srv.nats.Kill(); err != nil {
			t.Error(err)
		}
		killed.Store(true)
		go func() {
			// Down until a publish has failed and is being sent again (at
			// most 10s): a restart within a publish's PubAck wait would
			// let the client's reconnect buffer deliver it unnoticed.
			for deadline := time.Now().Add(10 * time.Second); svc.js.Resends.Load() == 0 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond)
			restarted <- srv.nats.Restart(ctx)
		}()
	}}
	rep, err := runSaleHooked(ctx, pgtest.Pool(t), cfg, nil, nil, hooks)
	if err != nil {
		t.Fatal(err)
	}
	if !killed.Load() {
		t.Fatal("the sale ended before NATS was killed")
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	checkSale(t, cfg, rep)
	if svc.js.Resends.Load() == 0 {
		t.Error("no publish was sent again: the outage did not reach the publishers")
	}
}

// TestFaultConsumerKilledBetweenCommitAndAck: 20 order messages are
// committed by a consumer that then "dies" without acking. JetStream
// redelivers each after AckWait; the inbox answers the redelivery as a
// duplicate, and nothing is written twice.
func TestFaultConsumerKilledBetweenCommitAndAck(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 4*time.Minute)
	cfg := smallConfig(t)
	cfg.DupRate = 0 // the only duplicates are the crashes'
	useStack(t, &cfg, stackReal, true)
	const crashes = 20
	var crashed atomic.Int64
	hooks := &saleHooks{started: func(s *service) {
		s.js.InjectFaultsForTest(broker.Faults{CrashAfterCommit: func(broker.Message) bool { return crashed.Add(1) <= crashes }})
	}}
	rep, err := runSaleHooked(ctx, pgtest.Pool(t), cfg, nil, nil, hooks)
	if err != nil {
		t.Fatal(err)
	}
	checkSale(t, cfg, rep)
	if rep.Duplicates < crashes || rep.Redeliveries < crashes {
		t.Errorf("%d duplicates answered by the inbox, %d redeliveries: want at least %d each", rep.Duplicates, rep.Redeliveries, crashes)
	}
}

// TestFaultPubAckTimeoutsAtRelay: the PubAck of every fourth event's
// first publish is lost. The relay marks those events failed and publishes
// them again with the same Nats-Msg-Id; the stream's duplicate window
// stores each once and nothing is lost (the reconciliation compares the
// stream with the outbox per event type).
func TestFaultPubAckTimeoutsAtRelay(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 4*time.Minute)
	cfg := smallConfig(t)
	useStack(t, &cfg, stackReal, true)
	var mu sync.Mutex
	dropped := map[string]bool{}
	var n atomic.Int64
	var svc *service
	hooks := &saleHooks{started: func(s *service) {
		svc = s
		s.js.InjectFaultsForTest(broker.Faults{DropPubAck: func(m outbox.Message) bool {
			if m.Attempt != 1 || n.Add(1)%4 != 0 {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			dropped[m.EventID.String()] = true
			return true
		}})
	}}
	rep, err := runSaleHooked(ctx, pgtest.Pool(t), cfg, nil, nil, hooks)
	if err != nil {
		t.Fatal(err)
	}
	checkSale(t, cfg, rep)
	mu.Lock()
	lost := int64(len(dropped))
	mu.Unlock()
	if lost == 0 {
		t.Fatal("no PubAck was dropped")
	}
	if got := svc.js.EventDedup.Load(); got < lost {
		t.Errorf("%d republished events recognised as duplicates by the stream, want at least the %d whose PubAck was lost", got, lost)
	}
}

// TestPoisonOrderMessageRecorded: an order message that can never be
// processed is recorded in poison_message and acknowledged, once; the
// audit and the reconciliation name it instead of failing or hanging.
func TestPoisonOrderMessageRecorded(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 4*time.Minute)
	cfg := smallConfig(t)
	useStack(t, &cfg, stackReal, false)
	poisonID := uuid.Must(uuid.NewV7())
	var svc *service
	hooks := &saleHooks{started: func(s *service) {
		svc = s
		for _, id := range []uuid.UUID{poisonID, poisonID} { // published twice: stored once
			if err := s.q.Publish(ctx, broker.Message{ID: id, Body: []byte(`{"not": "an order"}`)}); err != nil {
				t.Error(err)
			}
		}
	}}
	rep, err := runSaleHooked(ctx, pgtest.Pool(t), cfg, nil, nil, hooks)
	if err != nil {
		t.Fatal(err)
	}
	checkSale(t, cfg, rep)
	var n int64
	if err := svc.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{cfg.Schema, "poison_message"}.Sanitize()+
		` WHERE message_id = $1`, poisonID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 || rep.Reconciliation.OrderMessages.Poison != 1 {
		t.Fatalf("poison rows %d, reconciliation poison %d: want 1 each", n, rep.Reconciliation.OrderMessages.Poison)
	}
}
