//go:build citus

package cituscheck_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// TestOneBatchAbortsOnCitus sends every one-batch helper with pgtx.RunBatch
// to a distributed schema, first where it commits, then where it aborts:
// each abort must name its call and match its sentinel with errors.Is, with
// the SQLSTATE of its condition raised on the worker (the refusal function
// of the inventory migrations runs there, in the statement Citus routes
// whole), and no transaction may commit with two phases.
func TestOneBatchAbortsOnCitus(t *testing.T) {
	k := setup(t)
	const act, sku = 2, 2002
	now := time.Now()
	newRes := func(user int64, bucket int16, orderID int64) inventory.NewReservation {
		return inventory.NewReservation{
			Request:    seckill.Request{ReservationID: uuid.Must(uuid.NewV7()), RequestID: uuid.Must(uuid.NewV7()), MessageID: uuid.Must(uuid.NewV7()), ActivityID: act, SKUID: sku, UserID: user, Bucket: bucket, Quantity: 1, OrderID: orderID},
			Ordered:    orderID > 0,
			ReservedAt: now,
			ExpiresAt:  now.Add(time.Hour),
		}
	}
	alloc := func(r inventory.NewReservation, orderID int64) inventory.Allocation {
		return inventory.Allocation{
			Request: seckill.Request{ReservationID: r.ReservationID, ActivityID: act, SKUID: sku, Bucket: r.Bucket, Quantity: 1, UserID: r.UserID, OrderID: orderID, MessageID: r.MessageID},
		}
	}
	newOrder := func(r inventory.NewReservation, orderID int64) order.NewOrder {
		return order.NewOrder{Request: seckill.Request{OrderID: orderID, RequestID: r.RequestID,
			ReservationID: r.ReservationID, MessageID: r.MessageID, ActivityID: act, SKUID: sku, UserID: r.UserID,
			Bucket: r.Bucket, Quantity: 1}, OrderNo: fmt.Sprintf("A%d", orderID), UnitPrice: 100, ExpireAt: now.Add(time.Hour), SKUTitle: "phone"}
	}
	ev := func(key string) outbox.Event {
		return outbox.Event{Topic: "orders", Tag: "ORDER_CREATED", AggregateType: "order", AggregateID: key,
			Payload: json.RawMessage(`{}`), DedupKey: key}
	}
	msg := inbox.Message{Group: "orders", MessageID: uuid.Must(uuid.NewV7()), Topic: "orders", PayloadHash: inbox.HashPayload([]byte("m"))}
	if err := pgtx.RunInTx(k.ctx, k.pool, pgtx.Options{}, func(tx pgx.Tx) error {
		_, err := k.inv.Provision(k.ctx, tx, inventory.SKU{ActivityID: act, SKUID: sku, Stock: 2, Buckets: 2})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	run := func(queue func(b *pgx.Batch) error) error {
		var b pgx.Batch
		if err := queue(&b); err != nil {
			t.Fatal(err)
		}
		return pgtx.RunBatch(k.ctx, k.pool, pgtx.Options{}, &b)
	}
	buy := func(r inventory.NewReservation, orderID int64, m inbox.Message, key string) func(b *pgx.Batch) error {
		return func(b *pgx.Batch) error {
			return errors.Join(k.in.QueueClaimMessage(b, withResult(m, inbox.Result{Code: "ORDER_CREATED"}), nil, pgtx.Abort),
				k.inv.QueueAcquireReservation(b, r, nil, pgtx.Abort),
				k.ord.QueueCreate(b, newOrder(r, orderID), nil, pgtx.Abort),
				k.out.QueueEnqueue(b, []outbox.Event{ev(key)}, nil, pgtx.Abort),
				k.inv.QueueAllocateBucket(b, alloc(r, orderID), nil, pgtx.Abort))
		}
	}
	r1, r2 := newRes(1, 0, 201), newRes(2, 1, 202)
	m2 := msg
	m2.MessageID = uuid.Must(uuid.NewV7())
	type abort struct {
		name     string
		prepare  func() // before the count of two-phase commits, when set
		queue    func(b *pgx.Batch) error
		call     string // the prefix of the call's name
		sentinel error
		code     string
	}
	fresh := func(user int64, bucket int16, orderID int64) (inventory.NewReservation, inbox.Message) {
		m := msg
		m.MessageID = uuid.Must(uuid.NewV7())
		return newRes(user, bucket, orderID), m
	}
	r3, m3 := fresh(3, 0, 203) // bucket 0 is sold out after r1
	r4, m4 := fresh(1, 1, 204) // buyer 1 ordered already
	r5, m5 := fresh(5, 1, 205)
	r5.ReservationID = r2.ReservationID // the reservation exists
	r6 := newRes(6, 0, 0)
	r7 := newRes(7, 1, 0)
	steps := []struct {
		name  string
		queue func(b *pgx.Batch) error
	}{
		{"order batch (inbox, reservation, order, outbox, allocation)", buy(r1, 201, msg, "a1")},
		{"order batch, another bucket", buy(r2, 202, m2, "a2")},
		{"inventory.QueueCheckSoldOut + QueueAcquireReservation (rejected)", func(b *pgx.Batch) error {
			rejected := r6
			rejected.FailureCode = "SOLD_OUT"
			return errors.Join(k.inv.QueueCheckSoldOut(b, alloc(r6, 0), pgtx.Abort), k.inv.QueueAcquireReservation(b, rejected, nil, pgtx.Abort))
		}},
		{"inventory.QueueReleaseStock (abort)", func(b *pgx.Batch) error {
			return k.inv.QueueReleaseStock(b, inventory.StockRelease{Request: alloc(r2, 202).Request}, nil, pgtx.Abort)
		}},
	}
	aborts := []abort{
		{"inbox duplicate", nil, buy(newRes(9, 1, 209), 209, msg, "a9"), "inbox.Store.QueueClaimMessage(", inbox.ErrDuplicate, "23505"},
		{"reservation exists", nil, buy(r5, 205, m5, "a5"), "inventory.Store.QueueAcquireReservation(", inventory.ErrReservationConflict, "23505"},
		{"buyer already ordered", nil, buy(r4, 204, m4, "a4"), "order.Store.QueueCreate(", order.ErrUserAlreadyOrdered, "23505"},
		{"dedup key exists", nil, func(b *pgx.Batch) error { return k.out.QueueEnqueue(b, []outbox.Event{ev("a1")}, nil, pgtx.Abort) },
			"outbox.Store.QueueEnqueue(", outbox.ErrDuplicate, "23505"},
		{"sold out", nil, buy(r3, 203, m3, "a3"), "inventory.Store.QueueAllocateBucket(", inventory.ErrSoldOut, "SK001"},
		{"allocated twice", nil, func(b *pgx.Batch) error { return k.inv.QueueAllocateBucket(b, alloc(r1, 201), nil, pgtx.Abort) },
			"inventory.Store.QueueAllocateBucket(", inventory.ErrAlreadyApplied, "23505"},
		{"allocation mismatch (the reservation REJECTED)", nil, func(b *pgx.Batch) error {
			return k.inv.QueueAllocateBucket(b, alloc(r6, 206), nil, pgtx.Abort)
		}, "inventory.Store.QueueAllocateBucket(", inventory.ErrAllocationMismatch, "SK005"},
		{"not sold out", nil, func(b *pgx.Batch) error { return k.inv.QueueCheckSoldOut(b, alloc(r7, 0), pgtx.Abort) },
			"inventory.Store.QueueCheckSoldOut(", inventory.ErrNotSoldOut, "SK008"},
		{"released twice", nil, func(b *pgx.Batch) error {
			return k.inv.QueueReleaseStock(b, inventory.StockRelease{Request: (alloc(r2, 202)).Request, Reason: (alloc(r2, 202)).Reason}, nil, pgtx.Abort)
		},
			"inventory.Store.QueueReleaseStock(", inventory.ErrAlreadyApplied, "23505"},
		{"nothing to release", nil, func(b *pgx.Batch) error {
			return k.inv.QueueReleaseStock(b, inventory.StockRelease{Request: (alloc(r7, 0)).Request, Reason: (alloc(r7, 0)).Reason}, nil, pgtx.Abort)
		},
			"inventory.Store.QueueReleaseStock(", inventory.ErrNotAllocated, "SK006"},
		{"sale not on", func() {
			if err := pgtx.RunInTx(k.ctx, k.pool, pgtx.Options{}, func(tx pgx.Tx) error {
				_, err := k.inv.SetSaleStatus(k.ctx, tx, inventory.SaleChange{ActivityID: act, SKUID: sku, To: inventory.SalePaused,
					Operator: "check", Reason: "pause"})
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}, func(b *pgx.Batch) error {
			r, m := fresh(8, 1, 208)
			return buy(r, 208, m, "a8")(b)
		}, "inventory.Store.QueueAllocateBucket(", inventory.ErrNotOnSale, "SK002"},
	}
	var report strings.Builder
	for _, s := range steps {
		before := k.twoPhase(t)
		err := run(s.queue)
		n := k.twoPhase(t) - before
		fmt.Fprintf(&report, "  %-70s two-phase commits: %d\n", s.name, n)
		if err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
		if n != 0 {
			t.Errorf("%s: committed with two phases on Citus", s.name)
		}
	}
	for _, a := range aborts {
		if a.prepare != nil {
			a.prepare()
		}
		before := k.twoPhase(t)
		err := run(a.queue)
		n := k.twoPhase(t) - before
		fmt.Fprintf(&report, "  abort: %-63s two-phase commits: %d  %v\n", a.name, n, err)
		var se *pgtx.StatementError
		var pgErr *pgconn.PgError
		switch {
		case !errors.As(err, &se) || !strings.HasPrefix(se.Call, a.call) || !pgtx.Classify(err).NotCommitted:
			t.Errorf("%s: %v, want the call %s… to abort the batch", a.name, err, a.call)
		case !errors.Is(err, a.sentinel) || !errors.As(err, &pgErr) || pgErr.Code != a.code:
			t.Errorf("%s: %v, want %v (SQLSTATE %s)", a.name, err, a.sentinel, a.code)
		}
		if n != 0 {
			t.Errorf("%s: two-phase commit records on an abort", a.name)
		}
	}
	t.Logf("one-batch helpers with pgtx.RunBatch, in distributed schema:\n%s", report.String())
}

// TestCheckOnCitus: on a distributed schema, each store's Check passes
// with Config.Citus and reports a *migrate.CitusMismatchError without it;
// a store on a schema without its tables gets a *migrate.NotMigratedError
// from Check and from its first call.
func TestCheckOnCitus(t *testing.T) {
	k := setup(t)
	schema := k.out.Schema()
	type checker interface {
		Check(ctx context.Context, db pgtx.Querier) error
	}
	with := map[string]checker{"inbox": k.in, "outbox": k.out, "inventory": k.inv, "order": k.ord}
	in, _ := inbox.New(inbox.Config{Schema: schema})
	out, _ := outbox.New(outbox.Config{Schema: schema})
	inv, _ := inventory.New(inventory.Config{Schema: schema})
	ord, _ := order.New(order.Config{Schema: schema})
	without := map[string]checker{"inbox": in, "outbox": out, "inventory": inv, "order": ord}
	for name, c := range with {
		if err := c.Check(k.ctx, k.pool); err != nil {
			t.Errorf("%s with Config.Citus: %v", name, err)
		}
		err := without[name].Check(k.ctx, k.pool)
		var cm *migrate.CitusMismatchError
		if !errors.Is(err, migrate.ErrCitusMismatch) || !errors.As(err, &cm) || cm.Option || !cm.Citus || !cm.Distributed ||
			cm.Component != name || !strings.Contains(err.Error(), "Config.Citus is off: set it") {
			t.Errorf("%s without Config.Citus: %v, want a *migrate.CitusMismatchError", name, err)
		}
		t.Logf("%s without Config.Citus: %v", name, err)
	}
	other, _ := inventory.New(inventory.Config{Schema: "cituscheck_not_migrated", Citus: true})
	if err := other.Check(k.ctx, k.pool); !errors.Is(err, migrate.ErrNotMigrated) {
		t.Errorf("Check of a schema without tables: %v, want ErrNotMigrated", err)
	}
	_, err := other.GetBucket(k.ctx, k.pool, 1, 1, 0)
	if !errors.Is(err, migrate.ErrNotMigrated) {
		t.Errorf("GetBucket on a schema without tables: %v, want ErrNotMigrated", err)
	}
	t.Logf("a schema without tables: %v", err)
}
