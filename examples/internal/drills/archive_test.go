package drills

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
)

// archiveHealth is what a health check sees of WAL archiving: the
// counters of pg_stat_archiver and the backlog of finished WAL segments
// waiting to be archived (pg_wal/archive_status/*.ready), which pg_wal
// keeps until they are.
type archiveHealth struct {
	Archived, Failed           int64
	LastArchived, LastFailed   string
	Backlog                    int64
	FailingSinceLastSuccessful bool // the last attempt failed
}

func readArchiveHealth(t *testing.T, ctx context.Context, pool *pgxpool.Pool) archiveHealth {
	t.Helper()
	var h archiveHealth
	if err := pool.QueryRow(ctx, `SELECT archived_count, failed_count, coalesce(last_archived_wal, ''), coalesce(last_failed_wal, ''),
			(SELECT count(*) FROM pg_ls_archive_statusdir() WHERE name LIKE '%.ready'),
			coalesce(last_failed_time > coalesce(last_archived_time, '-infinity'), false)
		FROM pg_stat_archiver`).Scan(&h.Archived, &h.Failed, &h.LastArchived, &h.LastFailed, &h.Backlog, &h.FailingSinceLastSuccessful); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestArchiveFailureDuringSale runs the sale on a server whose WAL
// archiving (archive_mode = on) starts failing mid-sale — the
// archive_command exits non-zero, as with a full or unreachable archive —
// while WAL segments keep finishing. The sale goes on undisturbed (commits
// do not wait for the archive), the condition is visible in the health
// figures (pg_stat_archiver's failures, the backlog of segments waiting in
// pg_wal), and once archiving works again the backlog is archived, every
// segment of the failure is in the archive, and the sale ends exactly once
// with the audit passing.
func TestArchiveFailureDuringSale(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	srv, err := pgharness.StartThrowaway(ctx, pgharness.Options{MaxConnections: 60, Archive: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop the archive drill's server: %v", err)
		}
	})
	pool := newPool(t, srv.URL, 8)
	admin := newPool(t, srv.URL, 4)
	r := newRig(t, rigConfig{Pool: pool, Admin: admin, Schema: "archive_drill", Stock: 400, Buckets: 4})
	msgs := r.messages(plan{Users: 400, DoubleClick: 10, Expired: 5, Pay: 2})
	stopRelays := r.startRelays(admin, 2, outbox.RelayConfig{})
	payments := r.startPayers(2, len(msgs))
	canceller := r.startCanceller(1, 20, 20*time.Millisecond)
	q := r.consume(msgs, deliverConfig{Workers: 8})
	q.waitAcked(int64(len(msgs)) / 5)

	if err := srv.SetArchiveFailing(true); err != nil {
		t.Fatal(err)
	}
	// Segments finish while archiving fails (a busy server fills them; the
	// drill switches to a new one every few milliseconds).
	var failedSegments []string
	healthy := readArchiveHealth(t, ctx, admin)
	for q.acked.Load() < int64(len(msgs))*3/5 || len(failedSegments) < 5 {
		var seg string
		if err := admin.QueryRow(ctx, `SELECT pg_walfile_name(pg_switch_wal())`).Scan(&seg); err != nil {
			t.Fatal(err)
		}
		failedSegments = append(failedSegments, seg)
		select {
		case <-ctx.Done():
			t.Fatalf("the sale stalled while archiving failed: %d of %d acknowledged", q.acked.Load(), len(msgs))
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The condition is visible: failures counted, a backlog in pg_wal, the
	// last attempt a failure.
	var failing archiveHealth
	for {
		failing = readArchiveHealth(t, ctx, admin)
		if failing.Failed > healthy.Failed && failing.Backlog >= int64(len(failedSegments))-1 && failing.FailingSinceLastSuccessful {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("archiving fails but the health figures do not show it: %+v (before: %+v)", failing, healthy)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Logf("archiving failing mid-sale: %+v (before the failure: %+v); %d of %d messages acknowledged meanwhile",
		failing, healthy, q.acked.Load(), len(msgs))

	// Archiving works again: the backlog drains while the sale finishes.
	if err := srv.SetArchiveFailing(false); err != nil {
		t.Fatal(err)
	}
	q.wait()
	r.drain()
	payments.close()
	canceller.finish(r)
	r.drain()
	stopRelays()
	var recovered archiveHealth
	for {
		recovered = readArchiveHealth(t, ctx, admin)
		if recovered.Backlog == 0 && !recovered.FailingSinceLastSuccessful && recovered.LastArchived >= failedSegments[len(failedSegments)-1] {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the archive backlog never drained: %+v", recovered)
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, seg := range failedSegments {
		if _, err := os.Stat(filepath.Join(srv.ArchiveDir(), seg)); err != nil {
			t.Errorf("segment %s, finished while archiving failed, is not in the archive: %v", seg, err)
		}
	}
	t.Logf("archiving recovered: %+v; the %d segments finished during the failure are all archived", recovered, len(failedSegments))
	t.Logf("pgtx events %v; payment retries %d, cancel sweep errors %d, cancelled %d", r.tx, payments.errs.Load(), canceller.errs.Load(), canceller.cancelled.Load())
	r.logErrors()
	r.mu.Lock()
	if len(r.errs) != 0 {
		t.Errorf("consumer errors while archiving failed: %v (the sale must not notice the archive)", r.errs)
	}
	r.mu.Unlock()
	r.assertExactlyOnce(msgs)
	r.assertAllPublished()
	r.assertAudit()
}
