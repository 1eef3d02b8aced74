package outbox

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// enqueueOrAbortSQL is enqueueOneSQL's insert as a plain statement without
// ON CONFLICT: an event whose dedup key exists raises unique_violation on
// uq_outbox_dedup. Parameters as enqueueOneSQL, without the channel.
//
// A plain INSERT … VALUES … RETURNING is also the shape Citus routes to
// one worker as one task; for enqueueOneSQL's data-modifying CTE under a
// SELECT, Citus runs the CTE first and copies its result back to the
// worker as an intermediate result for the outer SELECT.
const enqueueOrAbortSQL = insertOneSQL + `
RETURNING o.event_id`

// queueEnqueueAbort is [Store.QueueEnqueue] with [pgtx.Abort]: one
// enqueueOrAbortSQL per event, each named after its dedup key, then the
// NOTIFY of a Store with Config.Notify.
func (s *Store) queueEnqueueAbort(b *pgx.Batch, evs []Event, dst *[]Enqueued) error {
	if b == nil {
		return invalid("batch", "nil")
	}
	for i, ev := range evs {
		if ev.OrderingKey != "" {
			return invalid(fmt.Sprintf("events[%d].OrderingKey", i), "set: an ordered event needs pgtx.Return")
		}
	}
	a, err := s.buildEnqueue("events", evs)
	if err != nil {
		return err
	}
	out := make([]Enqueued, len(a.ids))
	for i := range a.ids {
		from := b.Len()
		b.Queue(s.enqueueOrAbort, insertOneArgs(a, i)...).QueryRow(func(row pgx.Row) error {
			var id uuid.UUID
			if err := row.Scan(&id); err != nil {
				return fmt.Errorf("outbox: enqueue: %w", err)
			}
			out[i] = Enqueued{New: true, EventID: id}
			if i == len(out)-1 && dst != nil {
				*dst = out
			}
			return nil
		})
		if i == len(a.ids)-1 && s.cfg.notify() {
			b.Queue(s.enqueueNotify, s.channel)
		}
		pgtx.NameCall(b, from, "outbox.Store.QueueEnqueue("+a.dedup[i]+")", s.fail.Classify)
	}
	return nil
}
