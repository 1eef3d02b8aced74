package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckillkit/seckill/internal/pgtest"
)

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	// A command name with spaces and a ')' of its own; utime 7, stime 3,
	// cutime 20, cstime 5 (fields 14-17).
	line := "4242 (postgres: a) b) S 17 4242 4242 0 -1 4194560 100 0 0 0 7 3 20 5 20 0 1 0 12345 0 0\n"
	got, err := parseProcStat(line)
	if err != nil {
		t.Fatal(err)
	}
	want := procTimes{ppid: 17, self: 10 * clockTick, child: 25 * clockTick}
	if got != want {
		t.Fatalf("parseProcStat = %+v, want %+v", got, want)
	}
	if _, err := parseProcStat("4242 no name S 1"); err == nil {
		t.Fatal("a line without a command name parsed")
	}
}

func TestTreeCPUOfThisProcess(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc:", err)
	}
	self, err := readProcTimes(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	tree, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if tree < self.self+self.child {
		t.Fatalf("treeCPU %v is less than the root's own and waited-for children's %v", tree, self.self+self.child)
	}
	if processCPUOf(0) != 0 {
		t.Fatal("processCPUOf(0) is not 0")
	}
}

func TestParseLSN(t *testing.T) {
	t.Parallel()
	got, err := parseLSN("1/2A")
	if err != nil || got != 1<<32|0x2A {
		t.Fatalf("parseLSN(1/2A) = %d, %v", got, err)
	}
	if _, err := parseLSN("12"); err == nil {
		t.Fatal("an LSN without '/' parsed")
	}
}

// TestClickLoadOpenLoop: every click is sent, by its own buyer, with a
// token and an idempotency key, and none waits for an earlier answer: a
// server slower than the interval between clicks still gets them all
// within about the schedule's length.
func TestClickLoadOpenLoop(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Authorization")] = r.Header.Get("Idempotency-Key") != ""
		n := len(seen)
		mu.Unlock()
		if n == 20 {
			close(release)
		}
		select { // no answer before every click has arrived
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	tokens := make([]string, 20)
	for i := range tokens {
		tokens[i] = "buyer-" + strings.Repeat("x", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := clickLoad{url: srv.URL, client: newLoadClient(), rate: 200, first: 7, tokens: tokens}
	c := l.run(ctx, time.Now())
	if ctx.Err() != nil {
		t.Fatal("the clicks were not all answered within 30s: the load waited for answers before sending")
	}
	for i, st := range c.status {
		if st != http.StatusAccepted {
			t.Fatalf("click %d: status %d", i, st)
		}
	}
	for tok, key := range seen {
		if !key {
			t.Fatalf("click %q came without an Idempotency-Key", tok)
		}
	}
	if len(seen) != len(tokens) || c.first != 7 || c.sched(10).Sub(c.sched(0)) != 50*time.Millisecond {
		t.Fatalf("%d distinct buyers, first %d, click 10 at +%v", len(seen), c.first, c.sched(10).Sub(c.sched(0)))
	}
}

// TestCitusHopAndResult: the coordinator's hop is its statement time less
// the workers', per order and per coordinator statement, and the Citus
// RESULT line names its keys citus_ and adds the coordinator's figures.
func TestCitusHopAndResult(t *testing.T) {
	t.Parallel()
	r := rateResult{offered: 100, window: time.Second, orders: 100,
		cpu:      [nComponents]time.Duration{cpuPostgres: 300 * time.Millisecond, cpuService: 100 * time.Millisecond},
		walBytes: 400_000,
		nodes: []nodeWindow{
			{name: "coordinator", cpu: 200 * time.Millisecond, stmtsMS: 90, calls: 600, readMS: 9,
				readTop: []stmtLine{{calls: 3, totalMS: 9, normalized: "WITH inv AS (SELECT"}}},
			{name: "worker a", cpu: 100 * time.Millisecond, stmtsMS: 50, calls: 700},
			{name: "worker b", stmtsMS: 10},
		}}
	perOrder, perStatement := r.hop()
	if perOrder != 0.3 || perStatement != 0.05 {
		t.Fatalf("hop = %v ms/order, %v ms/statement; want 0.3, 0.05", perOrder, perStatement)
	}
	// The kit: 200 orders/s in both runs; 800 and 1,200 µs of CPU per
	// order (500 and 700 of them PostgreSQL's); 3,000 and 2,000 WAL bytes.
	kit := [2]kitResult{
		{orders: 200, window: time.Second, pgCPU: 100 * time.Millisecond, clientCPU: 60 * time.Millisecond, walBytes: 600_000},
		{orders: 400, window: 2 * time.Second, pgCPU: 280 * time.Millisecond, clientCPU: 200 * time.Millisecond, walBytes: 800_000},
	}
	var plain, citus strings.Builder
	printStackResult(&plain, options{}, kit, []rateResult{r}, nil, nil)
	printStackResult(&citus, options{stackCitus: true}, kit, []rateResult{r}, nil, nil)
	if want := "RESULT stack_orders_per_s=100 stack_vs_kit=0.50 stack_cpu_us_per_order=4000 stack_pg_cpu_us_per_order=3000 wal_bytes_per_order=4000" +
		" kit_cpu_us_per_order=1000 kit_pg_cpu_us_per_order=600 kit_wal_bytes_per_order=2500 stack_vs_kit_cpu_bound=0.25 stack_readonly_stmt_share=0.100\n"; plain.String() != want {
		t.Fatalf("plain RESULT:\n%s\nwant\n%s", plain.String(), want)
	}
	if want := "RESULT citus_stack_orders_per_s=100 citus_stack_vs_kit=0.50 citus_stack_cpu_us_per_order=4000 citus_stack_pg_cpu_us_per_order=3000 citus_wal_bytes_per_order=4000" +
		" citus_kit_cpu_us_per_order=1000 citus_kit_pg_cpu_us_per_order=600 citus_kit_wal_bytes_per_order=2500 citus_stack_vs_kit_cpu_bound=0.25 citus_stack_readonly_stmt_share=0.100" +
		" citus_coordinator_cpu_us_per_order=2000 citus_coordinator_hop_ms_per_order=0.300\n"; citus.String() != want {
		t.Fatalf("Citus RESULT:\n%s\nwant\n%s", citus.String(), want)
	}
	var report strings.Builder
	reportStack(&report, options{}, kit, []rateResult{r})
	for _, want := range []string{"| before the stack | 200 | 500 | 300 | 800 | 0.16 | 3000 |", "| after the stack | 200 | 700 | 500 | 1200 | 0.24 | 2000 |", "| 100 | coordinator | 2000 | ", "| 100 | worker a | 1000 | ", "| 100 | 0.300 | 0.050 | 2000 |", "worker b (10 ms of statements",
		"and any other read): 9 ms, 10.0% of the statement time, coordinator:", "-  10.0%       9.0 ms       3 calls    3.000 ms/call"} {
		if !strings.Contains(report.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, report.String())
		}
	}
}

// TestSumWAL: pg_waldump's records are summed by the relation of their
// first block reference (a heap update's second one is the old page),
// full-page images by the records that carry one, and records without a
// block by their resource manager.
func TestSumWAL(t *testing.T) {
	dump := `rmgr: Heap        len (rec/tot):     54/   154, tx:        731, lsn: 0/01A2B3C8, prev 0/01A2B390, desc: INSERT off 2 flags 0x00, blkref #0: rel 1663/5/16390 blk 0
rmgr: Heap        len (rec/tot):     69/  8141, tx:        732, lsn: 0/01A2B400, prev 0/01A2B3C8, desc: HOT_UPDATE off 3 xmax 732, blkref #0: rel 1663/5/16390 blk 1 FPW
rmgr: Heap        len (rec/tot):     80/   130, tx:        733, lsn: 0/01A2D400, prev 0/01A2B400, desc: UPDATE off 4 xmax 733, blkref #0: rel 1663/5/16390 blk 2, blkref #1: rel 1663/5/16390 blk 1
rmgr: Btree       len (rec/tot):     64/    64, tx:        731, lsn: 0/01A2D500, prev 0/01A2D400, desc: INSERT_LEAF off 7, blkref #0: rel 1663/5/16395 blk 1
rmgr: Transaction len (rec/tot):     34/    34, tx:        731, lsn: 0/01A2D540, prev 0/01A2D500, desc: COMMIT 2026-12-03 21:16:43.864719 UTC
rmgr: Btree       len (rec/tot):     64/    64, tx:        731, lsn: 0/01A2D580, prev 0/01A2D540, desc: INSERT_LEAF off 8, blkref #0: rel 1663/5/99999 blk 1
pg_waldump: error: error in WAL record at 0/01A2D5C0: invalid record length at 0/01A2D600: wanted 24, got 0
`
	got, n := sumWAL(strings.NewReader(dump), map[uint32]string{16390: "s.orders", 16395: "s.orders/pk_orders"})
	if n != 6 {
		t.Fatalf("%d records read, want 6", n)
	}
	want := []walShare{
		{name: "s.orders", records: 3, bytes: 154 + 8141 + 130, fpi: 8141 - 69},
		{name: "relfilenode 99999", records: 1, bytes: 64}, // ties by name
		{name: "s.orders/pk_orders", records: 1, bytes: 64},
		{name: "[Transaction]", records: 1, bytes: 34},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if lsnText(0x1_01A2D5C0) != "1/1A2D5C0" {
		t.Fatalf("lsnText = %s", lsnText(0x1_01A2D5C0))
	}
}

// TestRelayModesReport: with -stack-relay-in-tx the RESULT line adds the
// InTx window's WAL per order and its ratio to the lease-mode window of
// the same rate, and the report puts the two modes side by side, with
// the outbox's share of the WAL from pg_waldump.
func TestRelayModesReport(t *testing.T) {
	t.Parallel()
	lease := []rateResult{
		{offered: 150, window: time.Second, orders: 150, walBytes: 900_000},
		{offered: 300, window: time.Second, orders: 300, walBytes: 1_500_000,
			wal: []walShare{{name: "sale.event_outbox", bytes: 300_000}, {name: "sale.event_outbox/uq_outbox_dedup", bytes: 150_000}, {name: "sale.orders", bytes: 90_000}}},
	}
	inTx := []rateResult{{offered: 300, window: time.Second, orders: 300, walBytes: 1_200_000,
		wal: []walShare{{name: "event_outbox", bytes: 180_000}, {name: "sale.event_outbox_history", bytes: 1}, {name: "sale.orders", bytes: 90_000}}}}
	var res strings.Builder
	kit := kitResult{orders: 300, window: time.Second}
	printStackResult(&res, options{}, [2]kitResult{kit, kit}, lease, inTx, nil)
	if want := " relay_intx_wal_bytes_per_order=4000 relay_intx_wal_vs_lease=0.80\n"; !strings.HasSuffix(res.String(), want) {
		t.Fatalf("RESULT:\n%s\nwant it to end with\n%s", res.String(), want)
	}
	var report strings.Builder
	reportRelayModes(&report, lease, inTx)
	for _, want := range []string{"| 300 | leases | 300 | ", " | 5000 | 1500 |\n", "| 300 | InTx | 300 | ", " | 4000 | 600 |\n"} {
		if !strings.Contains(report.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, report.String())
		}
	}
	if strings.Contains(report.String(), "| 150 |") {
		t.Fatalf("report shows a rate not measured in InTx mode:\n%s", report.String())
	}
	var none strings.Builder
	reportRelayModes(&none, lease, nil)
	if none.Len() != 0 {
		t.Fatalf("report without InTx windows: %q", none.String())
	}
}

// TestReadOnlyStatement: the SQL test that counts a pg_stat_statements row
// among the reads (the operator view's share) takes reads, and no
// statement that writes or locks rows, on a real server.
func TestReadOnlyStatement(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	for _, c := range []struct {
		query string
		read  bool
	}{
		{"SELECT count(*) FROM s.orders WHERE status IN ($1, $2)", true},
		{"  select updated_at, deleted FROM s.orders", true},
		{"WITH inv AS MATERIALIZED (SELECT bucket_no FROM s.sku_inventory) SELECT * FROM inv", true},
		{"WITH c AS (UPDATE s.event_outbox SET status = $1 RETURNING event_id) SELECT count(*) FROM c", false},
		{"INSERT INTO s.consumer_inbox (message_id) VALUES ($1)", false},
		{"SELECT event_id FROM s.event_outbox WHERE status = $1 FOR UPDATE SKIP LOCKED", false},
		{"SELECT order_id FROM s.orders WHERE order_id = $1 FOR NO KEY UPDATE", false},
		{"SELECT 1 FROM s.orders FOR SHARE", false},
		{"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", false},
		{"DELETE FROM s.consumer_inbox WHERE received_at < $1", false},
		{"SELECT set_config('lock_timeout', $1, true)", false},
		{"SELECT set_config($1, $2, $3)", false},
		{"SELECT current_setting('block_size')", true},
	} {
		var got bool
		if err := pool.QueryRow(ctx, `SELECT `+readOnlyStatement+` FROM (VALUES ($1::text)) AS t(query)`, c.query).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.read {
			t.Errorf("%q: read-only %v, want %v", c.query, got, c.read)
		}
	}
}

// TestOffSwitches: -stack-off takes the service's flags with their dash,
// -stack-off-rates only rates of -stack-rates, and by default 300 (when
// measured) and the last rate.
func TestOffSwitches(t *testing.T) {
	t.Parallel()
	fs, at, err := offSwitches("-event-two-step, -jetstream-fetch", "", []int{150, 300, 600, 1200})
	if err != nil || !slices.Equal(fs, []string{"-event-two-step", "-jetstream-fetch"}) || !slices.Equal(at, []int{300, 1200}) {
		t.Fatalf("defaults: %q %v %v", fs, at, err)
	}
	if _, at, err := offSwitches("-x", "", []int{600, 1200}); err != nil || !slices.Equal(at, []int{1200}) {
		t.Fatalf("without 300: %v %v", at, err)
	}
	if _, at, err := offSwitches("-x", "", []int{300}); err != nil || !slices.Equal(at, []int{300}) {
		t.Fatalf("300 alone: %v %v", at, err)
	}
	if _, at, err := offSwitches("-x", "600", []int{600, 1200}); err != nil || !slices.Equal(at, []int{600}) {
		t.Fatalf("given: %v %v", at, err)
	}
	for _, bad := range []struct{ flags, rates string }{{"event-two-step", ""}, {"-", ""}, {"-a b", ""}, {"-x", "700"}, {"-x", "0"}} {
		if _, _, err := offSwitches(bad.flags, bad.rates, []int{600, 1200}); err == nil {
			t.Errorf("offSwitches(%q, %q) accepted", bad.flags, bad.rates)
		}
	}
}

// TestSavingsReport: the report puts, per rate of the off runs, the first
// windows, each run with a saving off and the last with every saving on
// again side by side, CPU per order by component.
func TestSavingsReport(t *testing.T) {
	t.Parallel()
	cpu := func(pg, svc, nats, redis time.Duration) [nComponents]time.Duration {
		return [nComponents]time.Duration{pg, svc, nats, redis, time.Second}
	}
	first := []rateResult{
		{offered: 150, window: time.Second, orders: 150},
		{offered: 1200, window: time.Second, orders: 1000, walBytes: 5_000_000, cpu: cpu(time.Second, 800*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond)},
	}
	offs := []offRun{
		{flag: "-event-two-step", results: []rateResult{{offered: 1200, window: time.Second, orders: 800, walBytes: 4_800_000,
			cpu: cpu(time.Second, 800*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond)}}},
		{flag: "", results: []rateResult{{offered: 1200, window: time.Second, orders: 1000, walBytes: 5_000_000}}},
	}
	var out strings.Builder
	reportSavings(&out, first, offs)
	for _, want := range []string{
		"| 1200 | every saving on (the rates above) | 1000 | 0.0 | 1000 | 800 | 200 | 100 | 2100 | 5000 |\n",
		"| 1200 | off: `-event-two-step` | 800 | 0.0 | 1250 | 1000 | 250 | 125 | 2625 | 6000 |\n",
		"| 1200 | every saving on, again | 1000 | ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "| 150 |") {
		t.Fatalf("report shows a rate the off runs did not measure:\n%s", out.String())
	}
	var none strings.Builder
	reportSavings(&none, first, nil)
	if none.Len() != 0 {
		t.Fatalf("report without off runs: %q", none.String())
	}
}

// TestFloorReport: the floor of an order is its HTTP request, three Redis
// scripts, two JetStream messages, one event relayed and one consumed; the
// bound over it is the kit's CPU per order over the kit's plus the floor;
// the RESULT line carries both.
func TestFloorReport(t *testing.T) {
	t.Parallel()
	f := &floorResult{httpUS: 100, redisUS: 40, redisSrv: 15, natsUS: 150, natsSrv: 60, relayUS: 80, relayPG: 70, inboxUS: 400, inboxPG: 300,
		httpN: 1, redisN: 1, jsN: 1, relayN: 1, inboxN: 1}
	if got := f.perOrder(); got != 100+3*40+2*150+80+400 {
		t.Fatalf("floor per order %v, want 1000", got)
	}
	// The kit: 1,000 orders in 1 s, 1.2 s of PostgreSQL and 0.4 s of client
	// CPU: 1,600 µs per order, 1,200 of them PostgreSQL's.
	k := kitResult{orders: 1000, window: time.Second, pgCPU: 1200 * time.Millisecond, clientCPU: 400 * time.Millisecond}
	// The stack: 500 orders in 1 s, 0.8 s of PostgreSQL: 1,600 µs per order,
	// 400 beyond the kit's.
	s := rateResult{offered: 1200, window: time.Second, orders: 500, cpu: [nComponents]time.Duration{800 * time.Millisecond, 500 * time.Millisecond}}
	if got, want := floorBound(1600, 1000), 1600.0/2600; got != want {
		t.Fatalf("floorBound = %v, want %v", got, want)
	}
	var res strings.Builder
	printStackResult(&res, options{}, [2]kitResult{k, k}, []rateResult{s}, nil, f)
	if want := " stack_floor_cpu_us_per_order=1000 stack_vs_kit_floor_bound=0.62"; !strings.Contains(res.String(), want) {
		t.Fatalf("RESULT:\n%s\nwant it to hold %q", res.String(), want)
	}
	var report strings.Builder
	reportFloor(&report, f, [2]kitResult{k, k}, &s)
	for _, want := range []string{"| **the floor of one order beyond the kit's transaction** | | | | | **1000** |",
		"took 1600 µs/order, 400 beyond the kit's; the floor's PostgreSQL part: 370", "1600 / (1600 + 1000) = 0.62"} {
		if !strings.Contains(report.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, report.String())
		}
	}
	var none strings.Builder
	reportFloor(&none, nil, [2]kitResult{k, k}, &s)
	if none.Len() != 0 {
		t.Fatalf("report without a floor: %q", none.String())
	}
}

// TestFloorMeasures: each part of the floor runs for real (a throwaway
// redis-server and nats-server -js, the test's PostgreSQL, which must run
// on this machine for its CPU to be read) and counts operations and CPU.
// Not parallel: the floor reads the whole server's CPU, and the package's
// other tests' sessions, ending while it reads, would move it (one did,
// and the inbox part came out negative).
func TestFloorMeasures(t *testing.T) {
	ctx := pgtest.Context(t, 2*time.Minute)
	pool := pgtest.Pool(t)
	sr := &stackRun{pool: pool, o: options{}}
	var err error
	if sr.nodes, err = stackNodes(ctx, pool, false); err != nil {
		t.Fatal(err)
	}
	if err := sr.startBrokers(ctx); err != nil {
		t.Fatal(err)
	}
	defer sr.stopBrokers()
	f, err := sr.measureFloor(ctx, 300*time.Millisecond, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if f.httpN == 0 || f.redisN == 0 || f.jsN == 0 || f.relayN != 2000 || f.inboxN == 0 {
		t.Fatalf("operations measured: HTTP %d, Redis %d, JetStream %d, relay %d, inbox %d", f.httpN, f.redisN, f.jsN, f.relayN, f.inboxN)
	}
	if f.httpUS <= 0 || f.redisUS <= f.redisSrv || f.redisSrv <= 0 || f.natsUS <= f.natsSrv || f.natsSrv <= 0 ||
		f.relayUS <= f.relayPG || f.relayPG <= 0 || f.inboxUS <= f.inboxPG || f.inboxPG <= 0 {
		t.Fatalf("CPU per operation: %+v", f)
	}
}
