package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgtest"
)

// chromiumPath finds Debian's chromium (or a chromium on PATH).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	t.Fatal("the browser test needs Chromium: install the Debian package chromium (apt-get install chromium)")
	return ""
}

// TestPageInBrowser opens the operator view in headless Chromium, runs a
// small sale on the real stack and checks what the page shows: the
// bucket bars drain to the final stock on both sides, the order counter
// reaches the database's count, the pool, outbox and replication signals
// agree with the server, and a reconciliation failure injected on purpose
// turns the reconciliation line red.
func TestPageInBrowser(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	a, base, cfg := pageService(t, stackReal, 12, 3)
	eventually := openPage(t, ctx, base).eventually
	eventually("the stream live", `document.getElementById("conn").textContent === "live"`)
	eventually("3 buckets of 4 units on both sides", `(() => {
		const bs = [...document.querySelectorAll("#buckets .bucket")];
		return bs.length === 3 && bs.every(b => b.dataset.pg === "4" && b.dataset.front === "4"
			&& b.querySelector(".pg i").style.width === "100%");
	})()`)

	// The sale: 30 buyers for 12 units.
	for u := 1; u <= 30; u++ {
		for {
			code, _ := do(t, "POST", base+"/orders", map[string]any{"user_id": u})
			if code != http.StatusServiceUnavailable {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	eventually("every bucket bar drained to 0 on both sides", `(() => {
		const bs = [...document.querySelectorAll("#buckets .bucket")];
		return bs.length === 3 && bs.every(b => b.dataset.pg === "0" && b.dataset.front === "0"
			&& b.querySelector(".pg i").style.width === "0%" && b.querySelector(".front i").style.width === "0%")
			&& document.getElementById("stock").textContent === "0";
	})()`)
	var dbOrders int64
	for dbOrders < int64(cfg.Stock) && ctx.Err() == nil {
		if err := a.s.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{cfg.Schema, "orders"}.Sanitize()).Scan(&dbOrders); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if dbOrders != int64(cfg.Stock) {
		t.Fatalf("%d orders in the database, want %d", dbOrders, cfg.Stock)
	}
	eventually("the order counter at the database's count "+strconv.FormatInt(dbOrders, 10),
		fmt.Sprintf(`document.getElementById("orders").textContent === "%d"`, dbOrders))
	checkSignalsInBrowser(t, ctx, a, eventually)
	eventually("a passing reconciliation in green", `(() => {
		const r = document.getElementById("reconcile");
		return r.dataset.status === "PASS" && getComputedStyle(r).borderLeftColor === "rgb(29, 122, 51)";
	})()`)

	injectReconcileFailure(t, ctx, a)
	eventually("the reconciliation line red with the difference named", `(() => {
		const r = document.getElementById("reconcile");
		const st = getComputedStyle(r);
		return r.dataset.status === "FAIL" && r.querySelector(".status").textContent === "FAIL" && r.querySelector("details").open
			&& st.borderLeftColor === "rgb(198, 40, 40)" && st.color === "rgb(198, 40, 40)"
			&& [...r.querySelectorAll("li")].some(li => li.textContent.startsWith("FAIL"));
	})()`)
}

// checkSignalsInBrowser checks the signals next to the charts against the
// server once the sale is quiet: the pool's size is the pool's MaxConns and
// its use within it, the outbox's oldest waiting age is the store's (0: the
// outbox drained), the replication tile says "no standby" when
// pg_stat_replication is empty (or names each standby), and the pool and
// outbox-age charts are drawn.
func checkSignalsInBrowser(t *testing.T, ctx context.Context, a *api, eventually func(what, js string)) {
	t.Helper()
	waitQuiet(t, ctx, a)
	st, err := a.s.Outbox.Stats(ctx, a.s.Pool)
	if err != nil || st.OldestWaiting != 0 {
		t.Fatalf("outbox stats once quiet: %+v, %v; want nothing waiting", st, err)
	}
	var standbys int
	if err := a.s.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication`).Scan(&standbys); err != nil {
		t.Fatal(err)
	}
	maxConns := a.s.Pool.Stat().MaxConns()
	eventually(fmt.Sprintf("the pool tile at n / %d", maxConns), fmt.Sprintf(`(() => {
		const p = document.getElementById("pool");
		return p.dataset.max === "%d" && +p.dataset.acquired >= 0 && +p.dataset.acquired <= %d
			&& p.textContent === p.dataset.acquired + " / %d" && document.getElementById("poolmax").textContent === "%d";
	})()`, maxConns, maxConns, maxConns, maxConns))
	eventually("the outbox's oldest waiting age at 0", `(() => {
		const o = document.getElementById("outboxage");
		return o.dataset.seconds === "0" && o.textContent === "0.0";
	})()`)
	replication := `document.getElementById("replication").textContent === "no standby"`
	if standbys > 0 {
		replication = fmt.Sprintf(`document.getElementById("replication").dataset.standbys === "%d"`, standbys)
	}
	eventually(fmt.Sprintf("the replication tile for %d standbys", standbys), replication)
	eventually("the pool and outbox-age charts drawn", `document.querySelector("#chart-pool polyline") !== null
		&& document.querySelector("#chart-pool text").textContent.startsWith("max ")
		&& document.querySelector("#chart-outboxage text") !== null`)
}

// browserPage is a page open in headless Chromium.
type browserPage struct {
	t   *testing.T
	ctx context.Context // the test's deadline
	b   context.Context // the browser tab
}

// openPage opens base's operator view in headless Chromium, closed when
// the test ends.
func openPage(t *testing.T, ctx context.Context, base string) *browserPage {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // as root Chromium needs it
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(400, 900), // a phone
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	if _, err := chromedp.Run(bctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatalf("open the page in Chromium: %v", err)
	}
	return &browserPage{t: t, ctx: ctx, b: bctx}
}

// eventually evaluates a JavaScript condition until it holds; at the
// test's deadline it fails the test with what the page shows.
func (p *browserPage) eventually(what, js string) {
	p.t.Helper()
	for {
		ok, err := chromedp.Run(p.b, chromedp.Evaluate[bool](js))
		if err != nil {
			p.t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if p.ctx.Err() != nil {
			html, _ := chromedp.Run(p.b, chromedp.OuterHTML("body"))
			p.t.Fatalf("the page never showed %s; it shows:\n%s", what, html)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
