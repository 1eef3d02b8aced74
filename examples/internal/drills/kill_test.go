package drills

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/faultproxy"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// TestFaultKillConsumerBeforeCommit kills consumers between the bucket
// decrement and COMMIT while other consumers run. In the
// general transaction (PlaceOrderTx): half by closing the socket (the
// process died), half by cancelling the ctx before COMMIT (the consumer
// was stopped). In the fresh pipelined path (PlaceOrder's one batch, BEGIN
// to COMMIT): the connection dies as the batch's COMMIT leaves, the bucket
// row locked by the statements before it. Each time the transaction rolls back —
// no order, no inbox row, no ledger row, no reservation, the bucket as it
// was and its row lock released — and the redelivery creates the order
// exactly once.
func TestFaultKillConsumerBeforeCommit(t *testing.T) {
	t.Parallel()
	const victims = 16
	// Buckets 0-3 carry the background load; bucket 4 belongs to the
	// victims, so its counters and lock tell about them alone.
	r := newRig(t, rigConfig{Stock: 500, Buckets: 5})
	bg := r.messages(plan{Users: 240, DoubleClick: 12, Buckets: []int16{0, 1, 2, 3}})
	vs := r.messages(plan{Users: victims, FirstUser: 10_000, Buckets: []int16{4}})
	stopRelays := r.startRelays(r.admin, 2, outbox.RelayConfig{})
	q := r.consume(bg, deliverConfig{Workers: 6})

	for i, v := range vs {
		before := r.bucket(4)
		how := "socket closed"
		if i%2 == 1 {
			how = "ctx cancelled"
		}
		hash := inbox.HashPayload(v.Body)
		// inTx runs in the victim's transaction right after PlaceOrderTx: the
		// bucket is decremented and locked, COMMIT has not been sent.
		inTx := func(ctx context.Context, tx pgx.Tx, out flow.Outcome, err error) {
			t.Helper()
			if err != nil || out.Code != flow.CodeOrderCreated {
				t.Fatalf("victim %d: PlaceOrderTx = %+v, %v", i, out, err)
			}
			b, err := r.svc.Inventory.GetBucket(ctx, tx, r.svc.Item.ActivityID, r.svc.Item.SKUID, 4)
			if err != nil || b.Available != before-1 {
				t.Fatalf("victim %d: bucket in the transaction = %+v, %v; want available %d", i, b, err, before-1)
			}
			if _, err := r.admin.Exec(r.ctx, r.q(`SELECT 1 FROM %s.sku_inventory WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = 4 FOR UPDATE NOWAIT`),
				r.svc.Item.ActivityID, r.svc.Item.SKUID); !pgtx.Classify(err).LockTimeout {
				t.Fatalf("victim %d: the bucket row is not locked by the open transaction: %v", i, err)
			}
		}
		if i%2 == 0 {
			conn, err := pgx.Connect(r.ctx, pgtest.URL(t))
			if err != nil {
				t.Fatal(err)
			}
			tx, err := conn.Begin(r.ctx)
			if err != nil {
				t.Fatal(err)
			}
			out, err := r.svc.PlaceOrderTx(r.ctx, tx, v.ID, hash, v.M)
			inTx(r.ctx, tx, out, err)
			_ = conn.PgConn().Conn().Close() // the consumer process dies
			_ = conn.Close(r.ctx)
		} else {
			ctx, cancel := context.WithCancel(r.ctx)
			err := pgtx.RunInTx(ctx, r.svc.Pool, pgtx.Options{}, func(tx pgx.Tx) error {
				out, err := r.svc.PlaceOrderTx(ctx, tx, v.ID, hash, v.M)
				inTx(ctx, tx, out, err)
				cancel() // the consumer is stopped before COMMIT
				return nil
			})
			cancel()
			if !pgtx.Classify(err).NotCommitted || !errors.Is(err, context.Canceled) {
				t.Fatalf("victim %d: RunInTx = %v; want a known non-commit caused by the cancellation", i, err)
			}
		}
		// The server rolls the transaction back: wait for the bucket lock.
		r.waitBucketUnlocked(4)
		r.assertNoTrace(fmt.Sprintf("victim %d (%s)", i, how), v, before)
	}

	// The fresh pipelined path: PlaceOrder itself, on a connection through
	// a fault proxy. Its one batch (BEGIN to COMMIT) runs up to the
	// decrement (the bucket decremented and locked); the consumer dies as
	// the batch's COMMIT leaves, which never reaches the server.
	const freshVictims = 8
	fpool, fpx := proxiedPool(t, pgtest.URL(t), 1)
	fsvc := *r.svc
	fsvc.Pool = fpool
	fresh := r.messages(plan{Users: freshVictims, FirstUser: 20_000, Buckets: []int16{4}})
	stmts := map[string]string{} // prepared statement name → SQL, from Parse messages
	for i, v := range fresh {
		before := r.bucket(4)
		var mu sync.Mutex
		var savepoint, locked, cut bool
		fpx.SetRule(func(m faultproxy.Message) faultproxy.Action {
			mu.Lock()
			defer mu.Unlock()
			switch m.Type {
			case 'P', 'Q':
				if strings.Contains(strings.ToUpper(m.Query()), "SAVEPOINT") {
					savepoint = true
				}
				if m.Type == 'P' {
					name, sql := twoCStrings(m.Body)
					stmts[name] = sql
				}
			case 'B':
				if _, name := twoCStrings(m.Body); !strings.EqualFold(strings.TrimSpace(stmts[name]), "commit") {
					return faultproxy.Forward
				}
				// The batch's COMMIT: the statements before it were
				// forwarded; cut once the server holds the bucket row.
				for deadline := time.Now().Add(time.Minute); r.ctx.Err() == nil && time.Now().Before(deadline); {
					_, err := r.admin.Exec(r.ctx, r.q(`SELECT 1 FROM %s.sku_inventory WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = 4 FOR UPDATE NOWAIT`),
						r.svc.Item.ActivityID, r.svc.Item.SKUID)
					if locked = pgtx.Classify(err).LockTimeout; locked {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				cut = true
				return faultproxy.CutBefore
			}
			return faultproxy.Forward
		})
		_, err := fsvc.PlaceOrder(r.ctx, v.ID, v.Body)
		fpx.SetRule(nil)
		mu.Lock()
		if !cut || savepoint || !locked {
			t.Fatalf("fresh victim %d: cut at COMMIT %v, general path's savepoint seen %v, bucket locked at the cut %v; want a cut of the fresh path holding the lock", i, cut, savepoint, locked)
		}
		mu.Unlock()
		if err == nil || (!pgtx.Classify(err).OutcomeUnknown && !pgtx.Classify(err).NotCommitted) {
			t.Fatalf("fresh victim %d: PlaceOrder = %v, want an error (the consumer died at COMMIT)", i, err)
		}
		r.waitBucketUnlocked(4)
		r.assertNoTrace(fmt.Sprintf("fresh victim %d (socket closed at COMMIT)", i), v, before)
	}
	q.wait()

	// Redelivered, each victim's order is created once, fresh.
	vs = append(vs, fresh...)
	for i, v := range vs {
		out, err := r.svc.PlaceOrder(r.ctx, v.ID, v.Body)
		if err != nil || out.Duplicate || out.Code != flow.CodeOrderCreated || out.OrderID != v.M.OrderID {
			t.Fatalf("victim %d redelivered: %+v, %v; want a fresh %s", i, out, err, flow.CodeOrderCreated)
		}
		r.ack(v, out)
		if out, err := r.svc.PlaceOrder(r.ctx, v.ID, v.Body); err != nil || !out.Duplicate {
			t.Fatalf("victim %d delivered again: %+v, %v; want a duplicate", i, out, err)
		}
	}
	if got := r.bucket(4); got != 100-victims-freshVictims {
		t.Errorf("victims' bucket available %d, want %d", got, 100-victims-freshVictims)
	}
	t.Logf("%d consumers killed between the bucket decrement and COMMIT (general path: %d by socket close, %d by ctx cancel; fresh pipelined path: %d by socket close at COMMIT): all rolled back, all created once on redelivery",
		victims+freshVictims, (victims+1)/2, victims/2, freshVictims)
	r.drain()
	stopRelays()
	r.logErrors()
	r.assertExactlyOnce(append(bg, vs...))
	r.assertAllPublished()
	r.assertAudit()
}

// waitBucketUnlocked waits until bucket b's row lock is free (a killed
// transaction's backend has rolled back).
func (r *rig) waitBucketUnlocked(b int16) {
	r.t.Helper()
	if err := pgx.BeginFunc(r.ctx, r.admin, func(tx pgx.Tx) error {
		_, err := tx.Exec(r.ctx, r.q(`SELECT 1 FROM %s.sku_inventory WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3 FOR UPDATE`),
			r.svc.Item.ActivityID, r.svc.Item.SKUID, b)
		return err
	}); err != nil {
		r.t.Fatal(err)
	}
}

// assertNoTrace requires that nothing of v's transaction remains: no
// inbox, order, ledger, reservation or outbox row, and bucket 4 as it was.
func (r *rig) assertNoTrace(who string, v *msg, before int32) {
	r.t.Helper()
	if after := r.bucket(4); after != before {
		r.t.Errorf("%s: bucket available %d after the kill, want %d", who, after, before)
	}
	for table, n := range map[string]int64{
		"inbox":       r.count(`SELECT count(*) FROM %s.consumer_inbox WHERE message_id = $1`, v.ID),
		"orders":      r.count(`SELECT count(*) FROM %s.orders WHERE order_id = $1`, v.M.OrderID),
		"ledger":      r.count(`SELECT count(*) FROM %s.inventory_ledger WHERE idempotency_key = 'ALLOCATE:' || $1::uuid::text`, v.M.ReservationID),
		"reservation": r.count(`SELECT count(*) FROM %s.inventory_reservation WHERE reservation_id = $1`, v.M.ReservationID),
		"outbox":      r.count(`SELECT count(*) FROM %s.event_outbox WHERE dedup_key = 'ORDER_CREATED:' || $1::bigint::text`, v.M.OrderID),
	} {
		if n != 0 {
			r.t.Errorf("%s: %d %s rows left by a transaction that never committed", who, n, table)
		}
	}
}

// bucket returns the available stock of bucket b.
func (r *rig) bucket(b int16) int32 {
	r.t.Helper()
	bk, err := r.svc.Inventory.GetBucket(r.ctx, r.admin, r.svc.Item.ActivityID, r.svc.Item.SKUID, b)
	if err != nil {
		r.t.Fatal(err)
	}
	return bk.Available
}

// TestFaultRelayKilledBetweenPublishAndMark kills a relay of the running
// flow after its publisher published a batch and before the relay marked
// it SENT: its ctx is cancelled and its connections are cut,
// so the mark never reaches the server. The events stay SENDING under the
// dead relay's lease; the other relays recover them once the lease expires
// and publish them again. Nothing is lost: every event is published at
// least once, the killed batch twice.
func TestFaultRelayKilledBetweenPublishAndMark(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigConfig{Stock: 300, Buckets: 4})
	msgs := r.messages(plan{Users: 300, DoubleClick: 10})
	q := r.consume(msgs, deliverConfig{Workers: 6})
	q.waitAcked(50)

	// The relay to kill runs through a proxy, so that its connections can
	// be cut.
	rpool, px := proxiedPool(t, pgtest.URL(t), 2)
	killed := make(chan []uuid.UUID, 1)
	rctx, kill := context.WithCancel(r.ctx)
	const owner = "drill-relay-to-kill"
	relay, err := outbox.NewRelay(rpool, outbox.RelayConfig{
		Store: r.svc.Outbox, Owner: owner, BatchSize: 25, DisableListen: true,
		PollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond,
		Publish: func(ctx context.Context, ms []outbox.Message) []error {
			errs := r.pub.Publish(ctx, ms) // published: the broker has them
			ids := make([]uuid.UUID, len(ms))
			for i, m := range ms {
				ids[i] = m.EventID
			}
			// The relay dies before it can mark them.
			px.SetRule(func(faultproxy.Message) faultproxy.Action { return faultproxy.CutBefore })
			px.CutAll()
			kill()
			killed <- ids
			return errs
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = relay.Run(rctx) }()
	<-relayDone
	var batch []uuid.UUID
	select {
	case batch = <-killed:
	default:
		t.Fatal("the relay stopped without publishing")
	}
	ids := make([]string, len(batch)) // text, so that every query exec mode can encode it
	for i, id := range batch {
		ids[i] = id.String()
	}
	if got := r.count(`SELECT count(*) FROM %s.event_outbox WHERE event_id = ANY($1::text[]::uuid[]) AND status = 10 AND locked_by = $2`, ids, owner); got != int64(len(batch)) {
		t.Fatalf("%d of the killed relay's %d published events are still SENDING under its lease, want all", got, len(batch))
	}

	// The surviving relays recover the lease once it has expired.
	stopRelays := r.startRelays(r.admin, 2, outbox.RelayConfig{Lease: time.Second, RecoverInterval: 100 * time.Millisecond})
	q.wait()
	r.drain()
	stopRelays()
	for _, id := range batch {
		if n := r.pub.count(id); n < 2 {
			t.Errorf("event %s of the killed batch published %d times, want 2 (before the kill and after the recovery)", id, n)
		}
	}
	if got := r.pub.recovered.Load(); got < int64(len(batch)) {
		t.Errorf("%d leases recovered, want at least the killed batch's %d", got, len(batch))
	}
	t.Logf("killed batch of %d events republished after lease recovery (%d recovered)", len(batch), r.pub.recovered.Load())
	r.assertExactlyOnce(msgs)
	r.assertAllPublished()
	r.assertAudit()
}
