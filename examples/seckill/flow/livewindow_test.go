package flow_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/examples/seckill/flow"
)

// liveScope is what a check's detail says in a live audit that read only
// the rows changed since its window's start.
const liveScope = "(live: rows changed since "

// TestAuditLiveWindow: the live audit reads the whole history once, then
// only what changed since its last passing run. A change made by a
// transaction that began before a live audit and committed after it is
// checked by the next one (the watermark waits for running transactions);
// a failing live audit keeps its window, so the next fails the same way;
// a ledger row written since the ledger watermark is checked against its
// order; and damage to history that changed nothing since (an old order's
// event deleted) is left to the audit at rest, which finds it.
func TestAuditLiveWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 20, 2)
	var orders []int64
	for u := int64(1); u <= 4; u++ {
		m := b.msg(u, int16(u%2))
		if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, m)); err != nil || out.Code != flow.CodeOrderCreated {
			t.Fatalf("order %d: %+v, %v", u, out, err)
		}
		orders = append(orders, m.OrderID)
	}
	const created = "event completeness: every live order has its ORDER_CREATED event"
	live := func(what string, wantPass bool) []flow.Check {
		t.Helper()
		cs, err := b.s.AuditLive(b.ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if flow.Passed(cs) != wantPass {
			for _, c := range cs {
				t.Logf("%s: pass %v [%s] %s: %s", what, c.Pass, c.Invariant, c.Name, c.Detail)
			}
			t.Fatalf("%s: passed %v, want %v", what, flow.Passed(cs), wantPass)
		}
		return cs
	}
	scoped := func(cs []flow.Check) bool {
		for _, c := range cs {
			if strings.Contains(c.Detail, liveScope) {
				return true
			}
		}
		return false
	}
	if cs := live("first live audit", true); scoped(cs) {
		t.Fatalf("the first live audit read a window, want the whole history: %+v", cs)
	}
	if cs := live("second live audit", true); !scoped(cs) {
		t.Fatalf("the second live audit read the whole history, want the rows changed since the first: %+v", cs)
	}

	// A lost ORDER_CREATED event of an order stamped as created now, in a
	// transaction left open across two passing live audits.
	late, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(b.ctx)
	if _, err := late.Exec(b.ctx, fmtSchema(`DELETE FROM %s.event_outbox WHERE dedup_key = 'ORDER_CREATED:' || $1::bigint::text`, b.s.Schema), orders[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := late.Exec(b.ctx, fmtSchema(`UPDATE %s.orders SET created_at = statement_timestamp(), updated_at = statement_timestamp() WHERE order_id = $1`, b.s.Schema), orders[1]); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		// More than the watermark's margin passes between the write and
		// each audit: only the open transaction holds the watermark back.
		time.Sleep(1200 * time.Millisecond)
		if cs := live("live audit with the transaction open", true); !scoped(cs) {
			t.Fatalf("live audit %d with the transaction open read the whole history", i)
		}
	}
	if err := late.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	for _, what := range []string{"live audit after the late commit", "the next live audit (a failing one keeps its window)"} {
		cs := live(what, false)
		if c := check(t, cs, created); c.Pass || !strings.Contains(c.Detail, "1 without the event") || !strings.Contains(c.Detail, liveScope) {
			t.Errorf("%s: %+v, want 1 order without its event, in the window", what, c)
		}
		time.Sleep(1200 * time.Millisecond)
	}

	// Damage to history: the order's stamps go back an hour, out of the
	// window, with every other row. The live audit passes and moves on;
	// the audit at rest still finds the lost event.
	for _, q := range []string{
		`UPDATE %s.orders SET created_at = created_at - interval '1 hour', updated_at = updated_at - interval '1 hour'`,
		`UPDATE %s.inventory_reservation SET created_at = created_at - interval '1 hour', updated_at = updated_at - interval '1 hour'`,
	} {
		if _, err := b.pool.Exec(b.ctx, fmtSchema(q, b.s.Schema)); err != nil {
			t.Fatal(err)
		}
	}
	if c := check(t, live("live audit with the damage in history", true), created); !strings.Contains(c.Detail, "0 live orders, 0 without") {
		t.Errorf("live audit with the damage in history: %+v, want no order in the window", c)
	}
	atRest, err := b.s.Audit(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := check(t, atRest, created); c.Pass || !strings.Contains(c.Detail, "1 without the event") {
		t.Errorf("audit at rest: %+v, want the lost event found", c)
	}

	// A RELEASE ledger row, written now, for a live order that does not
	// change: the ledger side of the window finds it.
	if tag, err := b.pool.Exec(b.ctx, fmtSchema(`INSERT INTO %[1]s.inventory_ledger (idempotency_key, reservation_id, order_id, source_message_id, activity_id,
			sku_id, user_id, inventory_bucket, ledger_type, available_delta, allocated_delta,
			before_available, after_available, before_allocated, after_allocated, reason)
		SELECT 'RELEASE:' || reservation_id::text, reservation_id, order_id, source_message_id, activity_id,
			sku_id, user_id, inventory_bucket, 20, 1, -1, after_available, after_available + 1, after_allocated, after_allocated - 1, 'INJECTED'
		  FROM %[1]s.inventory_ledger WHERE order_id = $1 AND ledger_type = 10`, b.s.Schema), orders[2]); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("inject a RELEASE row: %v, %d rows", err, tag.RowsAffected())
	}
	cs := live("live audit after a RELEASE row of a live order", false)
	if c := check(t, cs, "allocated stock = live orders"); c.Pass || !strings.Contains(c.Detail, "1 without their order's state") {
		t.Errorf("live audit after a RELEASE row of a live order: %+v, want it found", c)
	}
}

// check returns the check whose name starts with prefix.
func check(t *testing.T, cs []flow.Check, prefix string) flow.Check {
	t.Helper()
	for _, c := range cs {
		if strings.HasPrefix(c.Name, prefix) {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", prefix, cs)
	return flow.Check{}
}
