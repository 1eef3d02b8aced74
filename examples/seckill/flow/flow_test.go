package flow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/orderid"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/faultproxy"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/roundtrip"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ids orderid.Generator

type bundle struct {
	ctx  context.Context
	s    *flow.Service
	pool *pgxpool.Pool
}

func setup(t *testing.T, pool *pgxpool.Pool, stock int32, buckets int16) bundle {
	t.Helper()
	return setupMode(t, pool, stock, buckets, false)
}

// setupMode is setup with flow.Config.Citus set to citus: the statement
// shapes Citus routes whole, here on plain PostgreSQL.
func setupMode(t *testing.T, pool *pgxpool.Pool, stock int32, buckets int16, citus bool) bundle {
	t.Helper()
	ctx := pgtest.Context(t, 3*time.Minute)
	if pool == nil {
		pool = pgtest.Pool(t)
	}
	s, err := flow.New(ctx, pool, flow.Config{Schema: pgtest.Schema(t), Item: flow.SKU{
		ActivityID: 7, SKUID: 70, Title: "phone", UnitPrice: 1999, Currency: "CNY", Stock: stock, Buckets: buckets,
	}, Citus: citus})
	if err != nil {
		t.Fatal(err)
	}
	return bundle{ctx: ctx, s: s, pool: pool}
}

// msg is what a front door would send for user, reserving in bucket.
func (b bundle) msg(user int64, bucket int16) flow.OrderMessage {
	now := time.Now()
	return flow.OrderMessage{
		RequestID: uuid.Must(uuid.NewV7()), ReservationID: uuid.Must(uuid.NewV7()), OrderID: ids.Next(),
		ActivityID: b.s.Item.ActivityID, SKUID: b.s.Item.SKUID, UserID: user, Bucket: bucket,
		UnitPrice: b.s.Item.UnitPrice, Currency: b.s.Item.Currency, SKUTitle: b.s.Item.Title,
		ReservedAt: now, ReservationTo: now.Add(15 * time.Minute), OrderExpireAt: now.Add(time.Hour),
	}
}

func body(t *testing.T, m flow.OrderMessage) []byte {
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func (b bundle) count(t *testing.T, table, where string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+pgx.Identifier{b.s.Schema, table}.Sanitize()+` WHERE `+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b bundle) allocated(t *testing.T) int64 {
	t.Helper()
	tot, err := b.s.Inventory.Stock(b.ctx, b.pool, b.s.Item.ActivityID, b.s.Item.SKUID)
	if err != nil {
		t.Fatal(err)
	}
	return int64(tot.Allocated)
}

func (b bundle) auditClean(t *testing.T) {
	t.Helper()
	checks, err := b.s.Audit(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		if !c.Pass && !strings.Contains(c.Name, "outbox") { // events are not published in these tests
			t.Errorf("audit FAIL [%s] %s: %s", c.Invariant, c.Name, c.Detail)
		}
	}
}

func TestFreshOrderWritesEverythingOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 10, 2)
	m := b.msg(1, 1)
	msgID := uuid.Must(uuid.NewV7())
	out, err := b.s.PlaceOrder(b.ctx, msgID, body(t, m))
	if err != nil || out.Code != flow.CodeOrderCreated || out.OrderID != m.OrderID || out.Duplicate {
		t.Fatalf("PlaceOrder = %+v, %v", out, err)
	}
	r, err := b.s.Inventory.GetReservation(b.ctx, b.pool, m.ReservationID)
	if err != nil || r.Status != inventory.StatusOrdered || r.OrderID != m.OrderID {
		t.Fatalf("reservation = %+v, %v", r, err)
	}
	for table, where := range map[string]string{
		"orders":           "order_id = $1",
		"order_items":      "order_id = $1",
		"inventory_ledger": "order_id = $1 AND idempotency_key LIKE 'ALLOCATE:%'",
		"event_outbox":     "dedup_key = 'ORDER_CREATED:' || $1::bigint::text",
	} {
		if n := b.count(t, table, where, m.OrderID); n != 1 {
			t.Errorf("%s rows = %d, want 1", table, n)
		}
	}
	if n := b.count(t, "consumer_inbox", "message_id = $1 AND result_code = $2", msgID, flow.CodeOrderCreated); n != 1 {
		t.Errorf("inbox rows = %d, want 1 with the result", n)
	}
	if got := b.allocated(t); got != 1 {
		t.Errorf("allocated = %d, want 1", got)
	}

	// The same delivery again: the inbox answers, nothing is written.
	out, err = b.s.PlaceOrder(b.ctx, msgID, body(t, m))
	if err != nil || !out.Duplicate {
		t.Fatalf("redelivery = %+v, %v; want a duplicate", out, err)
	}
	// The same reservation under a new message id: the existing order.
	msgID2 := uuid.Must(uuid.NewV7())
	out, err = b.s.PlaceOrder(b.ctx, msgID2, body(t, m))
	if err != nil || out.Code != flow.CodeOrderAlready || out.OrderID != m.OrderID {
		t.Fatalf("re-sent reservation = %+v, %v; want %s", out, err, flow.CodeOrderAlready)
	}
	if n := b.count(t, "orders", "true"); n != 1 {
		t.Errorf("orders = %d, want 1", n)
	}
	if got := b.allocated(t); got != 1 {
		t.Errorf("allocated = %d after redeliveries, want 1", got)
	}
	if n := b.count(t, "consumer_inbox", "true"); n != 2 {
		t.Errorf("inbox rows = %d, want 2 (two message ids)", n)
	}
	b.auditClean(t)
}

func TestUserAlreadyOrderedRejectsAndCompensates(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 10, 1)
	first := b.msg(5, 0)
	if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, first)); err != nil || out.Code != flow.CodeOrderCreated {
		t.Fatalf("first order: %+v %v", out, err)
	}
	// A front door that lost its one-per-user set lets the buyer through again.
	second := b.msg(5, 0)
	out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, second))
	if err != nil || out.Code != flow.CodeUserAlreadyOrdered || out.OrderID != first.OrderID {
		t.Fatalf("second order = %+v, %v; want %s naming the first order", out, err, flow.CodeUserAlreadyOrdered)
	}
	r, err := b.s.Inventory.GetReservation(b.ctx, b.pool, second.ReservationID)
	if err != nil || r.Status != inventory.StatusRejected || r.FailureCode != flow.CodeUserAlreadyOrdered {
		t.Fatalf("second reservation = %+v, %v; want REJECTED", r, err)
	}
	if n := b.count(t, "event_outbox", "tag = $1 AND aggregate_id = $2", flow.TagFrontDoorRelease, second.ReservationID.String()); n != 1 {
		t.Errorf("compensation events = %d, want 1", n)
	}
	if got := b.allocated(t); got != 1 {
		t.Errorf("allocated = %d, want 1 (the rejected order took nothing)", got)
	}
	if n := b.count(t, "orders", "true"); n != 1 {
		t.Errorf("orders = %d, want 1", n)
	}
	b.auditClean(t)
}

func TestSoldOutInPostgresRejectsAndCompensates(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 1, 1)
	if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, b.msg(1, 0))); err != nil || out.Code != flow.CodeOrderCreated {
		t.Fatalf("first order: %+v %v", out, err)
	}
	// The front door believed there was a second unit; PostgreSQL refuses it.
	m := b.msg(2, 0)
	out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, m))
	if err != nil || out.Code != flow.CodeSoldOut || out.OrderID != 0 {
		t.Fatalf("second buyer = %+v, %v; want %s", out, err, flow.CodeSoldOut)
	}
	if n := b.count(t, "orders", "user_id = 2"); n != 0 {
		t.Errorf("the sold-out buyer has %d orders (the savepoint should have removed it)", n)
	}
	r, err := b.s.Inventory.GetReservation(b.ctx, b.pool, m.ReservationID)
	if err != nil || r.Status != inventory.StatusRejected || r.FailureCode != flow.CodeSoldOut {
		t.Fatalf("reservation = %+v, %v; want REJECTED/%s", r, err, flow.CodeSoldOut)
	}
	if n := b.count(t, "event_outbox", "tag = $1", flow.TagFrontDoorRelease); n != 1 {
		t.Errorf("compensation events = %d, want 1", n)
	}
	if n := b.count(t, "event_outbox", "tag = $1", flow.TagOrderCreated); n != 1 {
		t.Errorf("ORDER_CREATED events = %d, want 1 (none for the rejected one)", n)
	}
	// Redelivered, the rejection is answered from the inbox; re-sent under a
	// new id, from the reservation: rejected earlier (counted once, by the
	// message that rejected it), for the reason recorded then.
	if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, m)); err != nil ||
		out.Code != flow.CodeReservationRejected || out.Reason != flow.CodeSoldOut {
		t.Errorf("re-sent rejected reservation = %+v, %v; want %s/%s", out, err, flow.CodeReservationRejected, flow.CodeSoldOut)
	}
	b.auditClean(t)
}

func TestPoisonMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 5, 1)
	if _, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), []byte("{not json")); !errors.Is(err, flow.ErrPoison) {
		t.Errorf("undecodable body: %v, want ErrPoison", err)
	}
	m := b.msg(1, 0)
	id := uuid.Must(uuid.NewV7())
	if _, err := b.s.PlaceOrder(b.ctx, id, body(t, m)); err != nil {
		t.Fatal(err)
	}
	changed := m
	changed.UserID = 2 // same message id, other content
	if _, err := b.s.PlaceOrder(b.ctx, id, body(t, changed)); !errors.Is(err, flow.ErrPoison) {
		t.Errorf("same message id with another body: %v, want ErrPoison", err)
	}
	bad := b.msg(0, 0) // invalid: user 0
	if _, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, bad)); !errors.Is(err, flow.ErrPoison) {
		t.Errorf("invalid message: %v, want ErrPoison", err)
	}
	if n := b.count(t, "orders", "true"); n != 1 {
		t.Errorf("orders = %d, want 1", n)
	}
	if n := b.count(t, "consumer_inbox", "true"); n != 1 {
		t.Errorf("inbox rows = %d, want 1 (poison writes nothing)", n)
	}
}

func TestConcurrentDuplicateDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 100, 4)
	const msgs, copies = 20, 10
	var created, dup, already, failed atomic.Int64
	var wg sync.WaitGroup
	for i := range msgs {
		m := b.msg(int64(i+1), int16(i%4))
		id := uuid.Must(uuid.NewV7())
		raw := body(t, m)
		for c := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msgID := id
				if c == copies-1 {
					msgID = uuid.Must(uuid.NewV7()) // and one re-send under a new id
				}
				out, err := b.s.PlaceOrder(b.ctx, msgID, raw)
				switch {
				case err != nil:
					failed.Add(1) // redelivered by a real queue: done again below
					if _, err := b.s.PlaceOrder(b.ctx, msgID, raw); err != nil {
						t.Errorf("redelivery failed too: %v", err)
					}
				case out.Duplicate:
					dup.Add(1)
				case out.Code == flow.CodeOrderCreated:
					created.Add(1)
				case out.Code == flow.CodeOrderAlready:
					already.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	if created.Load() != msgs {
		t.Errorf("created = %d, want %d (dup %d, already %d, failed %d)", created.Load(), msgs, dup.Load(), already.Load(), failed.Load())
	}
	if n := b.count(t, "orders", "true"); n != msgs {
		t.Errorf("orders = %d, want %d", n, msgs)
	}
	if got := b.allocated(t); got != msgs {
		t.Errorf("allocated = %d, want %d", got, msgs)
	}
	b.auditClean(t)
}

// TestFreshOrderTakesOneRoundTrip: a fresh order is one batch (BEGIN, its
// statements, COMMIT). A duplicate aborts that batch (one round trip), rolls
// it back (one) and is answered by the general transaction: its first
// statement, with BEGIN unless Config.EagerBegin, then ROLLBACK.
func TestFreshOrderTakesOneRoundTrip(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		for _, eager := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/EagerBegin=%v", mode, eager), func(t *testing.T) {
				t.Parallel()
				var rt roundtrip.Counter
				pool := pgtest.NewPool(t, func(c *pgxpool.Config) {
					c.MaxConns = 1
					c.ConnConfig.Tracer = &rt
					c.ConnConfig.DefaultQueryExecMode = mode
				})
				b := setup(t, pool, 100, 4)
				s, err := flow.New(b.ctx, pool, flow.Config{Schema: b.s.Schema, Item: b.s.Item, EagerBegin: eager})
				if err != nil {
					t.Fatal(err)
				}
				b.s = s
				wantDup := int64(4)
				if eager {
					wantDup = 5
				}
				// Warm up the statement cache: a fresh order and a duplicate.
				warm, warmID := b.msg(99, 0), uuid.Must(uuid.NewV7())
				for range 2 {
					if _, err := b.s.PlaceOrder(b.ctx, warmID, body(t, warm)); err != nil {
						t.Fatal(err)
					}
				}
				for i := range 5 {
					m := b.msg(int64(i+1), int16(i%4))
					id := uuid.Must(uuid.NewV7())
					rt.Store(0)
					if out, err := b.s.PlaceOrder(b.ctx, id, body(t, m)); err != nil || out.Code != flow.CodeOrderCreated {
						t.Fatalf("PlaceOrder: %+v %v", out, err)
					}
					if got := rt.Load(); got != 1 {
						t.Errorf("fresh order took %d round trips, want 1", got)
					}
					rt.Store(0)
					if out, err := b.s.PlaceOrder(b.ctx, id, body(t, m)); err != nil || !out.Duplicate {
						t.Fatalf("redelivery: %+v %v", out, err)
					}
					if got := rt.Load(); got != wantDup {
						t.Errorf("duplicate took %d round trips, want %d", got, wantDup)
					}
				}
				b.auditClean(t)
			})
		}
	}
}

// TestRejectionsTakeFewRoundTrips: a message for a sold-out bucket aborts
// the fresh batch (one round trip), rolls it back (one) and records the
// rejection as one more batch (one): the reservation REJECTED with
// SOLD_OUT, the inbox result, the front-door release event. A redelivery
// is answered from the inbox. A buyer's second order takes one more round
// trip (the read of the buyer's order, which the result names).
func TestRejectionsTakeFewRoundTrips(t *testing.T) {
	t.Parallel()
	var rt roundtrip.Counter
	pool := pgtest.NewPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.Tracer = &rt
	})
	b := setup(t, pool, 1, 1)
	first := b.msg(1, 0)
	if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, first)); err != nil || out.Code != flow.CodeOrderCreated {
		t.Fatalf("the last unit: %+v %v", out, err)
	}
	m, id := b.msg(2, 0), uuid.Must(uuid.NewV7())
	rt.Store(0)
	out, err := b.s.PlaceOrder(b.ctx, id, body(t, m))
	if err != nil || out.Code != flow.CodeSoldOut {
		t.Fatalf("sold out: %+v %v", out, err)
	}
	if got := rt.Load(); got != 3 {
		t.Errorf("sold out took %d round trips, want 3", got)
	}
	r, err := b.s.Inventory.GetReservation(b.ctx, pool, m.ReservationID)
	if err != nil || r.Status != inventory.StatusRejected || r.FailureCode != flow.CodeSoldOut {
		t.Fatalf("reservation = %+v, %v; want REJECTED with SOLD_OUT", r, err)
	}
	if n := b.count(t, "event_outbox", "tag = 'FRONTDOOR_RELEASE'"); n != 1 {
		t.Errorf("%d front-door release events, want 1", n)
	}
	again, err := b.s.PlaceOrder(b.ctx, id, body(t, m))
	if err != nil || !again.Duplicate || again.Code != flow.CodeSoldOut {
		t.Fatalf("redelivery: %+v %v", again, err)
	}

	// The first buyer again, with a new request and reservation (twice:
	// the first prepares the buyer's read).
	if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, b.msg(1, 0))); err != nil || out.Code != flow.CodeUserAlreadyOrdered {
		t.Fatalf("second order of a buyer: %+v %v", out, err)
	}
	second := b.msg(1, 0)
	rt.Store(0)
	out, err = b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, second))
	if err != nil || out.Code != flow.CodeUserAlreadyOrdered || out.OrderID != first.OrderID {
		t.Fatalf("second order of a buyer: %+v %v; want USER_ALREADY_ORDERED naming order %d", out, err, first.OrderID)
	}
	if got := rt.Load(); got != 4 {
		t.Errorf("second order of a buyer took %d round trips, want 4", got)
	}
	r, err = b.s.Inventory.GetReservation(b.ctx, pool, second.ReservationID)
	if err != nil || r.Status != inventory.StatusRejected || r.FailureCode != flow.CodeUserAlreadyOrdered {
		t.Fatalf("reservation = %+v, %v; want REJECTED with USER_ALREADY_ORDERED", r, err)
	}
	b.auditClean(t)
}

func TestPaymentCancelAndRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 10, 2)
	paid, unpaid := b.msg(1, 0), b.msg(2, 1)
	unpaid.OrderExpireAt = time.Now().Add(-time.Second) // already expired
	for _, m := range []flow.OrderMessage{paid, unpaid} {
		if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, m)); err != nil || out.Code != flow.CodeOrderCreated {
			t.Fatalf("PlaceOrder: %+v %v", out, err)
		}
	}
	p := flow.Payment{OrderID: paid.OrderID, ProviderTradeNo: "T1", CallbackID: "C1", Amount: paid.UnitPrice, Currency: "CNY"}
	if res, err := b.s.Pay(b.ctx, p); err != nil || res.Kind != order.PaymentPaid {
		t.Fatalf("Pay = %+v, %v", res, err)
	}
	if res, err := b.s.Pay(b.ctx, p); err != nil || res.Kind != order.PaymentDuplicate {
		t.Fatalf("second callback = %+v, %v; want duplicate", res, err)
	}
	n, err := b.s.CancelExpired(b.ctx, 100)
	if err != nil || n != 1 {
		t.Fatalf("CancelExpired = %d, %v; want 1 (the paid order is not due)", n, err)
	}
	if n, err := b.s.CancelExpired(b.ctx, 100); err != nil || n != 0 {
		t.Fatalf("second sweep = %d, %v; want 0", n, err)
	}
	r, err := b.s.Inventory.GetReservation(b.ctx, b.pool, unpaid.ReservationID)
	if err != nil || r.Status != inventory.StatusReleasePending {
		t.Fatalf("cancelled order's reservation = %+v, %v; want RELEASE_PENDING (front-door release in flight)", r, err)
	}
	releaseApplied(t, b, unpaid.ReservationID)
	if got := b.allocated(t); got != 1 {
		t.Errorf("allocated = %d, want 1 (the cancel released its unit)", got)
	}
	late := flow.Payment{OrderID: unpaid.OrderID, ProviderTradeNo: "T2", Amount: unpaid.UnitPrice, Currency: "CNY"}
	res, err := b.s.Pay(b.ctx, late)
	if err != nil || res.Kind != order.PaymentAfterCancel || res.Refund == nil {
		t.Fatalf("late payment = %+v, %v; want a refund", res, err)
	}
	for tag, want := range map[string]int64{flow.TagOrderCreated: 2, flow.TagOrderPaid: 1, flow.TagFrontDoorRelease: 1, flow.TagRefundRequested: 1} {
		if n := b.count(t, "event_outbox", "tag = $1", tag); n != want {
			t.Errorf("%s events = %d, want %d", tag, n, want)
		}
	}
	b.auditClean(t)
}

// TestCommitOutcomeUnknownResolvedByRedelivery cuts the connection right
// after the server executed COMMIT: the consumer cannot know, nacks, and
// the redelivery finds the order through the inbox.
func TestCommitOutcomeUnknownResolvedByRedelivery(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	px, err := faultproxy.Start(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	pool := pgtest.NewPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.Host, c.ConnConfig.Port = "127.0.0.1", uint16(px.Port())
		c.ConnConfig.TLSConfig, c.ConnConfig.Fallbacks = nil, nil
	})
	b := setup(t, pool, 10, 1)
	// Warm the connections' statement caches, so the measured order is
	// one batch ended by one Sync.
	for i := range 3 {
		if _, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, b.msg(int64(100+i), 0))); err != nil {
			t.Fatal(err)
		}
	}
	var armed atomic.Bool
	px.SetRule(func(m faultproxy.Message) faultproxy.Action {
		if m.Type == 'S' && armed.CompareAndSwap(true, false) {
			return faultproxy.CutAfter // the server runs the whole batch, COMMIT included
		}
		return faultproxy.Forward
	})
	armed.Store(true)
	m := b.msg(1, 0)
	id := uuid.Must(uuid.NewV7())
	_, err = b.s.PlaceOrder(b.ctx, id, body(t, m))
	if !pgtx.Classify(err).OutcomeUnknown {
		t.Fatalf("PlaceOrder through a cut COMMIT = %v, want ErrCommitOutcomeUnknown", err)
	}
	out, err := b.s.PlaceOrder(b.ctx, id, body(t, m)) // the queue redelivers
	if err != nil || !out.Duplicate {
		t.Fatalf("redelivery = %+v, %v; want a duplicate: the first attempt committed", out, err)
	}
	if got := b.allocated(t); got != 4 {
		t.Errorf("allocated = %d, want 4 (three warm-up orders and this one, once)", got)
	}
	b.auditClean(t)
}

// TestRoundTripsPerMode counts the round trips of a fresh order on plain
// PostgreSQL, with the default statements and with those of Config.Citus:
// the one-batch path takes one round trip in both modes; the
// step-by-step transaction takes one more with Config.Citus (order.Create
// inserts the order and its item in two).
func TestRoundTripsPerMode(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		citus                bool
		oneBatch, stepByStep int64
	}{{false, 1, 9}, {true, 1, 10}} {
		t.Run(map[bool]string{false: "default", true: "citus"}[c.citus], func(t *testing.T) {
			t.Parallel()
			var rt roundtrip.Counter
			pool := pgtest.NewPool(t, func(cfg *pgxpool.Config) {
				cfg.MaxConns = 1
				cfg.ConnConfig.Tracer = &rt
			})
			b := setupMode(t, pool, 10, 1, c.citus)
			// Once each first: pgx prepares each statement on its first use.
			for _, place := range []func(context.Context, uuid.UUID, []byte) (flow.Outcome, error){b.s.PlaceOrder, b.s.PlaceOrderStepByStep} {
				if out, err := place(b.ctx, uuid.Must(uuid.NewV7()), body(t, b.msg(ids.Next(), 0))); err != nil || out.Code != flow.CodeOrderCreated {
					t.Fatalf("warm-up: %+v %v", out, err)
				}
			}
			for _, p := range []struct {
				name  string
				place func(context.Context, uuid.UUID, []byte) (flow.Outcome, error)
				want  int64
			}{{"one batch", b.s.PlaceOrder, c.oneBatch}, {"step by step", b.s.PlaceOrderStepByStep, c.stepByStep}} {
				rt.Store(0)
				if out, err := p.place(b.ctx, uuid.Must(uuid.NewV7()), body(t, b.msg(ids.Next(), 0))); err != nil || out.Code != flow.CodeOrderCreated {
					t.Fatalf("%s: %+v %v", p.name, out, err)
				}
				if got := rt.Load(); got != p.want {
					t.Errorf("%s: a fresh order took %d round trips, want %d", p.name, got, p.want)
				}
			}
			b.auditClean(t)
		})
	}
}
