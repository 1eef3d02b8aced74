package drills

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/patroniharness"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// orderTimes records, per order, when its consumer started the delivery
// that created it and when that delivery was acknowledged.
type orderTimes struct {
	mu      sync.Mutex
	started map[int64]time.Time // the first attempt of every order's message
	acked   map[int64]time.Time // ORDER_CREATED acknowledged
}

func (ot *orderTimes) handle(r *rig, inner func(ctx context.Context, m *msg) (flow.Outcome, error)) func(ctx context.Context, m *msg) (flow.Outcome, error) {
	return func(ctx context.Context, m *msg) (flow.Outcome, error) {
		ot.mu.Lock()
		if _, ok := ot.started[m.M.OrderID]; !ok {
			ot.started[m.M.OrderID] = time.Now()
		}
		ot.mu.Unlock()
		out, err := inner(ctx, m)
		if err == nil && !out.Duplicate && out.Code == flow.CodeOrderCreated {
			ot.mu.Lock()
			ot.acked[out.OrderID] = time.Now()
			ot.mu.Unlock()
		}
		return out, err
	}
}

// split returns the orders acknowledged before t and the orders whose
// delivery started after t.
func (ot *orderTimes) split(t time.Time) (ackedBefore, startedAfter []int64) {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	for id, at := range ot.acked {
		if at.Before(t) {
			ackedBefore = append(ackedBefore, id)
		}
	}
	for id, at := range ot.started {
		if at.After(t) {
			startedAfter = append(startedAfter, id)
		}
	}
	return ackedBefore, startedAfter
}

// assertInvariants runs the correctness queries of testdata/invariants on
// the server of pool: each returns the rows that break its invariant.
func assertInvariants(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema, where string) {
	t.Helper()
	files, err := filepath.Glob("../../../testdata/invariants/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no invariant queries in testdata/invariants: %v", err)
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sql := strings.ReplaceAll(string(b), "{schema}", pgx.Identifier{schema}.Sanitize())
		rows, err := pool.Query(ctx, sql)
		if err != nil {
			t.Fatalf("%s: %s: %v", where, filepath.Base(f), err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %s: %v", where, filepath.Base(f), err)
		}
		if n > 0 {
			t.Errorf("%s: %s: %d rows break the invariant", where, filepath.Base(f), n)
		}
	}
	t.Logf("%s: the %d invariant queries of testdata/invariants hold", where, len(files))
}

// TestPgBackRestPointInTimeRecovery: a pgBackRest stanza on the Patroni
// cluster (the repository in the cluster's temporary directory), a full
// backup before the sale, and every WAL segment archived with
// archive-push while the sale runs. Then, into an isolated instance (its
// own directory and port, no archiving, no replication):
//   - a restore to a timestamp in the middle of the sale: the invariant
//     queries of testdata/invariants hold there, every order acknowledged
//     before that instant is present, and none whose delivery started after
//     it;
//   - a restore to the end of the archive: every acknowledged order is
//     present (RPO 0 once the last segment is archived), the invariants
//     hold and the order count is the cluster's.
//
// It reports RTO (restore and recovery times), RPO, and the size of a full
// backup and of the WAL archive per 10,000 orders.
func TestPgBackRestPointInTimeRecovery(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 8*time.Minute)
	c := startPatroni(t, ctx, patroniharness.Options{Backup: true})
	leader := c.Nodes[0]
	b := c.Backup()
	if err := b.CreateStanza(ctx, leader); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := b.Full(ctx, leader); err != nil {
		t.Fatal(err)
	}
	t.Logf("full backup of the empty cluster in %v", time.Since(began).Round(time.Millisecond))

	pool, relayPool, admin := haPools(t, c)
	const schema = "pitr_drill"
	r := newRig(t, rigConfig{Pool: pool, Admin: admin, Schema: schema, Stock: 400, Buckets: 4,
		Tx: pgtx.Options{ResolveCommit: true}, Timeout: 8 * time.Minute})
	msgs := r.messages(plan{Users: 400, DoubleClick: 10, Expired: 5, Pay: 2})
	ot := &orderTimes{started: map[int64]time.Time{}, acked: map[int64]time.Time{}}
	stopRelays := r.startRelays(relayPool, 2, outbox.RelayConfig{})
	payments := r.startPayers(2, len(msgs))
	canceller := r.startCanceller(1, 20, 20*time.Millisecond)
	// A sale of a few seconds, so the target falls well inside it.
	q := r.consume(msgs, deliverConfig{Workers: 8, Handle: ot.handle(r, paced(r, 60*time.Millisecond, nil, nil))})
	q.waitAcked(int64(len(msgs)) / 2)
	target := time.Now()
	q.waitAcked(int64(len(msgs)) * 3 / 5)
	r.finishSale(msgs, q, payments, canceller, stopRelays)
	if err := b.ArchiveNow(ctx, leader); err != nil {
		t.Fatal(err)
	}
	var liveOrders int64
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pitr_drill.orders`).Scan(&liveOrders); err != nil {
		t.Fatal(err)
	}

	// Restore to the middle of the sale.
	mid, err := b.Restore(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	midPool := newPool(t, mid.URL, 2)
	ackedBefore, startedAfter := ot.split(target)
	var present, later int
	if err := midPool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE order_id = ANY($1)), count(*) FILTER (WHERE order_id = ANY($2)) FROM pitr_drill.orders`,
		ackedBefore, startedAfter).Scan(&present, &later); err != nil {
		t.Fatal(err)
	}
	var midOrders int64
	if err := midPool.QueryRow(ctx, `SELECT count(*) FROM pitr_drill.orders`).Scan(&midOrders); err != nil {
		t.Fatal(err)
	}
	t.Logf("restore to %s (mid-sale): %d orders; %d of the %d acknowledged before the target present, %d of the %d started after it; RTO %v (restore %v, recovery %v)",
		target.UTC().Format("15:04:05.000"), midOrders, present, len(ackedBefore), later, len(startedAfter),
		(mid.Restore + mid.Recovery).Round(time.Millisecond), mid.Restore.Round(time.Millisecond), mid.Recovery.Round(time.Millisecond))
	if present != len(ackedBefore) || len(ackedBefore) == 0 {
		t.Errorf("restore to the target: %d of the %d orders acknowledged before it are present", present, len(ackedBefore))
	}
	if later != 0 || len(startedAfter) == 0 {
		t.Errorf("restore to the target: %d of the %d orders started after it are present", later, len(startedAfter))
	}
	if midOrders >= liveOrders {
		t.Errorf("the mid-sale restore has %d orders, the cluster %d: not a point in the middle", midOrders, liveOrders)
	}
	assertInvariants(t, ctx, midPool, schema, "restore to the middle of the sale")
	midPool.Close()
	if err := mid.Stop(); err != nil {
		t.Errorf("stop the restored instance: %v", err)
	}

	// Restore to the end of the archive.
	end, err := b.Restore(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	endPool := newPool(t, end.URL, 2)
	created := r.ackedCreated()
	var all, endOrders int64
	if err := endPool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE order_id = ANY($1)), count(*) FROM pitr_drill.orders`, created).Scan(&all, &endOrders); err != nil {
		t.Fatal(err)
	}
	t.Logf("restore to the end of the archive: %d orders (the cluster has %d); %d of the %d acknowledged present (RPO 0 orders); RTO %v (restore %v, recovery %v)",
		endOrders, liveOrders, all, len(created), (end.Restore + end.Recovery).Round(time.Millisecond), end.Restore.Round(time.Millisecond), end.Recovery.Round(time.Millisecond))
	if all != int64(len(created)) || endOrders != liveOrders {
		t.Errorf("restore to the end: %d of the %d acknowledged orders present, %d orders of the cluster's %d", all, len(created), endOrders, liveOrders)
	}
	assertInvariants(t, ctx, endPool, schema, "restore to the end")
	endPool.Close()
	if err := end.Stop(); err != nil {
		t.Errorf("stop the restored instance: %v", err)
	}

	// Sizes: a full backup after the sale against the one before it, and
	// the WAL the sale archived.
	if err := b.Full(ctx, leader); err != nil {
		t.Fatal(err)
	}
	backups, archive, err := b.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(backups) < 2 {
		t.Fatalf("pgbackrest info lists %d backups, want 2", len(backups))
	}
	first, last := backups[0], backups[len(backups)-1]
	per := func(n int64) float64 { return float64(n) / float64(liveOrders) * 10000 / (1 << 20) }
	t.Logf("backups: %s %s %d bytes (repository %d), %s %s %d bytes (repository %d); WAL archive %d bytes",
		first.Label, first.Type, first.Size, first.RepoSize, last.Label, last.Type, last.Size, last.RepoSize, archive)
	t.Logf("per 10,000 orders: full backup +%.1f MiB (repository +%.1f MiB compressed), WAL archive %.1f MiB",
		per(last.Size-first.Size), per(last.RepoSize-first.RepoSize), per(archive))
}
