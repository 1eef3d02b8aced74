package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/reconcile"
)

// reconcile runs the three-way reconciliation of package reconcile over
// the service's stores.
func (s *service) reconcile(ctx context.Context) (*reconcile.Result, error) {
	return reconcile.Run(ctx, s.sources())
}

// sources are the service's stores for package reconcile.
func (s *service) sources() reconcile.Sources {
	return reconcile.Sources{
		Flow: s.Service, Queue: s.q, JetStream: s.js, Front: s.front,
		UnknownPublish: s.isUnknownPublish, UnknownPublishes: s.unknownPublishes,
		InFlight: s.inFlight.Load, PublishedTag: s.stats.publishedTag,
	}
}

// unknownPublishes counts the order messages whose publish had no
// definite answer.
func (s *service) unknownPublishes() int64 {
	var n int64
	s.unknownPub.Range(func(any, any) bool { n++; return true })
	return n
}

const (
	// recentLag: a window of ReconcileRecent ends this long before the
	// database's clock (by default: tests set recent.lag). An order's
	// created_at is its INSERT's statement_timestamp(), a little before
	// its transaction commits.
	recentLag = 5 * time.Second
	// settleAfter: past the order time to live, the timeout canceller's
	// sweep and the release have had this long.
	settleAfter = time.Minute
)

// recentWindows are ReconcileRecent's windows: the orders created since
// the last check that passed (newest), and the same span one order time
// to live and settleAfter earlier (settled: every unpaid order of it has
// expired and been cancelled since). Each order is reconciled twice, new
// and settled; to is where the next newest window starts.
func (s *service) recentWindows(ctx context.Context) (ws []reconcile.Window, to time.Time, err error) {
	var now time.Time
	if err := s.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, to, fmt.Errorf("reconcile: the database's clock: %w", err)
	}
	s.recent.mu.Lock()
	from, lag := s.recent.from, s.recent.lag
	s.recent.mu.Unlock()
	if to = now.Add(-lag); !from.Before(to) {
		return nil, from, nil
	}
	settle := s.orderTTL + settleAfter
	return []reconcile.Window{{From: from, To: to}, {From: from.Add(-settle), To: to.Add(-settle)}}, to, nil
}

// cursorDDL keeps where ReconcileRecent's next newest window starts (the
// end of the last window that passed), so that a restarted service's
// first check covers the orders created since then, those before the
// restart included.
const cursorDDL = `CREATE TABLE IF NOT EXISTS %s (
	name       TEXT        PRIMARY KEY,
	checked_to TIMESTAMPTZ NOT NULL)`

// cursorTable is the table of cursorDDL in the service's schema.
func (s *service) cursorTable() string {
	return pgx.Identifier{s.Schema, "reconcile_cursor"}.Sanitize()
}

// loadRecentCursor starts ReconcileRecent's windows where the last check
// that passed ended, before a restart too, or at the database's now when
// none passed yet.
func (s *service) loadRecentCursor(ctx context.Context) error {
	var from time.Time
	if err := s.Pool.QueryRow(ctx, `SELECT coalesce((SELECT checked_to FROM `+s.cursorTable()+` WHERE name = 'recent'), now())`).Scan(&from); err != nil {
		return fmt.Errorf("reconcile: read the recent windows' cursor: %w", err)
	}
	s.recent.mu.Lock()
	s.recent.from = from
	s.recent.mu.Unlock()
	return nil
}

// saveRecentCursor stores to as the cursor. It never moves back: another
// instance of the service may have checked further.
func (s *service) saveRecentCursor(ctx context.Context, to time.Time) error {
	_, err := s.Pool.Exec(ctx, `INSERT INTO `+s.cursorTable()+` AS c (name, checked_to) VALUES ('recent', $1)
ON CONFLICT (name) DO UPDATE SET checked_to = greatest(c.checked_to, excluded.checked_to)`, to)
	return err
}

// ReconcileRecent is the operator view's reconciliation during the sale:
// reconcile.RunWindow over recentWindows, its cost following the time
// since the last check, not the sale's history (ReconcileSettled reads
// it all). A result that does not pass is read again, up to three times,
// 100ms apart, as in ReconcileSettled; the windows move on only once a
// check passes, so a difference stays in view until it is gone. Where
// they start is stored (reconcile_cursor): after a restart the first
// check covers the orders since the last check that passed, before the
// restart too, its cost then following the time since that check.
func (s *service) ReconcileRecent(ctx context.Context) (*reconcile.Result, error) {
	ws, to, err := s.recentWindows(ctx)
	if err != nil {
		return nil, err
	}
	rec, err := settled(ctx, func(ctx context.Context) (*reconcile.Result, error) {
		return reconcile.RunWindow(ctx, s.sources(), ws...)
	})
	if err == nil && rec.Passed() {
		s.recent.mu.Lock()
		if to.After(s.recent.from) {
			s.recent.from = to
		}
		s.recent.mu.Unlock()
		if serr := s.saveRecentCursor(ctx, to); serr != nil {
			// Not stored: a restart checks again from the stored cursor.
			s.log.WarnContext(ctx, "storing the recent reconciliation's cursor failed", "error", serr)
		}
	}
	return rec, err
}

// isUnknownPublish reports whether the publish of reservation id's order
// message had no definite answer.
func (s *service) isUnknownPublish(id uuid.UUID) bool {
	_, ok := s.unknownPub.Load(id)
	return ok
}
