package drills

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/internal/soak"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
)

// vacuumPhase is what one phase of TestAutovacuumHeldBack measured.
type vacuumPhase struct {
	name                   string
	orders                 int64         // orders created in the phase
	placeP50               time.Duration // the order transaction (logged only)
	updates, hot           int64         // bucket row updates in the phase, HOT among them
	bucketBytes            int64         // sku_inventory with its index, after the phase
	deadBuckets, deadEvent int64         // dead tuples VACUUM could not remove, after the phase
	claimBlocks            int64         // buffers one outbox claim touches, after the phase
	sig                    flow.VacuumSignals
}

func (p vacuumPhase) String() string {
	return fmt.Sprintf("%-22s orders %4d  order tx p50 %8v  bucket updates %4d (HOT %4d)  buckets %6d B  left dead after VACUUM: buckets %4d, outbox %5d  claim %4d buffers  oldest xmin age %5d (slot catalog %5d, inactive slot WAL %8d B)",
		p.name, p.orders, p.placeP50.Round(time.Microsecond), p.updates, p.hot, p.bucketBytes, p.deadBuckets, p.deadEvent, p.claimBlocks,
		p.sig.OldestXminAge, p.sig.SlotCatalogXminAge, p.sig.SlotRetainedWALBytes)
}

// TestAutovacuumHeldBack runs a sale in phases on a server of its own and
// holds back the xmin horizon VACUUM must respect, as production meets it:
//
//   - baseline: nothing holds it. VACUUM removes every dead version of the
//     bucket rows and of the outbox events the retention job archived.
//   - held: a transaction keeps a REPEATABLE READ snapshot open (a session
//     idle in transaction, a long report) through the phase. The signal an
//     operator sees (flow.ReadVacuumSignals, the example's /metrics): the
//     oldest backend xmin age grows with every order transaction. VACUUM
//     can remove none of the bucket rows' dead versions (their HOT chains
//     only grow: every update walks them) nor the rows the retention job
//     archived from the outbox, whose entries in the claim's index stay:
//     an outbox claim that found nothing touching no buffer now steps over
//     all of them.
//   - released: the transaction ends; VACUUM removes everything again, the
//     age falls back and the claim is cheap again.
//   - slot: a logical replication slot that no client reads (abandoned).
//     It holds catalog_xmin, the system catalogs' horizon, not the user
//     tables' (their dead versions are removed), and it keeps WAL: the
//     signal is the inactive slot's retained WAL, which only grows.
//   - vanished standby: a physical slot whose standby sent
//     hot_standby_feedback and then died keeps the standby's last xmin:
//     it holds the user tables like the open transaction (the slot's xmin
//     age is the signal), until the slot is dropped.
//
// Every phase logs the order transaction's median time, the bucket rows'
// HOT share, the tables' sizes and the outbox claim's buffers (figures, not
// asserted: speed is for benchmarks). The sale ends with the audit.
func TestAutovacuumHeldBack(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 6*time.Minute)
	settings := append(slices.Clone(soak.ServerSettings), "wal_level=logical", "max_replication_slots=4")
	srv, err := pgharness.StartThrowaway(ctx, pgharness.Options{MaxConnections: 60, Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop the drill's server: %v", err)
		}
	})
	pool := newPool(t, srv.URL, 12)
	const schema = "vacuum_drill"
	r := newRig(t, rigConfig{Pool: pool, Admin: pool, Schema: schema, Stock: 1 << 20, Buckets: 4, Timeout: 4 * time.Minute})
	stopRelays := r.startRelays(pool, 2, outbox.RelayConfig{})
	defer stopRelays()

	const users = 300
	next := int64(1)
	signals := func() flow.VacuumSignals {
		t.Helper()
		v, err := flow.ReadVacuumSignals(ctx, pool, schema)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	vacuum := func() {
		t.Helper()
		for _, table := range []string{"sku_inventory", "event_outbox"} {
			if _, err := pool.Exec(ctx, `VACUUM `+pgx.Identifier{schema, table}.Sanitize()); err != nil {
				t.Fatal(err)
			}
		}
	}
	phase := func(name string) vacuumPhase {
		t.Helper()
		before := signals()
		var mu sync.Mutex
		var lat []time.Duration
		q := r.consume(r.messages(plan{Users: users, FirstUser: next}), deliverConfig{
			Handle: func(ctx context.Context, m *msg) (flow.Outcome, error) {
				t0 := time.Now()
				out, err := r.svc.PlaceOrder(ctx, m.ID, m.Body)
				if err == nil {
					mu.Lock()
					lat = append(lat, time.Since(t0))
					mu.Unlock()
				}
				return out, err
			},
		})
		next += users
		q.wait()
		r.drain()
		// The retention job: every archived event leaves a dead row.
		if _, err := r.svc.Outbox.ArchiveSent(ctx, pool, time.Now().Add(time.Minute), 0); err != nil {
			t.Fatal(err)
		}
		p := vacuumPhase{name: name, orders: r.count(`SELECT count(*) FROM %s.orders WHERE user_id >= $1`, next-users)}
		// The backends report their statistics within seconds of going
		// idle: wait until the bucket rows' updates of the phase show.
		var after flow.VacuumSignals
		for {
			after = signals()
			if after.Tables["sku_inventory"].Updates-before.Tables["sku_inventory"].Updates >= p.orders {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: the statistics never showed the phase's %d bucket updates", name, p.orders)
			case <-time.After(200 * time.Millisecond):
			}
		}
		vacuum()
		after = signals()
		b := after.Tables["sku_inventory"]
		p.updates, p.hot = b.Updates-before.Tables["sku_inventory"].Updates, b.HOTUpdates-before.Tables["sku_inventory"].HOTUpdates
		p.bucketBytes, p.deadBuckets, p.deadEvent = b.Bytes, b.DeadTuples, after.Tables["event_outbox"].DeadTuples
		p.sig = after
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		if len(lat) > 0 {
			p.placeP50 = lat[len(lat)/2]
		}
		p.claimBlocks = claimBuffers(t, ctx, r, pool, schema)
		t.Log(p)
		return p
	}

	base := phase("baseline")
	if base.deadBuckets != 0 || base.sig.OldestXminAge >= base.orders {
		t.Errorf("baseline: %d dead bucket versions left by VACUUM, oldest xmin age %d; want 0 and less than the phase's %d transactions",
			base.deadBuckets, base.sig.OldestXminAge, base.orders)
	}

	holder, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "orders"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	held := phase("held by a transaction")
	switch {
	case held.sig.BackendXminAge < held.orders:
		t.Errorf("held: oldest backend xmin age %d, want at least the phase's %d order transactions", held.sig.BackendXminAge, held.orders)
	case held.deadBuckets < held.orders:
		t.Errorf("held: VACUUM left %d dead bucket versions, want every one of the phase's %d updates", held.deadBuckets, held.orders)
	case held.claimBlocks <= base.claimBlocks:
		t.Errorf("held: an outbox claim touches %d buffers, %d in the baseline: the archived events' index entries should still be there to step over",
			held.claimBlocks, base.claimBlocks)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	released := phase("released")
	if released.deadBuckets != 0 || released.sig.BackendXminAge >= held.sig.BackendXminAge || released.claimBlocks >= held.claimBlocks {
		t.Errorf("released: %d dead bucket versions left, oldest backend xmin age %d (held: %d), claim %d buffers (held: %d); want 0 and lower",
			released.deadBuckets, released.sig.BackendXminAge, held.sig.BackendXminAge, released.claimBlocks, held.claimBlocks)
	}

	if _, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot('vacuum_drill_abandoned', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	slotBefore := signals().SlotRetainedWALBytes
	slot := phase("abandoned logical slot")
	switch {
	case slot.sig.SlotCatalogXminAge == 0 || slot.sig.SlotXminAge != 0:
		t.Errorf("slot: catalog_xmin age %d, xmin age %d; want a catalog_xmin held and no xmin", slot.sig.SlotCatalogXminAge, slot.sig.SlotXminAge)
	case slot.sig.SlotRetainedWALBytes <= slotBefore:
		t.Errorf("slot: %d bytes of WAL kept, %d before the phase: want it growing", slot.sig.SlotRetainedWALBytes, slotBefore)
	case slot.deadBuckets != 0:
		t.Errorf("slot: VACUUM left %d dead bucket versions; a logical slot must not hold the user tables", slot.deadBuckets)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot('vacuum_drill_abandoned')`); err != nil {
		t.Fatal(err)
	}
	if v := signals(); v.SlotRetainedWALBytes != 0 || v.SlotCatalogXminAge != 0 {
		t.Errorf("after dropping the slot: %d bytes of WAL kept, catalog_xmin age %d; want none", v.SlotRetainedWALBytes, v.SlotCatalogXminAge)
	}

	// A standby that streamed through a physical slot with
	// hot_standby_feedback, then vanished: the slot keeps the last xmin
	// the standby reported, and holds the user tables' horizon as an open
	// transaction does, with no session to see.
	if _, err := pool.Exec(ctx, `SELECT pg_create_physical_replication_slot('vacuum_drill_standby', true)`); err != nil {
		t.Fatal(err)
	}
	sb, err := srv.StartStandby(ctx, pgharness.StandbyOptions{Name: "vacuum_drill",
		Settings: []string{"primary_slot_name=vacuum_drill_standby", "hot_standby_feedback=on", "wal_receiver_status_interval=1s"}})
	if err != nil {
		t.Fatal(err)
	}
	feedback, stopWaiting := context.WithTimeout(ctx, time.Minute)
	defer stopWaiting()
	for { // the standby's first feedback sets the slot's xmin
		var set bool
		if err := pool.QueryRow(feedback, `SELECT xmin IS NOT NULL FROM pg_replication_slots WHERE slot_name = 'vacuum_drill_standby'`).Scan(&set); err != nil {
			t.Fatalf("the standby's feedback never set the slot's xmin: %v", err)
		}
		if set {
			break
		}
		select {
		case <-feedback.Done():
			t.Fatal("the standby's feedback never set the slot's xmin within a minute")
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := sb.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Stop(); err != nil {
		t.Fatal(err)
	}
	gone := phase("vanished standby's slot")
	switch {
	case gone.sig.SlotXminAge < gone.orders:
		t.Errorf("vanished standby: slot xmin age %d, want at least the phase's %d order transactions", gone.sig.SlotXminAge, gone.orders)
	case gone.sig.OldestXminAge < gone.sig.SlotXminAge:
		t.Errorf("vanished standby: oldest xmin age %d below the slot's %d", gone.sig.OldestXminAge, gone.sig.SlotXminAge)
	case gone.deadBuckets < gone.orders:
		t.Errorf("vanished standby: VACUUM left %d dead bucket versions, want every one of the phase's %d updates", gone.deadBuckets, gone.orders)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot('vacuum_drill_standby')`); err != nil {
		t.Fatal(err)
	}
	recovered := phase("slot dropped")
	if recovered.deadBuckets != 0 || recovered.sig.SlotXminAge != 0 {
		t.Errorf("after dropping the standby's slot: %d dead bucket versions left, slot xmin age %d; want 0 and 0",
			recovered.deadBuckets, recovered.sig.SlotXminAge)
	}
	stopRelays()
	r.assertAudit()
}

// claimBuffers returns the buffers of event_outbox (heap and indexes) one
// ClaimOutboxBatch touches, from the server's I/O statistics on a
// connection of its own: the fewest of three claims (an autovacuum passing
// by does not count).
func claimBuffers(t *testing.T, ctx context.Context, r *rig, pool *pgxpool.Pool, schema string) int64 {
	t.Helper()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	table := pgx.Identifier{schema, "event_outbox"}.Sanitize()
	blocks := func() int64 {
		if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `SELECT 1`); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := conn.QueryRow(ctx, `SELECT coalesce(heap_blks_read + heap_blks_hit, 0) + coalesce(idx_blks_read + idx_blks_hit, 0)
			FROM pg_statio_user_tables WHERE relid = $1::regclass`, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	least := int64(-1)
	for range 3 {
		before := blocks()
		if _, err := r.svc.Outbox.ClaimOutboxBatch(ctx, conn, "vacuum-probe", 100); err != nil {
			t.Fatal(err)
		}
		if n := blocks() - before; least < 0 || n < least {
			least = n
		}
	}
	return least
}
