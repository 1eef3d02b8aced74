package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/seckilltest"
)

// runMain makes the test binary run the quick start's main instead of the
// tests, so a test runs the program itself: flags, exit status and all.
const runMain = "SECKILL_QUICKSTART_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMain) == "1" {
		main()
		os.Exit(0)
	}
	seckilltest.Main(m)
}

// quickstart runs the program against schema of db and returns its
// standard output; a non-zero exit fails the test with its output.
func quickstart(t *testing.T, db *seckilltest.DB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-schema", db.Schema)
	cmd.Env = append(os.Environ(), runMain+"=1", "SECKILL_DATABASE_URL="+db.URL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("quickstart: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

var (
	createdLine   = regexp.MustCompile(`^order (\d+) created: bucket (\d+) has (\d+) left$`)
	publishedLine = regexp.MustCompile(`^published orders ORDER_CREATED \{"order_id": (\d+)\}$`)
)

// The quick start, run twice on a schema of its own (migrated by the
// program itself): each run creates one order, answers the redelivery of
// its message from the inbox, and relays exactly its ORDER_CREATED event;
// the database then holds two orders, two units allocated, a consistent
// ledger and nothing left to publish.
func TestQuickstart(t *testing.T) {
	db := seckilltest.New(t) // an empty schema: the program migrates it
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var orderIDs []int64
	for run := range 2 {
		out := quickstart(t, db)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 {
			t.Fatalf("run %d: want 3 lines of output, got:\n%s", run, out)
		}
		m := createdLine.FindStringSubmatch(lines[0])
		if m == nil {
			t.Fatalf("run %d: first line %q is not an order created", run, lines[0])
		}
		id, _ := strconv.ParseInt(m[1], 10, 64)
		orderIDs = append(orderIDs, id)
		bucket, _ := strconv.Atoi(m[2])
		left, _ := strconv.Atoi(m[3])
		var avail int
		if err := db.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT available_stock FROM %s.sku_inventory
			WHERE activity_id = 1 AND sku_id = 7 AND bucket_no = $1`, pgx.Identifier{db.Schema}.Sanitize()), bucket).Scan(&avail); err != nil {
			t.Fatal(err)
		}
		if avail != left {
			t.Errorf("run %d: the program says bucket %d has %d left, the database %d", run, bucket, left, avail)
		}
		if lines[1] != "duplicate message: answered ORDER_CREATED" {
			t.Errorf("run %d: the redelivery printed %q, want the inbox's stored answer", run, lines[1])
		}
		p := publishedLine.FindStringSubmatch(lines[2])
		if p == nil || p[1] != m[1] {
			t.Errorf("run %d: want this run's event (order %s) published, got %q", run, m[1], lines[2])
		}
	}
	if orderIDs[0] == orderIDs[1] {
		t.Fatalf("both runs created order %d", orderIDs[0])
	}

	s := pgx.Identifier{db.Schema}.Sanitize()
	count := func(query string, args ...any) int {
		t.Helper()
		var n int
		if err := db.Pool.QueryRow(ctx, fmt.Sprintf(query, s), args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	checks := []struct {
		what  string
		query string
		arg   any
		want  int
	}{
		{"orders", `SELECT count(*) FROM %s.orders WHERE status = $1`, order.StatusCreated, 2},
		{"order items", `SELECT count(*) FROM %s.order_items WHERE order_id = ANY($1)`, orderIDs, 2},
		{"ORDERED reservations", `SELECT count(*) FROM %s.inventory_reservation WHERE status = $1`, inventory.StatusOrdered, 2},
		{"ALLOCATE ledger rows", `SELECT count(*) FROM %s.inventory_ledger WHERE ledger_type = $1`, 10, 2},
		{"units allocated", `SELECT sum(allocated_stock)::int FROM %s.sku_inventory WHERE sku_id = $1`, 7, 2},
		{"units available", `SELECT sum(available_stock)::int FROM %s.sku_inventory WHERE sku_id = $1`, 7, 98},
		{"processed inbox rows", `SELECT count(*) FROM %s.consumer_inbox WHERE status = $1`, inbox.StatusProcessed, 2},
		{"SENT events", `SELECT count(*) FROM %s.event_outbox WHERE status = $1`, outbox.StatusSent, 2},
		{"events not SENT", `SELECT count(*) FROM %s.event_outbox WHERE status <> $1`, outbox.StatusSent, 0},
	}
	for _, c := range checks {
		if got := count(c.query, c.arg); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
	stock, err := inventory.New(inventory.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	findings, err := stock.Audit(ctx, db.Pool, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(findings) > 0 {
		t.Errorf("inventory audit findings: %+v", findings)
	}
}

// TestREADMEShowsTheProgram fails when the README's first Go block is not
// this program, character for character (the quick start a reader copies
// is the one this package's test runs), or when the program outgrows 120
// lines.
func TestREADMEShowsTheProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	program, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(program), "\n"); n > 120 {
		t.Errorf("main.go has %d lines: a quick start fits in 120", n)
	}
	block, ok := firstBlock(string(readme), "go")
	if !ok {
		t.Fatal("README.md has no ```go block")
	}
	if block != string(program) {
		t.Errorf("README.md's first Go block differs from examples/quickstart/main.go at line %d: copy main.go into the README",
			firstDifference(block, string(program)))
	}
}

// firstBlock returns the text of the first fenced code block of markdown
// whose info string is lang, every line ending in a newline.
func firstBlock(markdown, lang string) (string, bool) {
	var b strings.Builder
	in := false
	for line := range strings.Lines(markdown) {
		switch {
		case !in && strings.TrimRight(line, "\n") == "```"+lang:
			in = true
		case in && strings.TrimRight(line, "\n") == "```":
			return b.String(), true
		case in:
			b.WriteString(line)
		}
	}
	return "", false
}

// firstDifference returns the number of the first line where a and b
// differ (1-based).
func firstDifference(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}
