package drills

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seckillkit/seckill/examples/internal/soak"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// TestSoakShort is the short form of the soak (examples/soak is the long
// one): twelve rounds of a sale on one SKU, each with new buyers (some
// clicking twice), payments, timeout cancels and the outbox relayed, then the
// retention jobs purge the inbox and the outbox while autovacuum runs.
// The purged tables, the hot bucket table's row versions (live and dead,
// from pgstattuple: its file can grow by a bulk extension of free pages
// that later updates reuse, which is not bloat) and the cost of an outbox
// claim (buffers touched, from the server's I/O statistics) stay bounded:
// at the end they are within twice what they were after the warm-up
// rounds (plus a few pages), not growing with the rows that went through. The audit
// passes and the counts are exact.
func TestSoakShort(t *testing.T) {
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
	const rounds, users, warmup = 12, 150, 3
	samples, err := soak.Run(ctx, soak.Config{Pool: pool, Schema: "soak_drill", Rounds: rounds, Users: users,
		Sample: func(s soak.Sample) { t.Log(s) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != rounds {
		t.Fatalf("%d samples, want %d", len(samples), rounds)
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
	var throughput, purged int64
	for i, s := range samples {
		if s.InboxRows != 0 || s.OutboxRows != 0 {
			t.Errorf("round %d: %d inbox and %d outbox rows left after the purges, want none", s.Round, s.InboxRows, s.OutboxRows)
		}
		if want := int64(i+1) * users; s.Orders != want {
			t.Errorf("round %d: %d orders, want %d (one per buyer)", s.Round, s.Orders, want)
		}
		// Each buyer's message, every tenth twice, and one event per
		// order, payment and release went through and were purged.
		purged += s.Purged
		throughput += int64(users + users/10)
	}
	if purged < throughput {
		t.Errorf("%d rows purged, fewer than the %d messages that went through", purged, throughput)
	}
	if last.Autovacuums == 0 {
		t.Errorf("autovacuum never ran on the purged tables")
	}
	t.Logf("%d rounds: %d orders, %d inbox and outbox rows purged, %d autovacuums; after round %d → after round %d: inbox %d → %d bytes, outbox %d → %d, buckets %d → %d, claim %d → %d buffers (%v → %v)",
		rounds, last.Orders, purged, last.Autovacuums, warmup, rounds, base.InboxBytes, last.InboxBytes, base.OutboxBytes, last.OutboxBytes,
		base.BucketBytes, last.BucketBytes, base.ClaimBlocks, last.ClaimBlocks, base.ClaimLatency, last.ClaimLatency)
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

	// The long form's charts, from these samples: every series has a
	// point per round.
	dir := t.TempDir()
	if err := soak.WriteSVG(dir, samples); err != nil {
		t.Fatal(err)
	}
	for _, name := range soak.PlotFiles {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Lines []struct {
				Name   string `xml:"data-name,attr"`
				Points int    `xml:"data-points,attr"`
			} `xml:"polyline"`
		}
		if err := xml.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s is not XML: %v", name, err)
		}
		if len(doc.Lines) < 2 {
			t.Errorf("%s: %d lines, want 2 or more", name, len(doc.Lines))
		}
		for _, l := range doc.Lines {
			if l.Points != rounds {
				t.Errorf("%s: series %q has %d points, want %d", name, l.Name, l.Points, rounds)
			}
		}
	}
}

// lastFloor is the least of f over the last n samples. A figure that
// grows without bound raises it; one round sampled just before autovacuum
// cleared the dead entries a claim walks over (11 buffers in one CI round,
// 7 in the rounds around it) does not.
func lastFloor(samples []soak.Sample, n int, f func(soak.Sample) int64) int64 {
	low := f(samples[len(samples)-1])
	for _, s := range samples[max(0, len(samples)-n):] {
		low = min(low, f(s))
	}
	return low
}
