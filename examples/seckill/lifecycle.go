package main

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/outbox"
)

// publisher is the relay's broker: ORDER_CREATED, ORDER_PAID and refund
// requests are counted (a real service would send them to the MQ); a
// front-door release is applied to the front door, idempotently.
func (s *service) publisher() outbox.Publisher {
	return outbox.PublisherFunc(func(ctx context.Context, msgs []outbox.Message) []error {
		for _, m := range msgs {
			if m.Tag == flow.TagOrderCreated && s.onOrderCreated != nil {
				var p struct {
					OrderID int64 `json:"order_id"`
				}
				if err := json.Unmarshal(m.Payload, &p); err == nil {
					s.onOrderCreated(p.OrderID)
				}
			}
			if m.Tag == flow.TagFrontDoorRelease {
				var p struct {
					ReservationID uuid.UUID `json:"reservation_id"`
				}
				if err := json.Unmarshal(m.Payload, &p); err == nil {
					s.front.Release(p.ReservationID)
				}
			}
			s.stats.addPublished(m.Tag)
			s.stats.publishedIDs.Store(m.EventID, struct{}{})
		}
		return nil
	})
}
