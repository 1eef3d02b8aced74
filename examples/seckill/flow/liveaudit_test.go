package flow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/outbox"
)

// liveFlow runs the whole flow at full speed until stop: placers (a third
// of the orders already due, so the canceller cancels them at once), a
// payer, the timeout canceller, and a relay that publishes every event and
// applies the front-door releases. Each loop counts its rounds.
type liveFlow struct {
	b                                       bundle
	stop                                    context.CancelFunc
	wg                                      sync.WaitGroup
	placed, paid, cancelled, relayed        atomic.Int64
	errMu                                   sync.Mutex
	errs                                    []error
	toPay                                   chan flow.OrderMessage
	placerRounds, cancelRounds, relayRounds atomic.Int64
}

func startLiveFlow(t *testing.T, b bundle) *liveFlow {
	t.Helper()
	ctx, stop := context.WithCancel(b.ctx)
	f := &liveFlow{b: b, stop: stop, toPay: make(chan flow.OrderMessage, 1024)}
	fail := func(err error) {
		if err != nil && ctx.Err() == nil {
			f.errMu.Lock()
			f.errs = append(f.errs, err)
			f.errMu.Unlock()
		}
	}
	var user atomic.Int64
	for range 3 {
		f.wg.Go(func() {
			for ctx.Err() == nil {
				u := user.Add(1)
				m := b.msg(u, int16(u%int64(4)))
				if u%3 == 0 {
					m.OrderExpireAt = time.Now().Add(-time.Second)
				}
				raw, err := json.Marshal(m)
				if err != nil {
					fail(err)
					return
				}
				out, err := b.s.PlaceOrder(ctx, uuid.Must(uuid.NewV7()), raw)
				fail(err)
				if err == nil && out.Code == flow.CodeOrderCreated {
					f.placed.Add(1)
					if u%3 != 0 {
						select {
						case f.toPay <- m:
						default:
						}
					}
				}
				f.placerRounds.Add(1)
			}
		})
	}
	f.wg.Go(func() { // the payer pays half of the orders it is handed
		n := 0
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-f.toPay:
				n++
				if n%2 == 0 {
					continue
				}
				_, err := b.s.Pay(ctx, flow.Payment{OrderID: m.OrderID, ProviderTradeNo: fmt.Sprintf("T%d", m.OrderID), Amount: m.UnitPrice, Currency: m.Currency})
				fail(err)
				if err == nil {
					f.paid.Add(1)
				}
			}
		}
	})
	f.wg.Go(func() { // the timeout canceller
		for ctx.Err() == nil {
			n, err := b.s.CancelExpired(ctx, 20)
			fail(err)
			f.cancelled.Add(int64(n))
			f.cancelRounds.Add(1)
		}
	})
	f.wg.Go(func() { // the relay, which also applies the front-door releases
		for ctx.Err() == nil {
			// A batch is never left half done (claimed, not marked SENT):
			// stop ends the loop between batches.
			n, err := relayOnce(b.ctx, b, "live-relay")
			fail(err)
			f.relayed.Add(int64(n))
			f.relayRounds.Add(1)
		}
	})
	return f
}

// relayOnce claims a batch of events, applies the front-door releases
// among them (as the release consumer does) and marks them SENT.
func relayOnce(ctx context.Context, b bundle, owner string) (int, error) {
	c, err := b.s.Outbox.ClaimOutboxBatch(ctx, b.pool, owner, 50)
	if err != nil || len(c.Messages) == 0 {
		return 0, err
	}
	for _, m := range c.Messages {
		if m.Tag != flow.TagFrontDoorRelease {
			continue
		}
		id, err := uuid.Parse(m.AggregateID)
		if err != nil {
			return 0, err
		}
		if err := pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			_, err := b.s.FrontDoorReleased(ctx, tx, id)
			return err
		}); err != nil {
			return 0, err
		}
	}
	_, err = b.s.Outbox.Mark(ctx, b.pool, outbox.Outcome{Lease: c.Lease, Sent: claimIDs(c)})
	return len(c.Messages), err
}

// halt stops the flow, waits for its loops and fails on any error they met.
func (f *liveFlow) halt(t *testing.T) {
	t.Helper()
	f.stop()
	f.wg.Wait()
	f.errMu.Lock()
	defer f.errMu.Unlock()
	for _, err := range f.errs {
		t.Errorf("flow: %v", err)
	}
}

// marks are the rounds each part of the flow (placers, canceller, relay)
// has done so far.
func (f *liveFlow) marks() [3]int64 {
	return [3]int64{f.placerRounds.Load(), f.cancelRounds.Load(), f.relayRounds.Load()}
}

// ranSince reports whether every part of the flow did a round since m.
func (f *liveFlow) ranSince(m [3]int64) bool {
	now := f.marks()
	return now[0] > m[0] && now[1] > m[1] && now[2] > m[2]
}

// TestAuditLiveNeverFailsAValidFlow audits (live) and reconciles in a loop
// while the whole flow runs at full speed: orders placed and rejected,
// paid, cancelled by the timeout canceller with their stock released,
// events published and front-door releases applied. No audit and no
// reconciliation may report a violation. Then violations injected while
// the flow still runs (a unit of stock without its ledger row, a lost
// ORDER_CREATED event) are reported by the next live audit and
// reconciliation, and by the audit at rest after the flow stopped.
func TestAuditLiveNeverFailsAValidFlow(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 120, 4)
	f := startLiveFlow(t, b)
	defer f.stop()

	const rounds = 15
	var overlapped, skipped, checks int
	var cs0 []flow.Check // the last live audit's checks
	for i := 0; i < rounds; i++ {
		before := f.marks()
		cs, err := b.s.AuditLive(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		cs0 = cs
		rec, err := b.s.Reconcile(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if f.ranSince(before) {
			overlapped++
		}
		for _, c := range cs {
			checks++
			if !c.Pass {
				t.Errorf("live audit %d: FAIL [%s] %s: %s", i, c.Invariant, c.Name, c.Detail)
			}
			if c.Skipped {
				skipped++
				if !c.AtRest || !strings.Contains(c.Detail, "only exact at rest") {
					t.Errorf("live audit %d: skipped check not marked at rest: %+v", i, c)
				}
			}
		}
		for _, d := range rec.Differences {
			if d.Class != flow.ClassMatch && d.Class != flow.ClassReleaseInFlight {
				t.Errorf("reconciliation %d: %s: %d vs %d: %s", i, d.Name, d.Have, d.Expected, d.Class)
			}
		}
		// Wait for every part of the flow to move on before the next
		// round, so that each round reads a different moment of the sale.
		for m := f.marks(); !f.ranSince(m); {
			if b.ctx.Err() != nil {
				t.Fatal("the flow stopped working")
			}
			time.Sleep(time.Millisecond)
		}
	}
	if overlapped == 0 {
		t.Error("no audit ran while every part of the flow was working: the test proves nothing")
	}
	// The live audits replayed the ledger from a checkpoint that moved
	// during the sale (CheckpointAudit before each).
	var watermark int64
	if err := b.pool.QueryRow(b.ctx, fmtSchema(`SELECT through_ledger_id FROM %s.inventory_audit_watermark`, b.s.Schema)).Scan(&watermark); err != nil || watermark == 0 {
		t.Errorf("inventory audit watermark %d (%v) after %d live audits: the checkpoint never moved", watermark, err, rounds)
	}
	incremental := false
	for _, c := range cs0 {
		incremental = incremental || strings.HasPrefix(c.Name, "ledger replay reproduces each bucket's counters (inventory audit, incremental")
	}
	if !incremental {
		t.Errorf("the live audit's ledger replay is not the incremental one: %+v", cs0)
	}
	t.Logf("%d live audits (%d overlapped the whole flow), %d checks, %d skipped; %d orders placed, %d paid, %d cancelled, %d events relayed",
		rounds, overlapped, checks, skipped, f.placed.Load(), f.paid.Load(), f.cancelled.Load(), f.relayed.Load())
	if f.placed.Load() == 0 || f.paid.Load() == 0 || f.cancelled.Load() == 0 || f.relayed.Load() == 0 {
		t.Fatalf("the flow did not run in full: %d placed, %d paid, %d cancelled, %d relayed",
			f.placed.Load(), f.paid.Load(), f.cancelled.Load(), f.relayed.Load())
	}

	// Three violations, injected while the flow runs: a unit of stock out
	// of nowhere (no ledger row), the lost ORDER_CREATED event of an order
	// stamped as created now (an order created without its event: the
	// live audit checks what changed since its last passing run), and the
	// lost ORDER_CREATED event of the first paid order, unchanged since
	// (damage to history: the reconciliation's counts and the audit at
	// rest find it; TestAuditLiveWindow shows the live audit passing over
	// it).
	if tag, err := b.pool.Exec(b.ctx, fmtSchema(`UPDATE %s.sku_inventory SET available_stock = available_stock + 1, total_stock = total_stock + 1
		WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = 0`, b.s.Schema), b.s.Item.ActivityID, b.s.Item.SKUID); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("inject stock: %v, %d rows", err, tag.RowsAffected())
	}
	if tag, err := b.pool.Exec(b.ctx, fmtSchema(`DELETE FROM %[1]s.event_outbox WHERE event_id = (
		SELECT e.event_id FROM %[1]s.event_outbox e JOIN %[1]s.orders o ON e.dedup_key = 'ORDER_CREATED:' || o.order_id::text
		WHERE o.status = 30 AND e.status = 20 ORDER BY o.updated_at LIMIT 1)`, b.s.Schema)); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("inject lost event: %v, %d rows", err, tag.RowsAffected())
	}
	if tag, err := b.pool.Exec(b.ctx, fmtSchema(`WITH gone AS (
		DELETE FROM %[1]s.event_outbox WHERE event_id = (
			SELECT e.event_id FROM %[1]s.event_outbox e JOIN %[1]s.orders o ON e.dedup_key = 'ORDER_CREATED:' || o.order_id::text
			WHERE o.status = 30 AND e.status = 20 ORDER BY o.updated_at DESC LIMIT 1)
		RETURNING aggregate_id)
		UPDATE %[1]s.orders SET created_at = statement_timestamp(), updated_at = statement_timestamp() WHERE order_id::text = (SELECT aggregate_id FROM gone)`, b.s.Schema)); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("inject lost event of a changed order: %v, %d rows", err, tag.RowsAffected())
	}
	wantFailed := []string{"per SKU: sum of bucket totals", "ledger replay reproduces each bucket's counters",
		"event completeness: every live order has its ORDER_CREATED event"}
	failedOnly := func(what string, cs []flow.Check) {
		t.Helper()
		for _, c := range cs {
			want := false
			for _, w := range wantFailed {
				want = want || strings.HasPrefix(c.Name, w)
			}
			if c.Pass == want {
				t.Errorf("%s after the injection: pass %v [%s] %s: %s", what, c.Pass, c.Invariant, c.Name, c.Detail)
			}
		}
	}
	rec, err := b.s.Reconcile(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := find(rec, flow.TagOrderCreated+" events vs the state changes that imply them"); d.Class != flow.ClassEventsMissing {
		t.Errorf("reconciliation after the lost event: %+v, want %s", d, flow.ClassEventsMissing)
	}
	cs, err := b.s.AuditLive(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	failedOnly("live audit", cs)
	if flow.Passed(cs) {
		t.Error("the live audit passed the broken stock and the lost event")
	}

	f.halt(t)
	for {
		n, err := relayOnce(b.ctx, b, "drain")
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	cs, err = b.s.Audit(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	failedOnly("audit at rest", cs)
}

// TestAuditAtRestOnlyCheck: an event waiting for its relay fails the audit
// at rest (as strict as ever) and is skipped, not failed, by the live
// audit, which says why; a DEAD event fails both. AuditTx refuses a
// transaction that would read several moments.
func TestAuditAtRestOnlyCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 3, 1)
	m := b.msg(1, 0)
	if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, m)); err != nil || out.Code != flow.CodeOrderCreated {
		t.Fatalf("order: %+v, %v", out, err)
	}
	get := func(cs []flow.Check, name string) flow.Check {
		t.Helper()
		for _, c := range cs {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no check %q", name)
		return flow.Check{}
	}
	const unpublished, dead = "no outbox event left unpublished", "no outbox event dead"
	atRest, err := b.s.Audit(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := get(atRest, unpublished); c.Pass || c.Skipped || !c.AtRest {
		t.Errorf("at rest with an event pending: %+v, want a failure", c)
	}
	live, err := b.s.AuditLive(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := get(live, unpublished); !c.Pass || !c.Skipped || !c.AtRest || !strings.Contains(c.Detail, "only exact at rest (1 in flight)") {
		t.Errorf("live with an event pending: %+v, want skipped, 1 in flight", c)
	}
	if !flow.Passed(live) {
		t.Errorf("live audit with only work in flight: %v", live)
	}
	for _, c := range live {
		if c.Name != unpublished && (c.Skipped || c.AtRest) {
			t.Errorf("an invariant of every snapshot was relaxed: %+v", c)
		}
	}

	if _, err := b.pool.Exec(b.ctx, fmtSchema(`UPDATE %s.event_outbox SET status = 40`, b.s.Schema)); err != nil {
		t.Fatal(err)
	}
	for _, audit := range []func(context.Context) ([]flow.Check, error){b.s.Audit, b.s.AuditLive} {
		cs, err := audit(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c := get(cs, dead); c.Pass {
			t.Errorf("a DEAD event passed: %+v", c)
		}
	}

	err = pgx.BeginTxFunc(b.ctx, b.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		_, err := b.s.AuditTx(b.ctx, tx, flow.AuditOptions{})
		return err
	})
	if !errors.Is(err, flow.ErrAuditSnapshot) {
		t.Errorf("AuditTx in a Read Committed transaction: %v, want ErrAuditSnapshot", err)
	}
	err = pgx.BeginTxFunc(b.ctx, b.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		_, err := b.s.ReconcileTx(b.ctx, tx)
		return err
	})
	if !errors.Is(err, flow.ErrAuditSnapshot) {
		t.Errorf("ReconcileTx in a Read Committed transaction: %v, want ErrAuditSnapshot", err)
	}
}
