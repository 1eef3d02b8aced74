package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/frontdoor"
	"github.com/seckillkit/seckill/examples/seckill/reconcile"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// TestReconcileRecent: the operator view's reconciliation during the sale
// (ReconcileRecent, reconcile.RunWindow) passes where the whole one
// passes, reconciles each order in the window of the check after it was
// created (the windows move on only after a check that passes), and
// fails, naming the class and the bucket or window, on each damage the
// whole one fails on: a unit held at the front door with nothing in
// flight (explained while a click is in flight), a counter moved behind
// the ledger's back, a live order the front door gave back, an event
// lost from the outbox. On both stacks: the in-memory stand-ins, and
// Redis and JetStream.
func TestReconcileRecent(t *testing.T) {
	for _, stack := range []string{stackMemory, stackReal} {
		t.Run(stack, func(t *testing.T) {
			t.Parallel()
			testReconcileRecent(t, stack)
		})
	}
}

func testReconcileRecent(t *testing.T, stack string) {
	ctx := pgtest.Context(t, 3*time.Minute)
	pool := pgtest.Pool(t)
	cfg := smallConfig(t)
	cfg.Stock, cfg.Buckets, cfg.FrontDrift = 8, 2, 0
	useStack(t, &cfg, stack, true)
	s, err := newService(ctx, pool, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	s.recent.mu.Lock()
	s.recent.lag = 0 // the windows end at the database's now: an order is in the next check's
	s.recent.mu.Unlock()
	users := int64(0)
	place := func() (frontdoor.Reservation, int64) {
		t.Helper()
		users++
		return placeDirect(t, ctx, s, users)
	}
	check := func(step string) *reconcile.Result {
		t.Helper()
		rec, err := s.ReconcileRecent(ctx)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return rec
	}
	windowOrders := func(rec *reconcile.Result, i int) (n int64) {
		if len(rec.Windows) != 2 {
			t.Fatalf("%d windows, want the newest and the settled one", len(rec.Windows))
		}
		for _, o := range rec.Windows[i].Orders {
			n += o.Orders
		}
		return n
	}
	cursor := func() time.Time {
		s.recent.mu.Lock()
		defer s.recent.mu.Unlock()
		return s.recent.from
	}
	// fails checks that rec does not pass and names class unexplained,
	// count n, at a place that contains where.
	fails := func(step string, rec *reconcile.Result, class, where string, n int64) {
		t.Helper()
		var printed strings.Builder
		rec.Print(&printed)
		for _, d := range rec.Differences {
			if d.Class == class && !d.Explained && d.Count == n && strings.Contains(d.Where, where) {
				if rec.Passed() || !strings.Contains(printed.String(), "FAIL      "+class) {
					t.Fatalf("%s: passed, or the printed result does not say FAIL:\n%s", step, printed.String())
				}
				return
			}
		}
		t.Fatalf("%s: no unexplained %q of %d at %q:\n%s", step, class, n, where, printed.String())
	}
	// wholeFails is the whole reconciliation's unexplained differences,
	// but for the order messages': the test places its orders without
	// the broker.
	wholeFails := func() (out []reconcile.Difference) {
		t.Helper()
		whole, err := s.reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range whole.Differences {
			if !d.Explained && d.Where != "order messages" {
				out = append(out, d)
			}
		}
		return out
	}
	passes := func(step string, rec *reconcile.Result) {
		t.Helper()
		if !rec.Passed() {
			var printed strings.Builder
			rec.Print(&printed)
			t.Fatalf("%s: the recent reconciliation fails:\n%s", step, printed.String())
		}
	}

	for range 3 {
		place()
	}
	began := cursor()
	rec := check("three orders")
	passes("three orders", rec)
	if n, settled := windowOrders(rec, 0), windowOrders(rec, 1); n != 3 || settled != 0 {
		t.Fatalf("newest window: %d orders, settled window: %d; want 3 and 0", n, settled)
	}
	if span := rec.Windows[0].From.Sub(rec.Windows[1].From); span != cfg.OrderTTL+settleAfter || !rec.Windows[0].From.Equal(began) {
		t.Fatalf("windows %v – %v and %v – %v: want the newest from %v and the settled one %v earlier",
			rec.Windows[0].From, rec.Windows[0].To, rec.Windows[1].From, rec.Windows[1].To, began, cfg.OrderTTL+settleAfter)
	}
	if rec.Counters.FrontHeld != 3 || rec.Counters.InFlight != 0 || rec.Counters.Outbox.Pending != 3 {
		t.Fatalf("counters %+v: want 3 held, none in flight, 3 events waiting (no relay runs)", *rec.Counters)
	}
	if fails := wholeFails(); len(fails) > 0 {
		t.Fatalf("the whole reconciliation fails: %+v", fails)
	}
	if !cursor().Equal(rec.Windows[0].To) {
		t.Fatalf("after a passing check the next window starts at %v, want %v", cursor(), rec.Windows[0].To)
	}
	place()
	if rec = check("one more order"); windowOrders(rec, 0) != 1 {
		t.Fatalf("the next check's newest window holds %d orders, want the one placed since", windowOrders(rec, 0))
	}
	passes("one more order", rec)

	// An order cancelled at its timeout: its unit is RELEASE_PENDING in
	// PostgreSQL and still held at the front door (no relay runs here to
	// publish the release): in flight, explained.
	s.orderTTL = -time.Second
	expired, _ := place()
	s.orderTTL = cfg.OrderTTL
	if n, err := s.CancelExpired(ctx, 10); err != nil || n != 1 {
		t.Fatalf("cancel the expired order: %d, %v", n, err)
	}
	rec = check("release pending")
	passes("release pending", rec)
	if rec.Counters.InFlight != 1 {
		t.Fatalf("in flight %d, want the RELEASE_PENDING reservation %v", rec.Counters.InFlight, expired.ReservationID)
	}
	// Its release consumer applies the release (counts cannot tell a unit
	// held in flight from a live order the front door does not hold in the
	// same bucket: the checks below need nothing in flight).
	if err := s.releaseConsumer()(ctx, releaseEvent(t, ctx, pool, cfg.Schema, expired.ReservationID)); err != nil {
		t.Fatal(err)
	}
	if rec = check("release applied"); rec.Counters.InFlight != 0 {
		t.Fatalf("in flight %d once the release is applied, want 0", rec.Counters.InFlight)
	}
	passes("release applied", rec)

	// A unit held at the front door whose order message never comes: in
	// flight while a click is, unexplained once nothing is. The windows
	// stay put while a check fails.
	users++
	lost, err := s.front.Reserve(ctx, users)
	if err != nil {
		t.Fatal(err)
	}
	failedAt := cursor()
	fails("held without an order", check("held without an order"), "held without a live order, beyond the reservations in flight (order message lost, release never applied, or a counter moved behind the ledger's back: Run names each reservation)", fmt.Sprintf("bucket %d", lost.Bucket), 1)
	if !cursor().Equal(failedAt) {
		t.Fatalf("a failing check moved the windows on: %v, was %v", cursor(), failedAt)
	}
	s.inFlight.Add(1)
	passes("held while its click is in flight", check("held while its click is in flight"))
	s.inFlight.Add(-1)
	if got, err := s.front.Release(ctx, lost.ReservationID, users); err != nil || got != frontdoor.Released {
		t.Fatalf("undo: %v, %v", got, err)
	}
	passes("undone", check("undone"))

	// A unit moved from allocated to available behind the ledger's back.
	schema := pgx.Identifier{cfg.Schema}.Sanitize()
	var moved int16
	if err := pool.QueryRow(ctx, `UPDATE `+schema+`.sku_inventory SET available_stock = available_stock + 1, allocated_stock = allocated_stock - 1
		WHERE ctid = (SELECT ctid FROM `+schema+`.sku_inventory WHERE allocated_stock > 0 ORDER BY bucket_no LIMIT 1) RETURNING bucket_no`).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	fails("counter moved", check("counter moved"), "held without a live order, beyond the reservations in flight (order message lost, release never applied, or a counter moved behind the ledger's back: Run names each reservation)", fmt.Sprintf("bucket %d", moved), 1)
	if len(wholeFails()) == 0 {
		t.Fatal("the whole reconciliation passed the moved counter")
	}
	if _, err := pool.Exec(ctx, `UPDATE `+schema+`.sku_inventory SET available_stock = available_stock - 1, allocated_stock = allocated_stock + 1
		WHERE bucket_no = $1 AND activity_id = $2 AND sku_id = $3`, moved, s.Item.ActivityID, s.Item.SKUID); err != nil {
		t.Fatal(err)
	}
	passes("counter put back", check("counter put back"))

	// A live order whose unit the front door gave back.
	given, _ := place()
	if got, err := s.front.Release(ctx, given.ReservationID, 0); err != nil || got != frontdoor.Released {
		t.Fatalf("release a live order's unit: %v, %v", got, err)
	}
	fails("live order given back", check("live order given back"), "live order unknown to the front door", fmt.Sprintf("bucket %d", given.Bucket), 1)

	// An event lost from the outbox: named in the window of its order.
	_, id := place()
	if tag, err := pool.Exec(ctx, `DELETE FROM `+schema+`.event_outbox WHERE dedup_key = $1`, fmt.Sprintf("%s:%d", flow.TagOrderCreated, id)); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("delete the event: %v, %d rows", err, tag.RowsAffected())
	}
	fails("event lost", check("event lost"), flow.ClassEventsMissing, "window ", -1)

	// An event the relay gave up on.
	if tag, err := pool.Exec(ctx, `UPDATE `+schema+`.event_outbox SET status = 40
		WHERE event_id = (SELECT event_id FROM `+schema+`.event_outbox WHERE status = 0 ORDER BY created_at LIMIT 1)`); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("make an event DEAD: %v, %d rows", err, tag.RowsAffected())
	}
	fails("event dead", check("event dead"), "event DEAD in the outbox", "outbox", 1)
}

// TestReconcileRecentAcrossRestart: ReconcileRecent's windows start where
// the last check that passed ended, in a restarted service too (on the
// same Redis, NATS and schema): an order created after that check and
// before the restart is in the restarted service's first newest window,
// not skipped because the new process started after it; the stored
// cursor never moves back.
func TestReconcileRecentAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	pool := pgtest.Pool(t)
	cfg := smallConfig(t)
	cfg.Stock, cfg.Buckets, cfg.FrontDrift = 8, 2, 0
	useStack(t, &cfg, stackReal, true)
	start := func() *service {
		t.Helper()
		s, err := newService(ctx, pool, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.recent.mu.Lock()
		s.recent.lag = 0 // the windows end at the database's now
		s.recent.mu.Unlock()
		return s
	}
	newest := func(s *service, step string) flow.Reconciliation {
		t.Helper()
		rec, err := s.ReconcileRecent(ctx)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if !rec.Passed() || len(rec.Windows) != 2 {
			var printed strings.Builder
			rec.Print(&printed)
			t.Fatalf("%s: the recent reconciliation fails, or has not two windows:\n%s", step, printed.String())
		}
		return rec.Windows[0]
	}
	orders := func(w flow.Reconciliation) (n int64) {
		for _, o := range w.Orders {
			n += o.Orders
		}
		return n
	}

	s1 := start()
	placeDirect(t, ctx, s1, 1)
	placeDirect(t, ctx, s1, 2)
	first := newest(s1, "before the restart")
	if n := orders(first); n != 2 {
		t.Fatalf("before the restart: %d orders in the newest window, want 2", n)
	}
	placeDirect(t, ctx, s1, 3) // after the last check: only the next one sees it
	s1.close()

	s2 := start()
	defer s2.close()
	s2.recent.mu.Lock()
	from := s2.recent.from
	s2.recent.mu.Unlock()
	if !from.Equal(first.To) {
		t.Fatalf("the restarted service's windows start at %v, want %v, where the last passing check ended", from, first.To)
	}
	w := newest(s2, "after the restart")
	if n := orders(w); !w.From.Equal(first.To) || n != 1 {
		t.Fatalf("after the restart: the newest window %v – %v holds %d orders; want it from %v, with the order placed before the restart", w.From, w.To, n, first.To)
	}
	// Another instance that checked less far does not move it back.
	if err := s1.saveRecentCursor(ctx, first.To); err != nil {
		t.Fatal(err)
	}
	var stored time.Time
	if err := pool.QueryRow(ctx, `SELECT checked_to FROM `+s2.cursorTable()+` WHERE name = 'recent'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !stored.Equal(w.To) {
		t.Fatalf("stored cursor %v after an earlier one was saved, want %v, the furthest", stored, w.To)
	}
}
