package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
)

// audit is the flow's audit plus what only this program can check: every
// message it acknowledged has its inbox row (or is recorded as poison),
// every event the database calls SENT reached the broker, and the front
// door agrees with PostgreSQL.
func (s *service) audit(ctx context.Context) ([]flow.Check, error) {
	checks, err := s.Audit(ctx)
	if err != nil {
		return nil, err
	}
	add := func(inv, name string, pass bool, detail string, args ...any) {
		checks = append(checks, flow.Check{Invariant: inv, Name: name, Pass: pass, Detail: fmt.Sprintf(detail, args...)})
	}
	var inboxRows, sent, live, manual int64
	if err := s.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+pgx.Identifier{s.Schema, "consumer_inbox"}.Sanitize()+` WHERE consumer_group = $1),
		(SELECT count(*) FROM `+pgx.Identifier{s.Schema, "event_outbox"}.Sanitize()+` WHERE status = 20),
		(SELECT count(*) FROM `+pgx.Identifier{s.Schema, "orders"}.Sanitize()+` WHERE status IN (10, 20, 30, 60)),
		(SELECT count(*) FROM `+pgx.Identifier{s.Schema, "inventory_reservation"}.Sanitize()+` WHERE status = 60)`,
		flow.ConsumerGroup).Scan(&inboxRows, &sent, &live, &manual); err != nil {
		return nil, err
	}
	var poison int64
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{s.Schema, "poison_message"}.Sanitize()+
		` WHERE stream = 'orders' OR stream LIKE 'SECKILL_ORDERS_%'`).Scan(&poison); err != nil {
		return nil, err
	}
	messages := s.q.Figures().Published
	add("1", "one inbox row per message acknowledged", inboxRows == messages-poison,
		"%d rows for %d messages (%d poison)", inboxRows, messages, poison)
	seen := countIDs(&s.stats.publishedIDs)
	add("5", "every event marked SENT reached the broker", sent == seen, "%d sent, %d distinct published", sent, seen)
	front, err := s.front.State(ctx)
	if err != nil {
		return nil, err
	}
	// A MANUAL_REQUIRED reservation is one whose release the front door
	// kept refusing: it still holds the unit, and a human must act.
	add("-", "front door agrees with PostgreSQL: reservations held = live orders", int64(len(front.Held)) == live,
		"%d held, %d live orders, %d reservations MANUAL_REQUIRED (front-door release refused, needs a human)", len(front.Held), live, manual)
	return checks, nil
}
