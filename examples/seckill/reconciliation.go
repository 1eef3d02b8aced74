package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

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

// ReconcileRecent is the operator view's reconciliation during the sale:
// reconcile.RunWindow over recentWindows, its cost following the time
// since the last check, not the sale's history (ReconcileSettled reads
// it all). A result that does not pass is read again, up to three times,
// 100ms apart, as in ReconcileSettled; the windows move on only once a
// check passes, so a difference stays in view until it is gone.
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
	}
	return rec, err
}

// isUnknownPublish reports whether the publish of reservation id's order
// message had no definite answer.
func (s *service) isUnknownPublish(id uuid.UUID) bool {
	_, ok := s.unknownPub.Load(id)
	return ok
}
