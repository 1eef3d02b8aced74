package flow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
)

// publishAll marks every event of the schema SENT, as relays would.
func (b bundle) publishAll(t *testing.T) {
	t.Helper()
	for {
		c, err := b.s.Outbox.ClaimOutboxBatch(b.ctx, b.pool, "relay", 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Messages) == 0 {
			return
		}
		if _, err := b.s.Outbox.Mark(b.ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: claimIDs(c)}); err != nil {
			t.Fatal(err)
		}
	}
}

// passes fails the test unless every audit check, at rest and live (the
// live one moves the inventory audit checkpoint and replays from it), and
// every reconciliation difference of s passes.
func passes(t *testing.T, b bundle, what string) {
	t.Helper()
	checks, err := b.s.Audit(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	live, err := b.s.AuditLive(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	checks = append(checks, live...)
	for _, c := range checks {
		if !c.Pass {
			t.Errorf("%s: audit FAIL [%s] %s: %s", what, c.Invariant, c.Name, c.Detail)
		}
	}
	rec, err := b.s.Reconcile(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rec.Differences {
		if d.Class != flow.ClassMatch {
			t.Errorf("%s: reconciliation: %s: %d vs %d, %s", what, d.Name, d.Have, d.Expected, d.Class)
		}
	}
	if t.Failed() {
		t.Logf("%s:\n%s", what, rec)
	}
}

// An ended activity moves whole to an archive schema in small batches
// while another activity of the same schema keeps selling: afterwards
// nothing of it is left in the active tables, its audit and its
// reconciliation pass on the archive, the other activity's pass on the
// active schema, and a second run moves nothing. Events and inbox rows
// the retention jobs archived earlier move too, from the history tables. An activity still on
// sale is refused with an *ActivityOpenError and nothing moves.
func TestArchiveActivityWhileAnotherSells(t *testing.T) {
	t.Parallel()
	a := setup(t, nil, 6, 1) // activity 7
	other, err := flow.New(a.ctx, a.pool, flow.Config{Schema: a.s.Schema, Item: flow.SKU{
		ActivityID: 8, SKUID: 80, Title: "watch", UnitPrice: 999, Currency: "CNY", Stock: 1000, Buckets: 4,
	}})
	if err != nil {
		t.Fatal(err)
	}
	o := bundle{ctx: a.ctx, s: other, pool: a.pool}

	// Activity 7: five paid orders, one cancelled after expiry (its
	// release applied, its late payment refunded), one more paid order
	// on the unit that freed, two sold out.
	place := func(m flow.OrderMessage, want string) {
		t.Helper()
		if out, err := a.s.PlaceOrder(a.ctx, uuid.Must(uuid.NewV7()), body(t, m)); err != nil || out.Code != want {
			t.Fatalf("order of user %d: %+v, %v; want %s", m.UserID, out, err, want)
		}
	}
	pay := func(m flow.OrderMessage, trade string) order.PaymentResult {
		t.Helper()
		res, err := a.s.Pay(a.ctx, flow.Payment{OrderID: m.OrderID, ProviderTradeNo: trade, Amount: m.UnitPrice, Currency: "CNY"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for u := int64(1); u <= 5; u++ {
		m := a.msg(u, 0)
		place(m, flow.CodeOrderCreated)
		pay(m, fmt.Sprint("T", u))
	}
	late := a.msg(6, 0)
	late.OrderExpireAt = time.Now().Add(-time.Second)
	place(late, flow.CodeOrderCreated)
	if n, err := a.s.CancelExpired(a.ctx, 10); err != nil || n != 1 {
		t.Fatalf("CancelExpired = %d, %v", n, err)
	}
	if err := pgx.BeginFunc(a.ctx, a.pool, func(tx pgx.Tx) error {
		_, err := a.s.FrontDoorReleased(a.ctx, tx, late.ReservationID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if res := pay(late, "T6"); res.Refund == nil {
		t.Fatalf("late payment: %+v, want a refund", res)
	}
	m7 := a.msg(7, 0)
	place(m7, flow.CodeOrderCreated)
	pay(m7, "T7")
	place(a.msg(8, 0), flow.CodeSoldOut)
	place(a.msg(9, 0), flow.CodeSoldOut)
	a.publishAll(t)
	// The retention jobs ran before the activity ended: its events and
	// inbox rows so far are in the history tables, and move from there.
	if n, err := a.s.Outbox.ArchiveSent(a.ctx, a.pool, time.Now().Add(time.Hour), 0); err != nil || n != 17 {
		t.Fatalf("ArchiveSent = %d, %v; want the 17 events so far", n, err)
	}
	if n, err := a.s.Inbox.Archive(a.ctx, a.pool, time.Now().Add(time.Hour), 0); err != nil || n != 9 {
		t.Fatalf("Inbox.Archive = %d, %v; want the 9 order messages", n, err)
	}

	schema := a.s.Schema + "_arch" // dropped with the test's schema below
	_, err = a.s.ArchiveActivity(a.ctx, schema, 2)
	var open *flow.ActivityOpenError
	if !errors.Is(err, flow.ErrActivityOpen) || !errors.As(err, &open) || open.Selling != 1 {
		t.Fatalf("ArchiveActivity on sale = %v, want an *ActivityOpenError with the SKU selling", err)
	}
	if n := a.count(t, "orders", "activity_id = 7"); n != 7 {
		t.Fatalf("%d orders of activity 7 after the refusal, want 7", n)
	}
	t.Cleanup(func() {
		_, _ = a.pool.Exec(a.ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	if _, err := a.s.SetSaleStatus(a.ctx, inventory.SaleEnded, time.Now().Add(-time.Hour), time.Now(), "ops", "sold out"); err != nil {
		t.Fatal(err)
	}
	a.publishAll(t)
	passes(t, a, "activity 7 before the archive")

	// Activity 8 sells while activity 7 moves.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var sold int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for u := int64(1); ; u++ {
			select {
			case <-stop:
				return
			default:
			}
			m := o.msg(u, int16(u%4))
			out, err := other.PlaceOrder(o.ctx, uuid.Must(uuid.NewV7()), body(t, m))
			if err != nil || out.Code != flow.CodeOrderCreated {
				t.Errorf("activity 8, user %d: %+v, %v", u, out, err)
				return
			}
			sold++
		}
	}()
	res, err := a.s.ArchiveActivity(a.ctx, schema, 2)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	// Events: 7 ORDER_CREATED, 6 ORDER_PAID, 3 FRONTDOOR_RELEASE (a
	// cancel, two sold out), 1 REFUND_REQUESTED, 1 SALE_STATUS_CHANGED.
	// Ledger: 1 PROVISION, 7 ALLOCATE, 1 RELEASE.
	want := flow.ActivityArchived{Orders: 7, Reservations: 9, Ledger: 9, Events: 18, Inbox: 9, SKUs: 1}
	if res != want {
		t.Fatalf("ArchiveActivity moved %+v, want %+v", res, want)
	}
	for table, where := range map[string]string{
		"orders": "activity_id = 7", "order_items": "activity_id = 7", "inventory_reservation": "activity_id = 7",
		"inventory_ledger": "activity_id = 7", "inventory_sku": "activity_id = 7", "sku_inventory": "activity_id = 7",
		"inventory_sale_log": "activity_id = 7",
		"payment_record":     "provider_trade_no IN ('T1', 'T2', 'T3', 'T4', 'T5', 'T6', 'T7')",
		"event_outbox":       "aggregate_type = 'SKU' AND aggregate_id = '7:70' OR dedup_key = 'ORDER_CREATED:" + fmt.Sprint(m7.OrderID) + "'",
	} {
		if n := a.count(t, table, where); n != 0 {
			t.Errorf("%d rows of activity 7 left in %s", n, table)
		}
	}
	arch, err := flow.New(a.ctx, a.pool, flow.Config{Schema: schema, Item: a.s.Item})
	if err != nil {
		t.Fatal(err)
	}
	ab := bundle{ctx: a.ctx, s: arch, pool: a.pool}
	if n := ab.count(t, "orders", "true"); n != 7 {
		t.Fatalf("%d orders in the archive, want 7", n)
	}
	passes(t, ab, "activity 7 on the archive")
	o.publishAll(t)
	passes(t, o, fmt.Sprintf("activity 8 after %d orders during the archive", sold))
	if n := o.count(t, "orders", "activity_id = 8"); n != sold {
		t.Fatalf("%d orders of activity 8, want %d", n, sold)
	}
	if res, err := a.s.ArchiveActivity(a.ctx, schema, 2); err != nil || res != (flow.ActivityArchived{}) {
		t.Fatalf("second ArchiveActivity = %+v, %v; want nothing moved", res, err)
	}
}

// An activity archive interrupted inside a batch (its statement waiting
// after its DELETEs, the context then cancelled) moved whole batches only;
// run again, it moves the rest: every order is in the archive exactly
// once, none is left, and the audit passes on the archive.
func TestArchiveActivityInterruptedThenResumed(t *testing.T) {
	t.Parallel()
	a := setup(t, nil, 6, 1)
	var last flow.OrderMessage
	for u := int64(1); u <= 6; u++ {
		m := a.msg(u, 0)
		if out, err := a.s.PlaceOrder(a.ctx, uuid.Must(uuid.NewV7()), body(t, m)); err != nil || out.Code != flow.CodeOrderCreated {
			t.Fatalf("order %d: %+v, %v", u, out, err)
		}
		if _, err := a.s.Pay(a.ctx, flow.Payment{OrderID: m.OrderID, ProviderTradeNo: fmt.Sprint("T", u), Amount: m.UnitPrice, Currency: "CNY"}); err != nil {
			t.Fatal(err)
		}
		last = m
	}
	if _, err := a.s.SetSaleStatus(a.ctx, inventory.SaleEnded, time.Now().Add(-time.Hour), time.Now(), "ops", "sold out"); err != nil {
		t.Fatal(err)
	}
	a.publishAll(t)
	schema := a.s.Schema + "_arch"
	t.Cleanup(func() {
		_, _ = a.pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	if _, err := migrate.Apply(a.ctx, a.pool, schema, inbox.Migrations, outbox.Migrations, inventory.Migrations, order.Migrations); err != nil {
		t.Fatal(err)
	}
	// An uncommitted copy of the last order in the archive makes the batch
	// that moves it wait inside its statement.
	blocker, err := a.pool.Begin(a.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(a.ctx)
	if _, err := blocker.Exec(a.ctx, `INSERT INTO `+pgx.Identifier{schema, "orders"}.Sanitize()+` SELECT * FROM `+
		pgx.Identifier{a.s.Schema, "orders"}.Sanitize()+` WHERE order_id = $1`, last.OrderID); err != nil {
		t.Fatal(err)
	}
	var blockerPID int
	if err := blocker.QueryRow(a.ctx, `SELECT pg_backend_pid()`).Scan(&blockerPID); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(a.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := a.s.ArchiveActivity(ctx, schema, 2); done <- err }()
	for { // until the archive waits for the blocker
		var waiting bool
		if err := a.pool.QueryRow(a.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`, blockerPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case <-a.ctx.Done():
			t.Fatal("the archive never waited for the blocker")
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("interrupted ArchiveActivity = %v, want context.Canceled", err)
		}
	case <-a.ctx.Done():
		t.Fatal("the interrupted archive did not return")
	}
	if err := blocker.Rollback(a.ctx); err != nil {
		t.Fatal(err)
	}
	// The server may finish the waiting batch once the blocker ends, if it
	// has not seen the cancel yet: wait until no statement of the archive
	// runs, then resume.
	for {
		var busy bool
		if err := a.pool.QueryRow(a.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%kept_archived%' AND pid <> pg_backend_pid())`).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if !busy {
			break
		}
		select {
		case <-a.ctx.Done():
			t.Fatal("the interrupted statement never ended")
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The batches before the one that waited committed; the one that
	// waited committed too when the server finished it before it saw the
	// cancel (then no order is left here, and the resumed archive below
	// must still move the rest of the activity once and only once).
	moved := bundle{ctx: a.ctx, s: a.s, pool: a.pool}
	if n := moved.count(t, "orders", "true"); n == 6 {
		t.Fatalf("%d orders left in the active schema after the interruption, want the batches before the wait moved", n)
	}
	if _, err := a.s.ArchiveActivity(a.ctx, schema, 2); err != nil {
		t.Fatal(err)
	}
	if n := a.count(t, "orders", "true"); n != 0 {
		t.Fatalf("%d orders left after the resumed archive", n)
	}
	arch, err := flow.New(a.ctx, a.pool, flow.Config{Schema: schema, Item: a.s.Item})
	if err != nil {
		t.Fatal(err)
	}
	ab := bundle{ctx: a.ctx, s: arch, pool: a.pool}
	if n := ab.count(t, "orders", "true"); n != 6 {
		t.Fatalf("%d orders in the archive, want 6", n)
	}
	passes(t, ab, "the archive after an interrupted and resumed archive")
}
