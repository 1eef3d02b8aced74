package drills

import (
	"testing"
	"time"

	"github.com/seckillkit/seckill/examples/internal/soak"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// TestSoakArchiveShort is the short form of the archive soak
// (go run ./examples/soak -rows N is the long one): a history of 20,000
// rows is preloaded, then eight rounds of a sale each end with the
// retention jobs archiving (not purging) the inbox and the outbox. The
// first round moves the whole history; every round leaves the active
// inbox and outbox empty, and every row went to a history table exactly
// once. After the warm-up the active tables, the hot bucket table's row
// versions and the outbox claim's cost stay within twice what they were.
// The audit, which reads the history tables, passes.
func TestSoakArchiveShort(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 5*time.Minute)
	srv, err := pgharness.StartThrowaway(ctx, pgharness.Options{MaxConnections: 60, Settings: soak.ServerSettings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop the soak's server: %v", err)
		}
	})
	pool := newPool(t, srv.URL, 10)
	const rounds, users, warmup, backlog = 8, 100, 3, 20_000
	const schema = "soak_archive"
	samples, err := soak.Run(ctx, soak.Config{Pool: pool, Schema: schema, Rounds: rounds, Users: users,
		Archive: true, Backlog: backlog, ArchiveBatch: 500, Sample: func(s soak.Sample) { t.Log(s) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != rounds {
		t.Fatalf("%d samples, want %d", len(samples), rounds)
	}
	var archived int64
	for i, s := range samples {
		archived += s.Archived
		if s.InboxRows != 0 || s.OutboxRows != 0 || s.Purged != 0 {
			t.Errorf("round %d: %d inbox and %d outbox rows left, %d purged; want everything archived", s.Round, s.InboxRows, s.OutboxRows, s.Purged)
		}
		if s.Archived == 0 || s.WALPerRow() <= 0 {
			t.Errorf("round %d: %d rows archived, %d bytes of WAL a row", s.Round, s.Archived, s.WALPerRow())
		}
		if i == 0 && s.Archived < backlog {
			t.Errorf("round 1 archived %d rows, fewer than the %d of history", s.Archived, backlog)
		}
	}
	var history int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM soak_archive.event_outbox_history) + (SELECT count(*) FROM soak_archive.consumer_inbox_history)`).Scan(&history); err != nil {
		t.Fatal(err)
	}
	if history != archived {
		t.Errorf("%d rows in the history tables, %d archived: each row must arrive exactly once", history, archived)
	}
	base, last := samples[warmup-1], samples[len(samples)-1]
	if base.BucketVersionBytes < 0 || last.BucketVersionBytes < 0 {
		t.Fatal("the bucket table's row versions were not measured: pgstattuple is missing")
	}
	const page = 8192
	for _, c := range []struct {
		name        string
		base, final int64
		slack       int64
	}{
		{"consumer_inbox bytes", base.InboxBytes, last.InboxBytes, 8 * page},
		{"event_outbox bytes", base.OutboxBytes, last.OutboxBytes, 8 * page},
		{"sku_inventory row version bytes", base.BucketVersionBytes, last.BucketVersionBytes, 4 * page},
		{"outbox claim buffers (the last 3 rounds' least)", base.ClaimBlocks, lastFloor(samples, 3, func(s soak.Sample) int64 { return s.ClaimBlocks }), 8},
	} {
		if c.final > 2*c.base+c.slack {
			t.Errorf("%s grew from %d after round %d to %d after round %d: not bounded", c.name, c.base, warmup, c.final, rounds)
		}
	}
	checks, err := last.Flow.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		if !c.Pass {
			t.Errorf("audit FAIL [%s] %s: %s", c.Invariant, c.Name, c.Detail)
		}
	}
	if !flow.Passed(checks) {
		t.Errorf("audit failed")
	}
}
