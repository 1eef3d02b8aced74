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
//
// Everything the database holds is read in one snapshot: one read-only
// Repeatable Read transaction runs the flow's checks (flow.Service.AuditTx)
// and this program's counts. The three checks of this program compare that
// snapshot with figures outside PostgreSQL (messages published, the
// broker's view, the front door), read after it: they are exact only at
// rest. With live set (the sale runs), such a check that does not hold is
// reported skipped with the difference pending (flow.AtRest); without it,
// every check is judged, as at the end of a run.
func (s *service) audit(ctx context.Context, live bool) ([]flow.Check, error) {
	var checks []flow.Check
	var inboxRows, sent, liveOrders, manual, poison int64
	if live {
		s.CheckpointAudit(ctx)
	}
	err := pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if checks, err = s.AuditTx(ctx, tx, flow.AuditOptions{Live: live}); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM `+pgx.Identifier{s.Schema, "consumer_inbox"}.Sanitize()+` WHERE consumer_group = $1),
			(SELECT count(*) FROM `+pgx.Identifier{s.Schema, "event_outbox"}.Sanitize()+` WHERE status = 20),
			(SELECT count(*) FROM `+pgx.Identifier{s.Schema, "orders"}.Sanitize()+` WHERE status IN (10, 20, 30, 60)),
			(SELECT count(*) FROM `+pgx.Identifier{s.Schema, "inventory_reservation"}.Sanitize()+` WHERE status = 60),
			(SELECT count(*) FROM `+pgx.Identifier{s.Schema, "poison_message"}.Sanitize()+` WHERE stream = 'orders' OR stream LIKE 'SECKILL_ORDERS_%')`,
			flow.ConsumerGroup).Scan(&inboxRows, &sent, &liveOrders, &manual, &poison)
	})
	if err != nil {
		return nil, err
	}
	add := func(inFlight int64, inv, name string, pass bool, detail string, args ...any) {
		checks = append(checks, flow.AtRest(flow.Check{Invariant: inv, Name: name, Pass: pass, Detail: fmt.Sprintf(detail, args...)}, live, inFlight))
	}
	messages := s.q.Figures().Published
	add(abs(messages-poison-inboxRows), "1", "one inbox row per message acknowledged", inboxRows == messages-poison,
		"%d rows for %d messages (%d poison)", inboxRows, messages, poison)
	seen := countIDs(&s.stats.publishedIDs)
	add(abs(seen-sent), "5", "every event marked SENT reached the broker", sent == seen, "%d sent, %d distinct published", sent, seen)
	front, err := s.front.State(ctx)
	if err != nil {
		return nil, err
	}
	// A MANUAL_REQUIRED reservation is one whose release the front door
	// kept refusing: it still holds the unit, and a human must act. It is
	// not work in flight: live or not, it fails the check.
	held := int64(len(front.Held))
	add(abs(held-liveOrders-manual), "-", "front door agrees with PostgreSQL: reservations held = live orders", held == liveOrders,
		"%d held, %d live orders, %d reservations MANUAL_REQUIRED (front-door release refused, needs a human)", held, liveOrders, manual)
	return checks, nil
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
