package outbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// TagStatusCount is one line of [Store.EventsByStatus].
type TagStatusCount struct {
	Topic, Tag string // Tag is "" for events without one
	Status     Status // one of the five statuses
	Events     int64  // the number of events with this topic, tag and status (never 0)
}

// EventsByStatus is the outbox side of a reconciliation (with order's
// QuantitiesByStatus and inventory's LedgerByType): the
// outbox events per topic, tag and status (topic "" for every topic).
// Events carry no activity or SKU column; a service that needs the report
// per activity gives each activity its own topic (or tag) and filters on
// it. It reads the whole selection, SENT history included (the events
// [Store.ArchiveSent] moved to event_outbox_history count as SENT): for a
// cheap gauge use [Store.Stats].
func (s *Store) EventsByStatus(ctx context.Context, db pgtx.Querier, topic string) (_ []TagStatusCount, err error) {
	defer s.fail.Explain(&err)
	if db == nil {
		return nil, nilHandle("db")
	}
	var t *string
	if topic != "" {
		t = &topic
	}
	rows, err := db.Query(ctx, s.eventsByStatusSQL, t)
	if err != nil {
		return nil, fmt.Errorf("outbox: events by status: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TagStatusCount, error) {
		var r TagStatusCount
		var st int16
		err := row.Scan(&r.Topic, &r.Tag, &st, &r.Events)
		r.Status = Status(st)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: events by status: %w", err)
	}
	return out, nil
}
