package sqlplan_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
)

// hotRun is the number of allocations of TestBucketUpdateIsHOT: enough
// to fill the bucket's page several times over were its new versions
// not HOT (a page of sku_inventory, fillfactor 80, holds about 60 of
// them).
const hotRun = 200

// TestBucketUpdateIsHOT checks that the decrement of a bucket stays a
// HOT update (it changes no indexed column of sku_inventory, whose
// fillfactor leaves room on the page): a run of allocations on one
// bucket, the direct form and the queued form with pgtx.Abort
// alternating, must grow n_tup_hot_upd of sku_inventory as much as
// n_tup_upd. A non-HOT update writes a new entry into every index of the
// table for each unit sold; an index on a counter column would do that,
// as the subtest shows. The allocations run on one connection, which
// then flushes its statistics (pg_stat_force_next_flush); the counters
// are polled with a deadline.
func TestBucketUpdateIsHOT(t *testing.T) {
	ctx := pgtest.Context(t, 2*time.Minute)
	upd, hot := allocationRun(t, ctx, hotRun, "")
	t.Logf("%d allocations on one bucket: n_tup_upd +%d, n_tup_hot_upd +%d", hotRun, upd, hot)
	if upd < hotRun {
		t.Fatalf("n_tup_upd grew by %d, want at least %d (one update of the bucket per allocation)", upd, hotRun)
	}
	if hot != upd {
		t.Errorf("n_tup_hot_upd grew by %d but n_tup_upd by %d: the bucket update is not (always) a HOT update", hot, upd)
	}

	// The mutation evidence: with an index on available_stock, the same
	// run's updates are not HOT, and the check sees it.
	t.Run("IndexOnACounterIsReported", func(t *testing.T) {
		const n = 20
		upd, hot := allocationRun(t, ctx, n, "CREATE INDEX ON {schema}.sku_inventory (available_stock)")
		t.Logf("with an index on available_stock, %d allocations: n_tup_upd +%d, n_tup_hot_upd +%d", n, upd, hot)
		if upd < n || hot == upd {
			t.Errorf("n_tup_upd +%d, n_tup_hot_upd +%d: want at least %d updates, not all HOT", upd, hot, n)
		}
	})
}

// allocationRun migrates a fresh schema, runs setup in it ({schema}
// replaced by the quoted schema; "" for none), provisions one SKU of one
// bucket and makes n allocations of one unit on it, each in a
// transaction of its own on one connection; it returns how much
// n_tup_upd and n_tup_hot_upd of sku_inventory grew.
func allocationRun(t *testing.T, ctx context.Context, n int, setup string) (upd, hot int64) {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	if _, err := migrate.Apply(ctx, pool, schema, inventory.Migrations); err != nil {
		t.Fatal(err)
	}
	if setup != "" {
		if _, err := pool.Exec(ctx, strings.ReplaceAll(setup, "{schema}", pgx.Identifier{schema}.Sanitize())); err != nil {
			t.Fatal(err)
		}
	}
	store, err := inventory.New(inventory.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Provision(ctx, pool, inventory.SKU{ActivityID: 1, SKUID: 1, Stock: int32(n), Buckets: 1}); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Conn(t)
	updBefore, hotBefore := tableUpdates(t, ctx, conn, schema, "sku_inventory", 0)
	for i := range n {
		now := time.Now()
		req := seckill.Request{ReservationID: uuid.Must(uuid.NewV7()), RequestID: uuid.Must(uuid.NewV7()),
			MessageID: uuid.Must(uuid.NewV7()), ActivityID: 1, SKUID: 1, UserID: int64(i + 1), Bucket: 0, Quantity: 1}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.AcquireReservation(ctx, tx, inventory.NewReservation{Request: req, ReservedAt: now, ExpiresAt: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		a := inventory.Allocation{Request: req}
		if i%2 == 0 {
			_, err = store.AllocateBucket(ctx, tx, a)
		} else {
			var b pgx.Batch
			if err = store.QueueAllocateBucket(&b, a, nil, pgtx.Abort); err == nil {
				err = tx.SendBatch(ctx, &b).Close()
			}
		}
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		t.Fatal(err)
	}
	upd, hot = tableUpdates(t, ctx, conn, schema, "sku_inventory", updBefore+int64(n))
	return upd - updBefore, hot - hotBefore
}

// tableUpdates returns n_tup_upd and n_tup_hot_upd of schema.table,
// polling (with a deadline) until n_tup_upd reaches atLeast.
func tableUpdates(t *testing.T, ctx context.Context, conn *pgx.Conn, schema, table string, atLeast int64) (upd, hot int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := conn.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2`,
			schema, table).Scan(&upd, &hot)
		if err != nil {
			t.Fatal(err)
		}
		if upd >= atLeast || time.Now().After(deadline) {
			return upd, hot
		}
		time.Sleep(100 * time.Millisecond)
	}
}
