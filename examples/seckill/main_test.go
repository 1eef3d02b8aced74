package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/stackharness"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// servers are the Redis and NATS of a test on the real stack.
type servers struct {
	redis *stackharness.Redis
	nats  *stackharness.NATS
}

// useStack points cfg at the stack: for stackReal, a redis-server and a
// nats-server -js of the test's own (throwaway when owned is true, else
// SECKILL_REDIS_URL / SECKILL_NATS_URL when set), stopped when it ends.
func useStack(tb testing.TB, cfg *config, stack string, owned bool) servers {
	tb.Helper()
	cfg.Stack = stack
	if stack != stackReal {
		return servers{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	startRedis, startNATS := stackharness.StartThrowawayRedis, stackharness.StartThrowawayNATS
	if !owned {
		startRedis = func(ctx context.Context) (*stackharness.Redis, error) { return stackharness.StartRedis(ctx, "") }
		startNATS = func(ctx context.Context) (*stackharness.NATS, error) { return stackharness.StartNATS(ctx, "") }
	}
	r, err := startRedis(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Stop)
	n, err := startNATS(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(n.Stop)
	cfg.RedisURL, cfg.NATSURL = r.URL, n.URL
	cfg.JetStream.AckWait = 3 * time.Second // redeliveries of unacked messages come soon in tests
	return servers{r, n}
}

func smallConfig(t testing.TB) config {
	cfg := defaultConfig()
	cfg.Schema = pgtest.Schema(t)
	cfg.Stock, cfg.Buckets, cfg.Buyers = 300, 8, 900
	cfg.Consumers, cfg.Relays, cfg.QueueDepth = 8, 2, 200
	// High rates so that every branch of the consumer runs.
	cfg.DupRate, cfg.ResendRate, cfg.DoubleClick = 0.2, 0.05, 0.2
	cfg.FrontDrift, cfg.FrontForget = 0.1, 0.05
	cfg.PayRate, cfg.LatePayRate, cfg.DupCallback = 0.5, 0.1, 0.2
	cfg.OrderTTL = 2 * time.Second
	cfg.Security = testSecurity
	return cfg
}

// TestSaleAuditPasses runs the whole flow at small scale, on the real
// stack and on the in-memory stand-ins, and checks that the audit and the
// reconciliation pass and that the counts add up.
func TestSaleAuditPasses(t *testing.T) {
	t.Parallel()
	for _, stack := range []string{stackReal, stackMemory} {
		t.Run(stack, func(t *testing.T) {
			t.Parallel()
			ctx := pgtest.Context(t, 4*time.Minute)
			cfg := smallConfig(t)
			useStack(t, &cfg, stack, false)
			saleAuditPasses(t, ctx, cfg)
		})
	}
}

// TestSaleAuditPassesRelayInTx runs the whole flow on the real stack
// with the relays in InTx mode (each batch published to JetStream inside
// the transaction that claims it): the audit and the reconciliation pass,
// every event was published, the consumers saw every order.
func TestSaleAuditPassesRelayInTx(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 4*time.Minute)
	cfg := smallConfig(t)
	cfg.RelayInTx = true
	useStack(t, &cfg, stackReal, false)
	saleAuditPasses(t, ctx, cfg)
}

// TestSaleAuditPassesLongerWays runs the whole flow on the real stack the
// longer ways the bench measures the service's savings against: event
// consumers that claim and then complete (-event-two-step) with JetStream
// consumers that Fetch a batch per pull request (-jetstream-fetch) and
// relays that await each event's PubAck (-jetstream-publish-each), and
// event consumers that claim one event per transaction (-event-batch=1).
// The audit and the reconciliation pass as they do the default ways.
func TestSaleAuditPassesLongerWays(t *testing.T) {
	t.Parallel()
	for _, way := range []struct {
		name          string
		twoStep, pull bool
		batch         int
	}{{"two-step,fetch,publish-each", true, true, 16}, {"batch=1", false, false, 1}} {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			ctx := pgtest.Context(t, 4*time.Minute)
			cfg := smallConfig(t)
			cfg.EventTwoStep, cfg.JetStream.FetchPerPull, cfg.JetStream.PublishEachEvent, cfg.EventBatch = way.twoStep, way.pull, way.pull, way.batch
			useStack(t, &cfg, stackReal, false)
			saleAuditPasses(t, ctx, cfg)
		})
	}
}

// saleAuditPasses runs the sale of cfg and checks its report (checkSale)
// and its releases (checkReleased).
func saleAuditPasses(t *testing.T, ctx context.Context, cfg config) {
	t.Helper()
	rep, err := runSale(ctx, pgtest.Pool(t), cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSale(t, cfg, rep)
	checkReleased(t, ctx, pgtest.Pool(t), cfg.Schema)
}

// checkSale checks a run's report: audit and reconciliation pass, the
// counts add up, every branch ran.
func checkSale(t *testing.T, cfg config, rep report) {
	t.Helper()
	var out bytes.Buffer
	rep.print(&out)
	t.Log("\n" + out.String())
	for _, c := range rep.Checks {
		if !c.Pass {
			t.Errorf("audit FAIL [%s] %s: %s", c.Invariant, c.Name, c.Detail)
		}
	}
	if rep.Reconciliation == nil {
		t.Fatal("no reconciliation")
	}
	for _, d := range rep.Reconciliation.Differences {
		if !d.Explained {
			t.Errorf("reconciliation: unexplained %s at %s: %d", d.Class, d.Where, d.Count)
		}
	}
	// The three reports: every difference matches (in one snapshot, at the
	// end of a run, nothing is in flight).
	if rep.Reconciliation.Reports == nil || !strings.Contains(out.String(), "reports, one snapshot:") {
		t.Fatal("the reconciliation reports are missing from the run's output")
	}
	for _, d := range rep.Reconciliation.Reports.Differences {
		if d.Class != flow.ClassMatch {
			t.Errorf("reports: %s: %d vs %d: %s", d.Name, d.Have, d.Expected, d.Class)
		}
	}
	if len(rep.Reconciliation.Reports.Orders) == 0 || len(rep.Reconciliation.Reports.Ledger) == 0 || len(rep.Reconciliation.Reports.Events) == 0 {
		t.Errorf("empty reports: %+v", rep.Reconciliation.Reports)
	}
	if !rep.Passed() || !strings.Contains(out.String(), "audit: all invariants hold") || !strings.Contains(out.String(), "reconciliation: PASS") {
		t.Fatal("audit or reconciliation did not pass")
	}
	// Every reservation the front door accepted became exactly one order or
	// one rejection.
	if got := rep.Created + rep.SoldOut + rep.UserAlready; got != rep.FrontAccepted {
		t.Errorf("orders %d + sold out %d + already ordered %d = %d, want front-door accepted %d",
			rep.Created, rep.SoldOut, rep.UserAlready, got, rep.FrontAccepted)
	}
	// Never more live orders than stock; stock is conserved (the audit
	// checks each bucket; here the totals).
	if rep.Paid > int64(cfg.Stock) {
		t.Errorf("%d orders paid for %d units", rep.Paid, cfg.Stock)
	}
	if rep.Paid+rep.Cancelled != rep.Created {
		t.Errorf("paid %d + cancelled %d != created %d: an order was left unpaid or counted twice", rep.Paid, rep.Cancelled, rep.Created)
	}
	// Every branch that does not depend on timing ran (sold out in
	// PostgreSQL races with the cancels that give stock back; the flow
	// package's tests drive it deterministically).
	for name, n := range map[string]int64{
		"duplicate deliveries absorbed": rep.Duplicates, "same reservation under a new message id": rep.Already,
		"user already ordered":        rep.UserAlready,
		"duplicate payment callbacks": rep.DupCallbacks, "payments after cancel": rep.PaidAfterCancel,
		"timeout cancels": rep.Cancelled, "refund events": rep.Published[flow.TagRefundRequested],
		"front-door releases": rep.Published[flow.TagFrontDoorRelease],
	} {
		if n == 0 {
			t.Errorf("%s: 0, the branch did not run", name)
		}
	}
	if rep.Published[flow.TagOrderCreated] < rep.Created {
		t.Errorf("ORDER_CREATED published %d times for %d orders", rep.Published[flow.TagOrderCreated], rep.Created)
	}
}

// do sends a request as the test's clients do: a body map's "user_id" is
// the buyer, who sends a bearer token of their own instead (see
// testRequest); a callback is signed.
func do(t *testing.T, method, url string, body any) (int, map[string]any) {
	t.Helper()
	return doAs(t, 0, method, url, body)
}

// doAs is do as buyer (0: the buyer do would pick).
func doAs(t *testing.T, buyer int64, method, url string, body any) (int, map[string]any) {
	t.Helper()
	req := testRequest(t, context.Background(), buyer, method, url, body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	noteOwner(req, resp.StatusCode, out)
	return resp.StatusCode, out
}

// waitStatus polls GET /orders/{id} until the status is want.
func waitStatus(t *testing.T, base, requestID, want string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, out := do(t, "GET", base+"/orders/"+requestID, nil)
		if code == http.StatusOK && out["status"] == want {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("request %s: last answer %d %v, want status %s", requestID, code, out, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHTTPAPI(t *testing.T) {
	t.Parallel()
	for _, stack := range []string{stackReal, stackMemory} {
		t.Run(stack, func(t *testing.T) { t.Parallel(); testHTTPAPI(t, stack) })
	}
}

func testHTTPAPI(t *testing.T, stack string) {
	ctx := pgtest.Context(t, 3*time.Minute)
	cfg := smallConfig(t)
	useStack(t, &cfg, stack, false)
	cfg.Stock, cfg.Buckets, cfg.OrderTTL = 2, 1, time.Hour
	a, err := newAPI(ctx, pgtest.Pool(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveTest(t, a)
	defer func() { srv.Close(); a.Close() }()
	base := srv.URL

	code, out := do(t, "POST", base+"/orders", map[string]any{"user_id": 1})
	if code != http.StatusAccepted || out["status"] != "queued" {
		t.Fatalf("POST /orders = %d %v, want 202 queued", code, out)
	}
	req1 := out["request_id"].(string)
	if code, _ := do(t, "POST", base+"/orders", map[string]any{"user_id": 1}); code != http.StatusConflict {
		t.Errorf("second click of the same user = %d, want 409", code)
	}
	for _, bad := range []string{`{"user_id": 4}`, `{"user_id": -3}`, `not json`, `{"sku_id": "x"}`, `{} {}`, `[]`} {
		if code, _ := doAs(t, 4, "POST", base+"/orders", bad); code != http.StatusBadRequest {
			t.Errorf("POST /orders %s = %d, want 400 (the buyer comes from the token)", bad, code)
		}
	}
	code, out = do(t, "POST", base+"/orders", map[string]any{"user_id": 2})
	if code != http.StatusAccepted {
		t.Fatalf("second buyer = %d %v", code, out)
	}
	req2 := out["request_id"].(string)
	if code, _ := do(t, "POST", base+"/orders", map[string]any{"user_id": 3}); code != http.StatusGone {
		t.Errorf("third buyer for 2 units = %d, want 410 sold out", code)
	}

	o1 := waitStatus(t, base, req1, "CREATED")
	waitStatus(t, base, req2, "CREATED")
	orderID := int64(o1["order_id"].(float64))
	amount := int64(o1["amount"].(float64))
	if code, _ := do(t, "GET", base+"/orders/"+"0190a2c4-0000-7000-8000-000000000000", nil); code != http.StatusNotFound {
		t.Errorf("unknown request = %d, want 404", code)
	}
	if code, _ := do(t, "GET", base+"/orders/not-a-uuid", nil); code != http.StatusBadRequest {
		t.Errorf("bad request id = %d, want 400", code)
	}

	pay := map[string]any{"order_id": orderID, "provider_trade_no": "T1", "callback_id": "C1", "amount": amount, "currency": "CNY"}
	if code, _ := do(t, "POST", base+"/payments/callback", map[string]any{"order_id": orderID, "provider_trade_no": "T9", "amount": amount + 1, "currency": "CNY"}); code != http.StatusUnprocessableEntity {
		t.Errorf("amount mismatch = %d, want 422", code)
	}
	if code, out := do(t, "POST", base+"/payments/callback", pay); code != http.StatusOK || out["result"] != "paid" || out["order_status"] != "PAID" {
		t.Fatalf("payment = %d %v, want 200 paid", code, out)
	}
	if code, out := do(t, "POST", base+"/payments/callback", pay); code != http.StatusOK || out["result"] != "duplicate" {
		t.Errorf("duplicate callback = %d %v, want 200 duplicate", code, out)
	}
	if code, _ := do(t, "POST", base+"/payments/callback", map[string]any{"order_id": 777, "provider_trade_no": "T2", "amount": 1, "currency": "CNY"}); code != http.StatusNotFound {
		t.Errorf("unknown order = %d, want 404", code)
	}
	if code, _ := do(t, "POST", base+"/payments/callback", `{"order_id": 0}`); code != http.StatusBadRequest {
		t.Errorf("invalid callback = %d, want 400", code)
	}
	waitStatus(t, base, req1, "PAID")

	// Quiet now: the audit is exact.
	deadline := time.Now().Add(time.Minute)
	for {
		code, out = do(t, "GET", base+"/audit", nil)
		if code == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the relays may still be publishing
	}
	if code != http.StatusOK || out["passed"] != true || out["mode"] != "live" {
		t.Fatalf("GET /audit = %d %v", code, out)
	}
	for {
		code, out = do(t, "GET", base+"/audit?at_rest=true", nil)
		if code == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the relays may still be publishing
	}
	if code != http.StatusOK || out["passed"] != true || out["mode"] != "at_rest" || out["skipped"] != float64(0) {
		t.Fatalf("GET /audit?at_rest=true = %d %v", code, out)
	}
	for {
		code, out = do(t, "GET", base+"/reconcile", nil)
		if code == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != http.StatusOK || out["passed"] != true {
		t.Fatalf("GET /reconcile = %d %v", code, out)
	}
	reports, _ := out["reconciliation"].(map[string]any)["reports"].(map[string]any)
	if reports == nil || reports["orders"] == nil || reports["ledger"] == nil || reports["events"] == nil || reports["differences"] == nil {
		t.Fatalf("GET /reconcile without the three reports: %v", out["reconciliation"])
	}
	code, out = do(t, "GET", base+"/stats", nil)
	if code != http.StatusOK || out["orders_created"].(float64) != 2 || out["paid"].(float64) != 1 {
		t.Errorf("GET /stats = %d %v", code, out)
	}
}

// TestHTTPBusy: with the queue full, a click answers 503 and nothing is
// reserved for it. With shedding (-shed-for), the clicks after a refused
// publish are refused at once, busy, before the guard and the front door:
// the front door never sees them. Without it, each goes the whole way
// and is refused by the queue again.
func TestHTTPBusy(t *testing.T) {
	t.Parallel()
	for _, stack := range []string{stackReal, stackMemory} {
		for _, shed := range []time.Duration{0, time.Minute} {
			t.Run(fmt.Sprintf("%s/shed-for=%v", stack, shed), func(t *testing.T) { t.Parallel(); testHTTPBusy(t, stack, shed) })
		}
	}
}

func testHTTPBusy(t *testing.T, stack string, shedFor time.Duration) {
	ctx := pgtest.Context(t, 2*time.Minute)
	cfg := smallConfig(t)
	useStack(t, &cfg, stack, false)
	cfg.QueueDepth, cfg.Consumers = 1, 0 // nobody drains the queue
	cfg.ShedFor = shedFor                // a minute: every later click falls in it
	a, err := newAPI(ctx, pgtest.Pool(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveTest(t, a)
	defer func() { srv.Close(); a.Close() }()
	if code, _ := do(t, "POST", srv.URL+"/orders", map[string]any{"user_id": 1}); code != http.StatusAccepted {
		t.Fatalf("first click = %d", code)
	}
	available := func() int64 {
		st, err := a.s.front.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.TotalAvailable()
	}
	before := available()
	code, out := do(t, "POST", srv.URL+"/orders", map[string]any{"user_id": 2})
	if code != http.StatusServiceUnavailable || out["status"] != "busy" {
		t.Fatalf("click on a full queue = %d %v, want 503 busy", code, out)
	}
	if after := available(); after != before {
		t.Errorf("a busy click kept a unit: available %d → %d", before, after)
	}
	for _, u := range []int{2, 3} { // the refused buyer tries again; another one clicks
		req := testRequest(t, ctx, 0, "POST", srv.URL+"/orders", map[string]any{"user_id": u})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || out["status"] != "busy" || resp.Header.Get("Retry-After") == "" {
			t.Errorf("buyer %d after a refused publish: %d %v (Retry-After %q), want 503 busy with Retry-After", u, resp.StatusCode, out, resp.Header.Get("Retry-After"))
		}
	}
	wantBusy, wantShed := int64(3), int64(0)
	if shedFor > 0 {
		wantBusy, wantShed = 1, 2
	}
	if busy, shed := a.s.stats.busy.Load(), a.s.stats.shed.Load(); busy != wantBusy || shed != wantShed {
		t.Errorf("clicks refused by the queue %d, at once %d; want %d and %d", busy, shed, wantBusy, wantShed)
	}
	if after := available(); after != before {
		t.Errorf("the refused clicks kept units: available %d → %d", before, after)
	}
}

// TestSaleOnRedisCluster runs the sale with the front door on a
// three-node Redis Cluster (the URL form with addr=).
func TestSaleOnRedisCluster(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 4*time.Minute)
	cfg := smallConfig(t)
	useStack(t, &cfg, stackReal, false)
	cl, err := stackharness.StartThrowawayRedisCluster(ctx, stackharness.RedisClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	cfg.RedisURL = "redis://" + cl.Addrs[0] + "?addr=" + cl.Addrs[1] + "&addr=" + cl.Addrs[2]
	rep, err := runSale(ctx, pgtest.Pool(t), cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSale(t, cfg, rep)
}

// checkReleased checks the reservations at the end of a run: every
// cancelled order's reservation is RELEASED (its front-door release
// applied), none is left RELEASE_PENDING or MANUAL_REQUIRED.
func checkReleased(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) {
	t.Helper()
	var cancelled, released, pending, manual int64
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), count(*) FILTER (WHERE r.status = 40),
			(SELECT count(*) FROM %[1]s.inventory_reservation WHERE status = 30),
			(SELECT count(*) FROM %[1]s.inventory_reservation WHERE status = 60)
		FROM %[1]s.orders o JOIN %[1]s.inventory_reservation r USING (reservation_id) WHERE o.status = 40`,
		pgx.Identifier{schema}.Sanitize())).Scan(&cancelled, &released, &pending, &manual); err != nil {
		t.Fatal(err)
	}
	if cancelled == 0 || released != cancelled || pending != 0 || manual != 0 {
		t.Errorf("%d cancelled orders, %d of their reservations RELEASED; %d RELEASE_PENDING, %d MANUAL_REQUIRED left",
			cancelled, released, pending, manual)
	}
}
