package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/web"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// sseEvent is one server-sent event as read off the wire.
type sseEvent struct {
	Name, ID string
	Data     web.Snapshot
}

// openStream opens GET /events and returns a reader of its events.
func openStream(t *testing.T, ctx context.Context, base string) (*http.Response, func() sseEvent) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /events = %d %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	next := func() sseEvent {
		t.Helper()
		var ev sseEvent
		var data string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("event stream: %v", err)
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				if ev.Name == "" && data == "" {
					continue // the end of a comment
				}
				if ev.Name != "snapshot" || ev.ID == "" {
					t.Fatalf("event %q id %q: want event: snapshot with an id", ev.Name, ev.ID)
				}
				if err := json.Unmarshal([]byte(data), &ev.Data); err != nil {
					t.Fatalf("event data is not a snapshot: %v: %s", err, data)
				}
				return ev
			case strings.HasPrefix(line, ":"): // comment (keep-alive)
			case strings.HasPrefix(line, "event: "):
				ev.Name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				ev.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				if data != "" {
					t.Fatalf("event with two data lines: the JSON must be one line")
				}
				data = strings.TrimPrefix(line, "data: ")
			default:
				t.Fatalf("unexpected line in the event stream: %q", line)
			}
		}
	}
	return resp, next
}

// pageService starts the HTTP API (with the operator view) on a small sale.
func pageService(t *testing.T, stack string, stock, buckets int) (*api, string, config) {
	t.Helper()
	ctx := pgtest.Context(t, 3*time.Minute)
	cfg := smallConfig(t)
	useStack(t, &cfg, stack, false)
	cfg.Stock, cfg.Buckets, cfg.OrderTTL, cfg.FrontDrift = stock, buckets, time.Hour, 0
	a, err := newAPI(ctx, pgtest.Pool(t), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The page tests wait for the next check after a change: under the
	// race detector on a loaded machine a check of this small sale can
	// take seconds, and the default pace would then wait minutes.
	a.Monitor().SetCheckPace(1)
	srv := serveTest(t, a)
	t.Cleanup(func() { srv.Close(); a.Close() })
	return a, srv.URL, cfg
}

// injectReconcileFailure moves one allocated unit back to available in
// PostgreSQL behind the ledger's back: an unexplained difference.
func injectReconcileFailure(t *testing.T, ctx context.Context, a *api) {
	t.Helper()
	tag, err := a.s.Pool.Exec(ctx, `UPDATE `+pgx.Identifier{a.s.Schema, "sku_inventory"}.Sanitize()+`
		SET available_stock = available_stock + 1, allocated_stock = allocated_stock - 1
		WHERE ctid = (SELECT ctid FROM `+pgx.Identifier{a.s.Schema, "sku_inventory"}.Sanitize()+` WHERE allocated_stock > 0 LIMIT 1)`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("inject a reconciliation failure: %v (%d rows)", err, tag.RowsAffected())
	}
}

// TestEventStream checks the stream's format and content: a snapshot at
// once, then new ones as orders come in, the stock per bucket in
// PostgreSQL and at the front door, the order count equal to the
// database's, the audit and reconciliation lines PASS when the service is
// quiet and FAIL, with the difference named, after a failure is injected.
func TestEventStream(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	a, base, cfg := pageService(t, stackMemory, 6, 2)

	resp, next := openStream(t, ctx, base)
	defer resp.Body.Close()
	first := next()
	if len(first.Data.Buckets) != cfg.Buckets {
		t.Fatalf("first snapshot has %d buckets, want %d", len(first.Data.Buckets), cfg.Buckets)
	}
	for _, b := range first.Data.Buckets {
		if b.Total != 3 || b.PG != 3 || b.Front != 3 {
			t.Errorf("bucket %+v before the sale: want 3 of 3 on both sides", b)
		}
	}
	for u := 1; u <= 8; u++ {
		do(t, "POST", base+"/orders", map[string]any{"user_id": u})
	}
	var dbOrders int64
	var last sseEvent
	prevID := first.ID
	for {
		last = next()
		if last.ID == prevID {
			t.Fatalf("two events with id %s", last.ID)
		}
		prevID = last.ID
		if err := a.s.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{cfg.Schema, "orders"}.Sanitize()).Scan(&dbOrders); err != nil {
			t.Fatal(err)
		}
		if last.Data.Orders == 6 && dbOrders == 6 && last.Data.Reconcile.Status == "PASS" && last.Data.Audit.Status == "PASS" {
			break
		}
	}
	for _, b := range last.Data.Buckets {
		if b.PG != 0 || b.Front != 0 {
			t.Errorf("bucket %+v after selling out: want 0 on both sides", b)
		}
	}
	if len(last.Data.History) < 2 {
		t.Errorf("history has %d points, want a series", len(last.Data.History))
	}
	if last.Data.Queue != 0 || last.Data.Outbox != 0 {
		t.Errorf("backlogs %d/%d once quiet, want 0/0", last.Data.Queue, last.Data.Outbox)
	}
	var standbys int
	if err := a.s.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication`).Scan(&standbys); err != nil {
		t.Fatal(err)
	}
	if p := last.Data.Pool; p.Max != a.s.Pool.Stat().MaxConns() || p.Acquired < 0 || p.Acquired > p.Max || len(last.Data.Standbys) != standbys {
		t.Errorf("pool %+v (the pool's MaxConns %d), %d standbys (pg_stat_replication: %d)", p, a.s.Pool.Stat().MaxConns(),
			len(last.Data.Standbys), standbys)
	}

	injectReconcileFailure(t, ctx, a)
	for {
		ev := next()
		if ev.Data.Reconcile.Status != "FAIL" {
			continue
		}
		joined := strings.Join(ev.Data.Reconcile.Lines, "\n")
		if !strings.Contains(joined, "FAIL") || !strings.Contains(joined, "bucket") {
			t.Errorf("reconciliation FAIL lines do not name the difference:\n%s", joined)
		}
		pg := 0
		for _, b := range ev.Data.Buckets {
			pg += int(b.PG)
		}
		if pg != 1 {
			t.Errorf("PostgreSQL stock after the injection = %d, want 1", pg)
		}
		// The same round's audit found the deviation (allocated stock
		// below the live orders): /metrics says so.
		if ev.Data.Audit.Status != "FAIL" || ev.Data.Audit.Failed == 0 {
			t.Errorf("audit after the injection: %s with %d failed checks, want FAIL", ev.Data.Audit.Status, ev.Data.Audit.Failed)
		} else if n := value(scrape(t, base), "seckill_audit_failed_checks", "mode", "live"); n < 1 {
			t.Errorf("seckill_audit_failed_checks{mode=live} = %v after the injection, want at least 1", n)
		}
		break
	}
}

// TestEventStreamDisconnect checks that a stream's handler returns when
// its client goes away, even when nothing is being written to it, and that
// Close ends the streams still open.
func TestEventStreamDisconnect(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	a, base, _ := pageService(t, stackMemory, 2, 1)
	a.Monitor().SetKeepAlive(time.Hour)

	var cancels []context.CancelFunc
	for range 5 {
		cctx, cancel := context.WithCancel(ctx)
		cancels = append(cancels, cancel)
		resp, next := openStream(t, cctx, base)
		defer resp.Body.Close()
		next()
	}
	waitStreams := func(want int64) {
		t.Helper()
		for a.Monitor().Streams() != want {
			if ctx.Err() != nil {
				t.Fatalf("%d streams open, want %d", a.Monitor().Streams(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitStreams(5)
	// No more snapshots and no keep-alive: a handler can only learn of
	// its client's departure from the request's context.
	a.Monitor().Stop()
	for _, c := range cancels[:3] {
		c()
	}
	waitStreams(2)

	// Close ends the remaining streams: their bodies reach EOF.
	resp, next := openStream(t, ctx, base)
	defer resp.Body.Close()
	next()
	waitStreams(3)
	a.Monitor().Close()
	waitStreams(0)
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Errorf("stream after Close: %v, want a clean end", err)
	}
}

// TestPage checks GET /: the embedded page, which opens the stream and
// has the elements it fills; nothing else under /.
func TestPage(t *testing.T) {
	t.Parallel()
	_, base, _ := pageService(t, stackMemory, 2, 1)
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{`new EventSource("events")`, `id="buckets"`, `id="orders"`, `id="audit"`, `id="reconcile"`, `name="viewport"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(string(body), "<script src") || strings.Contains(string(body), `rel="stylesheet"`) {
		t.Errorf("page loads something from elsewhere: it must be one file")
	}
	resp, err = http.Get(base + "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing = %d, want 404", resp.StatusCode)
	}
}

// TestPageDuringRun runs a small sale with the operator view on (as
// go run ./examples/seckill does) and checks that the page is served
// during the run and that, at its end, the stream carries the run's own
// result: the orders the report counts and its audit and reconciliation.
func TestPageDuringRun(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	cfg := smallConfig(t)
	useStack(t, &cfg, stackMemory, false)
	hooks, url, stop, err := pageHooks("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if resp, err := http.Get(url); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET / before the sale started = %d, want 503", resp.StatusCode)
	}
	started := hooks.started
	streamOpen := make(chan struct{})
	var next func() sseEvent
	hooks.started = func(s *service) {
		started(s)
		resp, n := openStream(t, ctx, strings.TrimSuffix(url, "/"))
		t.Cleanup(func() { resp.Body.Close() })
		next = n
		close(streamOpen)
	}
	rep, err := runSaleHooked(ctx, pgtest.Pool(t), cfg, nil, nil, hooks)
	if err != nil {
		t.Fatal(err)
	}
	<-streamOpen
	for {
		ev := next()
		// Mid-run audits are live and may pass too; the run's own audit
		// is the one read at rest, which only finish publishes.
		if ev.Data.Audit.Mode != "at_rest" {
			continue
		}
		if ev.Data.Orders != rep.Created || ev.Data.Audit.Status != "PASS" || ev.Data.Reconcile.Status != "PASS" {
			t.Errorf("final snapshot: %d orders, audit %s, reconciliation %s; report %d orders", ev.Data.Orders, ev.Data.Audit.Status, ev.Data.Reconcile.Status, rep.Created)
		}
		if want := web.AuditLine(rep.Checks, false).Lines; strings.Join(ev.Data.Audit.Lines, "\n") != strings.Join(want, "\n") {
			t.Errorf("the page's audit lines are not the report's:\n%s\nwant\n%s", strings.Join(ev.Data.Audit.Lines, "\n"), strings.Join(want, "\n"))
		}
		if ev.Data.Paid != rep.Paid || ev.Data.Cancelled != rep.Cancelled {
			t.Errorf("page paid/cancelled %d/%d, report %d/%d", ev.Data.Paid, ev.Data.Cancelled, rep.Paid, rep.Cancelled)
		}
		return
	}
}
