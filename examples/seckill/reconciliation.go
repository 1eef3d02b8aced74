package main

import (
	"context"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/examples/seckill/reconcile"
)

// reconcile runs the three-way reconciliation of package reconcile over
// the service's stores.
func (s *service) reconcile(ctx context.Context) (*reconcile.Result, error) {
	return reconcile.Run(ctx, reconcile.Sources{
		Flow: s.Service, Queue: s.q, JetStream: s.js, Front: s.front,
		UnknownPublish: s.isUnknownPublish, InFlight: s.inFlight.Load, PublishedTag: s.stats.publishedTag,
	})
}

// isUnknownPublish reports whether the publish of reservation id's order
// message had no definite answer.
func (s *service) isUnknownPublish(id uuid.UUID) bool {
	_, ok := s.unknownPub.Load(id)
	return ok
}
