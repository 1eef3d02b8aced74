//go:build citus

package cituscheck_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// kit is every store of the kit on one distributed schema, with the Citus
// options set.
type kit struct {
	ctx  context.Context
	pool *pgxpool.Pool
	in   *inbox.Store
	out  *outbox.Store
	inv  *inventory.Store
	ord  *order.Store
}

func setup(t *testing.T) kit {
	t.Helper()
	url := os.Getenv("SECKILL_DATABASE_URL")
	if url == "" {
		t.Fatal("SECKILL_DATABASE_URL is not set: point it at a Citus coordinator")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["citus.enable_schema_based_sharding"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var interval string
	if err := pool.QueryRow(ctx, `SHOW citus.recover_2pc_interval`).Scan(&interval); err != nil {
		t.Fatalf("not a Citus coordinator: %v", err)
	}
	if interval != "-1" {
		t.Fatalf("citus.recover_2pc_interval is %s: set it to -1 so that the two-phase commit records stay to be counted", interval)
	}
	schema := fmt.Sprintf("cituscheck_%d", time.Now().UnixNano())
	if _, err := migrate.Apply(ctx, pool, schema, inbox.Migrations, outbox.Migrations, inventory.Migrations, order.Migrations); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	var distributed bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM citus_schemas WHERE schema_name::text = $1)`, schema).Scan(&distributed); err != nil || !distributed {
		t.Fatalf("schema %s is not a distributed schema (%v): is citus.enable_schema_based_sharding allowed?", schema, err)
	}
	k := kit{ctx: ctx, pool: pool}
	if k.in, err = inbox.New(inbox.Config{Schema: schema, Citus: true}); err != nil {
		t.Fatal(err)
	}
	if k.out, err = outbox.New(outbox.Config{Schema: schema, Citus: true}); err != nil {
		t.Fatal(err)
	}
	if k.inv, err = inventory.New(inventory.Config{Schema: schema, Citus: true}); err != nil {
		t.Fatal(err)
	}
	if k.ord, err = order.New(order.Config{Schema: schema, DefaultCurrency: "CNY", Citus: true}); err != nil {
		t.Fatal(err)
	}
	return k
}

// twoPhase counts the coordinator's two-phase commit records, one per
// distributed transaction.
func (k kit) twoPhase(t *testing.T) int {
	t.Helper()
	var n int
	if err := k.pool.QueryRow(k.ctx, `SELECT count(DISTINCT regexp_replace(gid, '_[0-9]+$', '')) FROM pg_dist_transaction`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// step is one helper call in a transaction of its own. orderPath marks
// the helpers of the order transactions, which must commit with one phase.
type step struct {
	name      string
	orderPath bool
	run       func(tx pgx.Tx) error
}

// TestEveryHelperOnCitus runs every helper once, each in a transaction of
// its own, checks what it returns, and counts the transactions that
// committed with two phases: none of the order path may.
func TestEveryHelperOnCitus(t *testing.T) {
	k := setup(t)
	const act, sku = 1, 1001
	now := time.Now()
	newRes := func(user int64, bucket int16, orderID int64) inventory.NewReservation {
		return inventory.NewReservation{
			Request:    seckill.Request{ReservationID: uuid.Must(uuid.NewV7()), RequestID: uuid.Must(uuid.NewV7()), MessageID: uuid.Must(uuid.NewV7()), ActivityID: act, SKUID: sku, UserID: user, Bucket: bucket, Quantity: 1, OrderID: orderID},
			Ordered:    orderID > 0,
			ReservedAt: now,
			ExpiresAt:  now.Add(time.Hour),
		}
	}
	newOrder := func(r inventory.NewReservation, orderID int64, expire time.Time) order.NewOrder {
		return order.NewOrder{Request: seckill.Request{OrderID: orderID, RequestID: r.RequestID,
			ReservationID: r.ReservationID, MessageID: r.MessageID, ActivityID: act, SKUID: sku, UserID: r.UserID,
			Bucket: r.Bucket, Quantity: 1}, OrderNo: fmt.Sprintf("C%d", orderID), UnitPrice: 100, ExpireAt: expire, SKUTitle: "phone"}
	}
	msg := inbox.Message{Group: "orders", MessageID: uuid.Must(uuid.NewV7()), Topic: "orders", PayloadHash: inbox.HashPayload([]byte("m"))}
	r1 := newRes(1, 0, 0)
	r2 := newRes(2, 1, 102)
	r3 := newRes(3, 0, 0)
	expired := newRes(4, 1, 0)
	expired.ReservedAt, expired.ExpiresAt = now.Add(-2*time.Hour), now.Add(-time.Hour)
	var claim outbox.Claim
	var review order.PaymentReview
	ev := func(key string) outbox.Event {
		return outbox.Event{Topic: "orders", Tag: "ORDER_CREATED", AggregateType: "order", AggregateID: key,
			Payload: json.RawMessage(`{}`), DedupKey: key}
	}
	batch := func(tx pgx.Tx, queue func(b *pgx.Batch) error) error {
		var b pgx.Batch
		if err := queue(&b); err != nil {
			return err
		}
		return tx.SendBatch(k.ctx, &b).Close()
	}
	steps := []step{
		{"inventory.Provision", false, func(tx pgx.Tx) error {
			_, err := k.inv.Provision(k.ctx, tx, inventory.SKU{ActivityID: act, SKUID: sku, Stock: 10, Buckets: 2})
			return err
		}},
		{"inventory.SetSaleStatus", false, func(tx pgx.Tx) error {
			_, err := k.inv.SetSaleStatus(k.ctx, tx, inventory.SaleChange{ActivityID: act, SKUID: sku, To: inventory.SaleOnSale,
				Operator: "check", Reason: "open"})
			return err
		}},
		{"inbox.ClaimMessage (fresh)", true, func(tx pgx.Tx) error {
			c, err := k.in.ClaimMessage(k.ctx, tx, msg)
			if err == nil && !c.Fresh {
				err = errors.New("not fresh")
			}
			if err == nil {
				err = k.in.Complete(k.ctx, tx, msg.Key(), inbox.Result{Code: "DONE"})
			}
			return err
		}},
		{"inbox.ClaimMessage (duplicate)", true, func(tx pgx.Tx) error {
			c, err := k.in.ClaimMessage(k.ctx, tx, msg)
			if err == nil && (c.Fresh || c.Record.Result.Code != "DONE") {
				err = fmt.Errorf("duplicate claim %+v", c)
			}
			return err
		}},
		{"inbox.QueueClaimMessage(pgtx.Abort)", true, func(tx pgx.Tx) error {
			m := msg
			m.MessageID = uuid.Must(uuid.NewV7())
			return batch(tx, func(b *pgx.Batch) error {
				return k.in.QueueClaimMessage(b, withResult(m, inbox.Result{Code: "DONE"}), nil, pgtx.Abort)
			})
		}},
		{"inventory.AcquireReservation", true, func(tx pgx.Tx) error {
			a, err := k.inv.AcquireReservation(k.ctx, tx, r1)
			if err == nil && !a.Created {
				err = errors.New("not created")
			}
			return err
		}},
		{"order.Create", true, func(tx pgx.Tx) error {
			_, err := k.ord.Create(k.ctx, tx, newOrder(r1, 101, now.Add(time.Hour)))
			return err
		}},
		{"order.Create (user already ordered)", true, func(tx pgx.Tx) error {
			o := newOrder(r1, 109, now.Add(time.Hour))
			o.RequestID, o.ReservationID, o.MessageID = uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
			_, err := k.ord.Create(k.ctx, tx, o)
			if errors.Is(err, order.ErrUserAlreadyOrdered) {
				return nil
			}
			return fmt.Errorf("second order of the buyer: %v, want ErrUserAlreadyOrdered", err)
		}},
		{"outbox.Enqueue", true, func(tx pgx.Tx) error { _, err := k.out.Enqueue(k.ctx, tx, ev("e1")); return err }},
		{"outbox.Enqueue (3 events)", true, func(tx pgx.Tx) error {
			_, err := k.out.Enqueue(k.ctx, tx, ev("e2"), ev("e3"), ev("e4"))
			return err
		}},
		{"inventory.TransitionReservation", true, func(tx pgx.Tx) error {
			_, err := k.inv.TransitionReservation(k.ctx, tx, inventory.Transition{ReservationID: r1.ReservationID,
				To: inventory.StatusOrdered, OrderID: 101})
			return err
		}},
		{"inventory.AllocateBucket", true, func(tx pgx.Tx) error {
			_, err := k.inv.AllocateBucket(k.ctx, tx, inventory.Allocation{
				Request: seckill.Request{ReservationID: r1.ReservationID, ActivityID: act, SKUID: sku, Bucket: 0, Quantity: 1, UserID: 1, OrderID: 101, MessageID: r1.MessageID},
			})
			return err
		}},
		{"inventory.AllocateBucket (already applied)", true, func(tx pgx.Tx) error {
			_, err := k.inv.AllocateBucket(k.ctx, tx, inventory.Allocation{
				Request: seckill.Request{ReservationID: r1.ReservationID, ActivityID: act, SKUID: sku, Bucket: 0, Quantity: 1, UserID: 1, OrderID: 101, MessageID: r1.MessageID},
			})
			if errors.Is(err, inventory.ErrAlreadyApplied) {
				return nil
			}
			return fmt.Errorf("replayed allocation: %v, want ErrAlreadyApplied", err)
		}},
		{"one batch: reservation, order, allocation", true, func(tx pgx.Tx) error {
			return batch(tx, func(b *pgx.Batch) error {
				return errors.Join(k.inv.QueueAcquireReservation(b, r2, nil, pgtx.Abort),
					k.ord.QueueCreate(b, newOrder(r2, 102, now.Add(-time.Minute)), nil, pgtx.Abort),
					k.out.QueueEnqueue(b, []outbox.Event{ev("e5")}, nil, pgtx.Abort),
					k.inv.QueueAllocateBucket(b, inventory.Allocation{
						Request: seckill.Request{ReservationID: r2.ReservationID, ActivityID: act, SKUID: sku, Bucket: 1, Quantity: 1, UserID: 2, OrderID: 102, MessageID: r2.MessageID},
					}, nil, pgtx.Abort))
			})
		}},
		{"one batch: rejected reservation, sold out", true, func(tx pgx.Tx) error {
			return batch(tx, func(b *pgx.Batch) error {
				rejected := r3
				rejected.FailureCode = "SOLD_OUT"
				return k.inv.QueueAcquireReservation(b, rejected, nil, pgtx.Abort)
			})
		}},
		{"order.RecordPayment", true, func(tx pgx.Tx) error {
			res, err := k.ord.RecordPayment(k.ctx, tx, order.Payment{PaymentID: uuid.Must(uuid.NewV7()), PaymentRequestID: uuid.Must(uuid.NewV7()),
				OrderID: 101, Provider: "check", ProviderTradeNo: "t1", Amount: 100})
			if err == nil && res.Kind != order.PaymentPaid {
				err = fmt.Errorf("payment %+v", res)
			}
			return err
		}},
		{"order.CancelExpired", true, func(tx pgx.Tx) error {
			res, err := k.ord.CancelExpired(k.ctx, tx, 10)
			if err == nil && len(res) != 1 {
				err = fmt.Errorf("cancelled %d orders, want 1", len(res))
			}
			return err
		}},
		{"inventory.ReleaseStock", true, func(tx pgx.Tx) error {
			_, err := k.inv.ReleaseStock(k.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r2.ReservationID}})
			return err
		}},
		{"inventory.TransitionReservation (RELEASE_PENDING)", true, func(tx pgx.Tx) error {
			_, err := k.inv.TransitionReservation(k.ctx, tx, inventory.Transition{ReservationID: r2.ReservationID,
				To: inventory.StatusReleasePending})
			return err
		}},
		{"inventory.AcquireReservation (expired one)", true, func(tx pgx.Tx) error {
			_, err := k.inv.AcquireReservation(k.ctx, tx, expired)
			return err
		}},
		{"inventory.ExpireReservations", false, func(tx pgx.Tx) error {
			rs, err := k.inv.ExpireReservations(k.ctx, tx, 10)
			if err == nil && len(rs) != 1 {
				err = fmt.Errorf("expired %d reservations, want 1", len(rs))
			}
			return err
		}},
		{"inventory.RecordCompensationFailure", false, func(tx pgx.Tx) error {
			_, err := k.inv.RecordCompensationFailure(k.ctx, tx, inventory.CompensationFailure{ReservationID: r2.ReservationID,
				MaxFailures: 3, Code: "FRONT_DOOR_DOWN"})
			return err
		}},
		{"inventory.AdjustStock", false, func(tx pgx.Tx) error {
			_, err := k.inv.AdjustStock(k.ctx, tx, inventory.Adjustment{ActivityID: act, SKUID: sku, Bucket: 1, Delta: 2,
				Operator: "check", ApprovalRef: "T-1", Reason: "RESTOCK"})
			return err
		}},
		{"inventory.Rebalance", false, func(tx pgx.Tx) error {
			_, err := k.inv.Rebalance(k.ctx, tx, inventory.RebalanceRequest{ActivityID: act, SKUID: sku})
			return err
		}},
		{"order.RecordPaymentReview", false, func(tx pgx.Tx) error {
			var err error
			review, _, err = k.ord.RecordPaymentReview(k.ctx, tx, order.Payment{PaymentID: uuid.Must(uuid.NewV7()),
				PaymentRequestID: uuid.Must(uuid.NewV7()), OrderID: 999, Provider: "check", ProviderTradeNo: "t9", Amount: 1},
				order.PaymentResult{}, order.ErrNotFound)
			return err
		}},
		{"order.ResolvePaymentReview", false, func(tx pgx.Tx) error {
			_, err := k.ord.ResolvePaymentReview(k.ctx, tx, review.ReviewID, "refunded", "check")
			return err
		}},
		{"outbox.ClaimOutboxBatch", false, func(tx pgx.Tx) error {
			var err error
			claim, err = k.out.ClaimOutboxBatch(k.ctx, tx, "check", 10)
			if err == nil && len(claim.Messages) == 0 {
				err = errors.New("claimed nothing")
			}
			return err
		}},
		{"outbox.Mark (failed)", false, func(tx pgx.Tx) error {
			_, err := k.out.Mark(k.ctx, tx, outbox.Outcome{Lease: claim.Lease, Failed: []outbox.Failure{{EventID: claim.Messages[0].EventID, Err: errors.New("down")}}})
			return err
		}},
		{"outbox.Mark (sent)", false, func(tx pgx.Tx) error {
			_, err := k.out.Mark(k.ctx, tx, outbox.Outcome{Lease: claim.Lease, Sent: claimIDs(claim)[1:]})
			return err
		}},
		{"outbox.Recover", false, func(tx pgx.Tx) error {
			_, err := k.out.Recover(k.ctx, tx, outbox.Lease{}, time.Nanosecond, 10)
			return err
		}},
		{"outbox.PurgeSent", false, func(tx pgx.Tx) error { _, err := k.out.PurgeSent(k.ctx, tx, now.Add(time.Hour), 100); return err }},
		{"inbox.Purge", false, func(tx pgx.Tx) error { _, err := k.in.Purge(k.ctx, tx, now.Add(time.Hour), 100); return err }},
		{"audits (inventory, order)", false, func(tx pgx.Tx) error {
			f, err := k.inv.Audit(k.ctx, tx, 0, 0)
			if err == nil && len(f) != 0 {
				err = fmt.Errorf("inventory audit: %v", f)
			}
			if err == nil { // with Config.Citus it replays the whole ledger
				if f, err = k.inv.AuditIncremental(k.ctx, tx, 0, 0); err == nil && len(f) != 0 {
					err = fmt.Errorf("inventory incremental audit: %v", f)
				}
			}
			if err == nil {
				var of []order.Finding
				if of, err = k.ord.Audit(k.ctx, tx); err == nil && len(of) != 0 {
					err = fmt.Errorf("order audit: %v", of)
				}
			}
			return err
		}},
	}
	var report strings.Builder
	for _, s := range steps {
		before := k.twoPhase(t)
		err := pgtx.RunInTx(k.ctx, k.pool, pgtx.Options{}, s.run)
		n := k.twoPhase(t) - before
		fmt.Fprintf(&report, "  %-45s two-phase commits: %d\n", s.name, n)
		if err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
		if s.orderPath && n != 0 {
			t.Errorf("%s: committed with two phases on Citus; every order-path transaction must stay on one node", s.name)
		}
	}
	t.Logf("one transaction per helper, in distributed schema:\n%s", report.String())
}

// TestRelayOnCitus runs the outbox relay in both modes (leases, and InTx)
// on a distributed schema: every event's first publish fails, the relay
// marks it failed (RETRY after its backoff) and publishes it again; at the
// end every event is SENT, and none was lost.
func TestRelayOnCitus(t *testing.T) {
	k := setup(t)
	for _, inTx := range []bool{false, true} {
		t.Run(map[bool]string{false: "lease", true: "intx"}[inTx], func(t *testing.T) {
			const n = 50
			topic := fmt.Sprintf("relay-%v", inTx)
			evs := make([]outbox.Event, n)
			for i := range evs {
				evs[i] = outbox.Event{Topic: topic, AggregateType: "order", AggregateID: fmt.Sprint(i),
					Payload: json.RawMessage(`{}`), DedupKey: fmt.Sprintf("%s-%d", topic, i)}
				if i%5 == 0 {
					evs[i].OrderingKey = "k"
				}
			}
			if err := pgtx.RunInTx(k.ctx, k.pool, pgtx.Options{}, func(tx pgx.Tx) error {
				_, err := k.out.Enqueue(k.ctx, tx, evs...)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			var (
				mu    sync.Mutex
				tries = map[string]int{}
				sent  = map[string]bool{}
			)
			pub := func(_ context.Context, msgs []outbox.Message) []error {
				mu.Lock()
				defer mu.Unlock()
				errs := make([]error, len(msgs))
				for i, m := range msgs {
					tries[m.AggregateID]++
					if tries[m.AggregateID] == 1 {
						errs[i] = errors.New("broker down")
						continue
					}
					sent[m.AggregateID] = true
				}
				return errs
			}
			relay, err := outbox.NewRelay(k.pool, outbox.RelayConfig{Store: k.out, Publish: pub, Owner: topic, InTx: inTx,
				DisableListen: true, PollInterval: 10 * time.Millisecond, Backoff: func(int) time.Duration { return 0 }})
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(k.ctx)
			done := make(chan error, 1)
			go func() { done <- relay.Run(ctx) }()
			wait, cancel := context.WithTimeout(k.ctx, time.Minute)
			defer cancel()
			for {
				mu.Lock()
				got := len(sent)
				mu.Unlock()
				if got == n {
					break
				}
				select {
				case <-wait.Done():
					stop()
					t.Fatalf("%d of %d events published within a minute", got, n)
				case <-time.After(20 * time.Millisecond):
				}
			}
			stop()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			var sentRows int
			if err := k.pool.QueryRow(k.ctx, `SELECT count(*) FROM `+pgx.Identifier{k.out.Schema(), "event_outbox"}.Sanitize()+
				` WHERE topic = $1 AND status = 20`, topic).Scan(&sentRows); err != nil || sentRows != n {
				t.Fatalf("%d events SENT, %v; want %d", sentRows, err, n)
			}
		})
	}
}

// withResult is m claimed with its result res recorded up front.
func withResult(m inbox.Message, res inbox.Result) inbox.Message {
	m.Result = &res
	return m
}

// claimIDs returns the event ids of c's messages.
func claimIDs(c outbox.Claim) []uuid.UUID {
	ids := make([]uuid.UUID, len(c.Messages))
	for i, m := range c.Messages {
		ids[i] = m.EventID
	}
	return ids
}
