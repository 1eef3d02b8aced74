package flow_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
)

// testdata is the repository's shared SQL (the invariant assertions and
// event completeness), three levels up from this package.
const testdata = "../../../testdata"

// runTestdata runs one query file of testdata with the schema filled in and
// returns how many rows (violations) it found.
func (b bundle) runTestdata(t *testing.T, file string) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testdata, file))
	if err != nil {
		t.Fatal(err)
	}
	sql := strings.ReplaceAll(string(raw), "{schema}", pgx.Identifier{b.s.Schema}.Sanitize())
	rows, err := b.pool.Query(b.ctx, sql)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return n
}

func testdataFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testdata, dir, "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no SQL in testdata/%s: %v", dir, err)
	}
	for i, f := range files {
		files[i] = filepath.Join(dir, filepath.Base(f))
	}
	return files
}

// Every state change of the flow that promises an event has it: after a
// run with every kind of change, the invariant assertions and the event
// completeness queries find nothing, and the audit passes. Then each kind
// of event is lost in turn (deleted, as a lost enqueue would leave it):
// its query finds exactly that change, and the audit's invariant-7 check
// for it fails, which no other check would notice.
func TestEventCompleteness(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 2, 1)
	created, paid, cancelled, soldOut := b.msg(1, 0), b.msg(2, 0), b.msg(3, 0), b.msg(4, 0)
	cancelled.OrderExpireAt = time.Now().Add(-time.Second)
	for i, m := range []flow.OrderMessage{paid, cancelled, created, soldOut} {
		want := flow.CodeOrderCreated
		if i == 3 {
			want = flow.CodeSoldOut
		}
		if i == 2 {
			// The cancel below frees the unit this order takes.
			if n, err := b.s.CancelExpired(b.ctx, 10); err != nil || n != 1 {
				t.Fatalf("CancelExpired = %d, %v", n, err)
			}
		}
		if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, m)); err != nil || out.Code != want {
			t.Fatalf("order %d: %+v, %v; want %s", i, out, err, want)
		}
	}
	if res, err := b.s.Pay(b.ctx, flow.Payment{OrderID: paid.OrderID, ProviderTradeNo: "T1", Amount: paid.UnitPrice, Currency: "CNY"}); err != nil || res.Kind != order.PaymentPaid {
		t.Fatalf("pay: %+v, %v", res, err)
	}
	late, err := b.s.Pay(b.ctx, flow.Payment{OrderID: cancelled.OrderID, ProviderTradeNo: "T2", Amount: cancelled.UnitPrice, Currency: "CNY"})
	if err != nil || late.Refund == nil {
		t.Fatalf("late payment: %+v, %v", late, err)
	}

	for _, dir := range []string{"invariants", "events"} {
		for _, f := range testdataFiles(t, dir) {
			if n := b.runTestdata(t, f); n != 0 {
				t.Errorf("%s: %d violations after a clean run", f, n)
			}
		}
	}
	b.auditClean(t)

	losses := []struct {
		file, check, dedupKey string
	}{
		{"events/01_order_created.sql", "ORDER_CREATED", flow.TagOrderCreated + ":" + itoa(created.OrderID)},
		{"events/02_order_paid.sql", "ORDER_PAID", flow.TagOrderPaid + ":" + itoa(paid.OrderID)},
		{"events/03_frontdoor_release.sql", "FRONTDOOR_RELEASE", flow.TagFrontDoorRelease + ":" + soldOut.ReservationID.String()},
		{"events/04_refund_requested.sql", "REFUND_REQUESTED", flow.TagRefundRequested + ":" + late.Refund.PaymentID.String()},
	}
	for i, l := range losses {
		tag, err := b.pool.Exec(b.ctx, `DELETE FROM `+pgx.Identifier{b.s.Schema, "event_outbox"}.Sanitize()+` WHERE dedup_key = $1`, l.dedupKey)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("lose %s: %v, %d rows", l.dedupKey, err, tag.RowsAffected())
		}
		if n := b.runTestdata(t, l.file); n != 1 {
			t.Errorf("%s finds %d violations after losing %s, want 1", l.file, n, l.dedupKey)
		}
		checks, err := b.s.Audit(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		failed := map[string]bool{}
		for _, c := range checks {
			if !c.Pass {
				failed[c.Name] = true
			}
		}
		for j, other := range losses {
			name := ""
			for _, c := range checks {
				if c.Invariant == "7" && strings.Contains(c.Name, other.check) {
					name = c.Name
				}
			}
			if name == "" {
				t.Fatalf("the audit has no invariant-7 check for %s", other.check)
			}
			if failed[name] != (j <= i) {
				t.Errorf("after losing %d event(s): check %q failed = %v", i+1, name, failed[name])
			}
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestPurgeHistoryKeepsCompletenessSound: after PurgeHistory removed the
// sent events of earlier orders, the audit's event-completeness checks do
// not call those events lost, yet a lost enqueue after the purge is still
// caught.
func TestPurgeHistoryKeepsCompletenessSound(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 3, 1)
	relayAll := func() {
		t.Helper()
		for {
			c, err := b.s.Outbox.ClaimOutboxBatch(b.ctx, b.pool, "test-relay", 100)
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
	place := func(m flow.OrderMessage) {
		t.Helper()
		if out, err := b.s.PlaceOrder(b.ctx, uuid.Must(uuid.NewV7()), body(t, m)); err != nil || out.Code != flow.CodeOrderCreated {
			t.Fatalf("order: %+v, %v", out, err)
		}
	}
	eventFailures := func() []string {
		t.Helper()
		checks, err := b.s.Audit(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var failed []string
		for _, c := range checks {
			if c.Invariant == "7" && !c.Pass {
				failed = append(failed, c.Name)
			}
		}
		return failed
	}

	early := b.msg(1, 0)
	place(early)
	relayAll()
	// The purge's horizon lies after the early order; its history goes.
	time.Sleep(10 * time.Millisecond)
	n, err := b.s.PurgeHistory(b.ctx, time.Now(), 100)
	if err != nil || n < 2 { // one inbox row, one event at least
		t.Fatalf("PurgeHistory = %d, %v", n, err)
	}
	var left int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+pgx.Identifier{b.s.Schema, "event_outbox"}.Sanitize()+` WHERE dedup_key = $1`,
		flow.TagOrderCreated+":"+itoa(early.OrderID)).Scan(&left); err != nil || left != 0 {
		t.Fatalf("the early order's event is still there (%d, %v): the purge proves nothing", left, err)
	}
	if f := eventFailures(); len(f) != 0 {
		t.Fatalf("after the purge the audit calls purged events lost: %v", f)
	}

	late := b.msg(2, 0)
	place(late)
	if _, err := b.pool.Exec(b.ctx, `DELETE FROM `+pgx.Identifier{b.s.Schema, "event_outbox"}.Sanitize()+` WHERE dedup_key = $1`,
		flow.TagOrderCreated+":"+itoa(late.OrderID)); err != nil {
		t.Fatal(err)
	}
	if f := eventFailures(); len(f) != 1 || !strings.Contains(f[0], "ORDER_CREATED") {
		t.Fatalf("a lost enqueue after the purge: audit failures %v, want the ORDER_CREATED check", f)
	}

	if _, err := b.s.PurgeHistory(b.ctx, time.Time{}, 100); err == nil {
		t.Error("PurgeHistory with a zero time: no error")
	}
	if _, err := b.s.PurgeHistory(b.ctx, time.Now(), 0); err == nil {
		t.Error("PurgeHistory with batch size 0: no error")
	}
}

// claimIDs returns the event ids of c's messages.
func claimIDs(c outbox.Claim) []uuid.UUID {
	ids := make([]uuid.UUID, len(c.Messages))
	for i, m := range c.Messages {
		ids[i] = m.EventID
	}
	return ids
}
