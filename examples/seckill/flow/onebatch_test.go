package flow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/faultproxy"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// generated are the columns whose values the server makes up per row or
// per statement (times, sequence numbers, random ids) and row versions
// (which count updates: the step-by-step transaction inserts a
// reservation PENDING_DB and updates it to ORDERED, the one-batch path
// inserts it ORDERED): dump leaves them out.
var generated = map[string]bool{
	"created_at": true, "updated_at": true, "processed_at": true, "ordered_at": true, "released_at": true,
	"changed_at": true, "available_at": true, "ledger_id": true, "event_id": true, "seq": true, "version": true,
	"id": true, "applied_at": true, "advanced_at": true,
}

// dump returns every row of every table in schema as JSON without the
// generated columns (and the event payloads' times), sorted.
func dump(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) map[string][]string {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, table := range tables {
		rows, err := pool.Query(ctx, `SELECT to_jsonb(t)::text FROM `+pgx.Identifier{schema, table}.Sanitize()+` AS t`)
		if err != nil {
			t.Fatal(err)
		}
		raws, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range raws {
			var row map[string]any
			if err := json.Unmarshal([]byte(raw), &row); err != nil {
				t.Fatal(err)
			}
			for k := range row {
				if generated[k] {
					delete(row, k)
				}
			}
			if p, ok := row["payload"].(map[string]any); ok {
				delete(p, "changed_at")
			}
			norm, _ := json.Marshal(row)
			out[table] = append(out[table], string(norm))
		}
		sort.Strings(out[table])
	}
	return out
}

// TestPipelinedAndStepByStepAgree runs PlaceOrder (the fresh order in one
// batch, the general transaction otherwise) and PlaceOrderStepByStep (the
// step-by-step transaction only) on the same messages, each in a schema of
// its own, and compares every outcome and, at the end, every row. The
// step-by-step transaction runs twice: with the default statements, and
// with those of Config.Citus (routed whole on Citus; here on plain
// PostgreSQL).
func TestPipelinedAndStepByStepAgree(t *testing.T) {
	t.Parallel()
	pipelined := setup(t, nil, 4, 2) // two buckets of two units
	stepwise := setup(t, pipelined.pool, 4, 2)
	routed := setupMode(t, pipelined.pool, 4, 2, true)

	type step struct {
		name  string
		id    uuid.UUID
		body  []byte
		pause bool // pause the sale before this message
	}
	now := time.Now()
	msg := func(user int64, bucket int16) flow.OrderMessage {
		return flow.OrderMessage{
			RequestID: uuid.Must(uuid.NewV7()), ReservationID: uuid.Must(uuid.NewV7()), OrderID: ids.Next(),
			ActivityID: 7, SKUID: 70, UserID: user, Bucket: bucket, UnitPrice: 1999, Currency: "CNY", SKUTitle: "phone",
			ReservedAt: now, ReservationTo: now.Add(15 * time.Minute), OrderExpireAt: now.Add(time.Hour),
		}
	}
	first, firstID := msg(1, 0), uuid.Must(uuid.NewV7())
	secondOfUser1 := msg(1, 1)
	soldOut := msg(4, 0)
	changed := first
	changed.SKUTitle = "another phone"
	badBucket := msg(8, 0)
	badBucket.Bucket = 300
	noTitle := msg(9, 1)
	noTitle.SKUTitle = ""
	steps := []step{
		{name: "fresh", id: firstID, body: body(t, first)},
		{name: "duplicate", id: firstID, body: body(t, first)},
		{name: "same reservation, new message id", id: uuid.Must(uuid.NewV7()), body: body(t, first)},
		{name: "buyer already ordered", id: uuid.Must(uuid.NewV7()), body: body(t, secondOfUser1)},
		{name: "fresh, last unit of bucket 0", id: uuid.Must(uuid.NewV7()), body: body(t, msg(2, 0))},
		{name: "sold out in PostgreSQL", id: uuid.Must(uuid.NewV7()), body: body(t, soldOut)},
		{name: "rejected reservation, new message id", id: uuid.Must(uuid.NewV7()), body: body(t, soldOut)},
		{name: "fresh in bucket 1", id: uuid.Must(uuid.NewV7()), body: body(t, msg(3, 1))},
		{name: "sale not on", id: uuid.Must(uuid.NewV7()), body: body(t, msg(5, 1)), pause: true},
		{name: "duplicate with another payload", id: firstID, body: body(t, changed)},
		{name: "bucket out of range", id: uuid.Must(uuid.NewV7()), body: body(t, badBucket)},
		{name: "no title", id: uuid.Must(uuid.NewV7()), body: body(t, noTitle)},
		{name: "undecodable", id: uuid.Must(uuid.NewV7()), body: []byte(`{"order_id":`)},
	}
	want := map[string]string{
		"fresh": flow.CodeOrderCreated, "duplicate": flow.CodeOrderCreated,
		"same reservation, new message id": flow.CodeOrderAlready, "buyer already ordered": flow.CodeUserAlreadyOrdered,
		"fresh, last unit of bucket 0": flow.CodeOrderCreated, "sold out in PostgreSQL": flow.CodeSoldOut,
		"rejected reservation, new message id": flow.CodeReservationRejected,
		"fresh in bucket 1":                    flow.CodeOrderCreated, "sale not on": flow.CodeNotOnSale,
	}
	for _, st := range steps {
		if st.pause {
			for _, b := range []bundle{pipelined, stepwise, routed} {
				if _, err := b.s.SetSaleStatus(b.ctx, inventory.SalePaused, time.Time{}, time.Time{}, "test", "pause"); err != nil {
					t.Fatal(err)
				}
			}
		}
		got1, err1 := pipelined.s.PlaceOrder(pipelined.ctx, st.id, st.body)
		got2, err2 := stepwise.s.PlaceOrderStepByStep(stepwise.ctx, st.id, st.body)
		if got1 != got2 || (err1 == nil) != (err2 == nil) || errors.Is(err1, flow.ErrPoison) != errors.Is(err2, flow.ErrPoison) {
			t.Errorf("%s: PlaceOrder = %+v, %v; PlaceOrderStepByStep = %+v, %v", st.name, got1, err1, got2, err2)
		}
		got3, err3 := routed.s.PlaceOrderStepByStep(routed.ctx, st.id, st.body)
		if got1 != got3 || (err1 == nil) != (err3 == nil) || errors.Is(err1, flow.ErrPoison) != errors.Is(err3, flow.ErrPoison) {
			t.Errorf("%s: PlaceOrder = %+v, %v; PlaceOrderStepByStep with Config.Citus = %+v, %v", st.name, got1, err1, got3, err3)
		}
		if code, ok := want[st.name]; ok && (err1 != nil || got1.Code != code) {
			t.Errorf("%s: %+v, %v; want %s", st.name, got1, err1, code)
		} else if !ok && !errors.Is(err1, flow.ErrPoison) {
			t.Errorf("%s: %+v, %v; want poison", st.name, got1, err1)
		}
	}
	d1 := dump(t, pipelined.ctx, pipelined.pool, pipelined.s.Schema)
	if len(d1["orders"]) != 3 || len(d1["consumer_inbox"]) != 8 {
		t.Errorf("%d orders and %d inbox rows, want 3 and 8", len(d1["orders"]), len(d1["consumer_inbox"]))
	}
	for _, other := range []bundle{stepwise, routed} {
		d2 := dump(t, other.ctx, other.pool, other.s.Schema)
		for table := range d1 {
			if !reflect.DeepEqual(d1[table], d2[table]) {
				t.Errorf("table %s differs:\npipelined:    %v\nstep by step: %v", table, d1[table], d2[table])
			}
		}
		if len(d1) != len(d2) {
			t.Errorf("tables: %d and %d", len(d1), len(d2))
		}
		other.auditClean(t)
	}
	pipelined.auditClean(t)
}

// waitForLockWaiters returns once n statements on b's schema wait for a
// lock.
func waitForLockWaiters(t *testing.T, b bundle, n int) {
	t.Helper()
	for {
		var got int
		if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, b.s.Schema).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		select {
		case <-b.ctx.Done():
			t.Fatalf("%d statements wait for a lock, want %d", got, n)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A second delivery arrives while the first one's batch is in flight
// (everything but the decrement done, its locks held) and then commits:
// the same message id waits for the first one's inbox row, the same
// reservation under a new message id for its reservation row. Either
// raises when the first commits, and the general transaction answers it.
func TestDeliveryArrivingWhileTheFirstCommits(t *testing.T) {
	t.Parallel()
	for _, newID := range []bool{false, true} {
		t.Run(fmt.Sprintf("new message id %v", newID), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			ctx := pgtest.Context(t, 3*time.Minute)
			s, err := flow.New(ctx, pool, flow.Config{Schema: pgtest.Schema(t), Item: flow.SKU{
				ActivityID: 7, SKUID: 70, Title: "phone", UnitPrice: 1999, Currency: "CNY", Stock: 10, Buckets: 1,
			}, TxOptions: pgtx.Options{LockTimeout: 2 * time.Minute}}) // the test holds locks; no timeout may end the wait
			if err != nil {
				t.Fatal(err)
			}
			b := bundle{ctx: ctx, s: s, pool: pool}
			m := b.msg(1, 0)
			id, id2 := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
			if !newID {
				id2 = id
			}

			// Hold the bucket row: the first delivery's batch stops at its
			// decrement, its inbox row, reservation and order written.
			hold, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = hold.Rollback(context.WithoutCancel(ctx)) }()
			if _, err := hold.Exec(ctx, `SELECT FROM `+pgx.Identifier{s.Schema, "sku_inventory"}.Sanitize()+` FOR UPDATE`); err != nil {
				t.Fatal(err)
			}
			type result struct {
				out flow.Outcome
				err error
			}
			first, second := make(chan result, 1), make(chan result, 1)
			go func() {
				out, err := s.PlaceOrder(ctx, id, body(t, m))
				first <- result{out, err}
			}()
			waitForLockWaiters(t, b, 1)
			go func() {
				out, err := s.PlaceOrder(ctx, id2, body(t, m))
				second <- result{out, err}
			}()
			waitForLockWaiters(t, b, 2)
			if err := hold.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r1, r2 := <-first, <-second
			if r1.err != nil || r1.out != (flow.Outcome{Code: flow.CodeOrderCreated, OrderID: m.OrderID}) {
				t.Fatalf("first delivery = %+v, %v; want a new order", r1.out, r1.err)
			}
			want := flow.Outcome{Code: flow.CodeOrderCreated, OrderID: m.OrderID, Duplicate: true}
			if newID {
				want = flow.Outcome{Code: flow.CodeOrderAlready, OrderID: m.OrderID}
			}
			if r2.err != nil || r2.out != want {
				t.Fatalf("second delivery = %+v, %v; want %+v", r2.out, r2.err, want)
			}
			if n := b.count(t, "orders", "true"); n != 1 {
				t.Errorf("orders = %d, want 1", n)
			}
			if got := b.allocated(t); got != 1 {
				t.Errorf("allocated = %d, want 1", got)
			}
			b.auditClean(t)
		})
	}
}

// The connection is cut before the server sees the fresh order's batch:
// the consumer cannot know that nothing happened, so it does not ack, and
// the redelivery creates the order, once.
func TestBatchCutBeforeTheServerIsRedeliveredFresh(t *testing.T) {
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
	for i := range 3 { // warm the statement caches: the batch is Bind/Execute messages only
		if _, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, b.msg(int64(100+i), 0))); err != nil {
			t.Fatal(err)
		}
	}
	var armed atomic.Bool
	px.SetRule(func(m faultproxy.Message) faultproxy.Action {
		if m.Type == 'B' && armed.CompareAndSwap(true, false) {
			return faultproxy.CutBefore // BEGIN's Bind, the batch's first message
		}
		return faultproxy.Forward
	})
	armed.Store(true)
	m := b.msg(1, 0)
	id := uuid.Must(uuid.NewV7())
	if _, err := b.s.PlaceOrder(b.ctx, id, body(t, m)); !pgtx.Classify(err).OutcomeUnknown {
		t.Fatalf("PlaceOrder through a cut before the batch = %v, want ErrCommitOutcomeUnknown (the client wrote it)", err)
	}
	if px.Cuts() != 1 {
		t.Fatalf("%d cuts, want 1", px.Cuts())
	}
	out, err := b.s.PlaceOrder(b.ctx, id, body(t, m))
	if err != nil || out != (flow.Outcome{Code: flow.CodeOrderCreated, OrderID: m.OrderID}) {
		t.Fatalf("redelivery = %+v, %v; want the new order: nothing had committed", out, err)
	}
	if got := b.allocated(t); got != 4 {
		t.Errorf("allocated = %d, want 4 (three warm-up orders and this one)", got)
	}
	b.auditClean(t)
}
