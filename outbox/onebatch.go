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

// QueueEnqueueOrAbort queues the insert of ev into b, for a transaction
// sent as one batch (pgtx.RunBatch) that commits only when the event is
// new: an event whose dedup key exists is not answered as a duplicate (as
// [Store.QueueEnqueue] answers it) but raises unique_violation (SQLSTATE
// 23505 on uq_outbox_dedup; pgtx.UniqueViolationOf names it), which aborts
// the whole transaction, COMMIT included; the error [pgtx.RunBatch]
// returns names this call and matches [ErrDuplicate]. Run the general path
// (QueueEnqueue or Enqueue, in a new transaction) after an abort.
//
// When the batch runs, *dst receives the new event's id with New set. With
// [Config].Notify a pg_notify on [Store.Channel] is queued after the
// insert. ev must have no OrderingKey: an ordered event is enqueued under
// its key's advisory lock, which only [Store.QueueEnqueue] takes. Invalid
// input returns a *ValidationError and queues nothing.
func (s *Store) QueueEnqueueOrAbort(b *pgx.Batch, ev Event, dst *Enqueued) error {
	if b == nil {
		return invalid("batch", "nil")
	}
	if dst == nil {
		return invalid("dst", "nil")
	}
	if ev.OrderingKey != "" {
		return invalid("event.OrderingKey", "set: an ordered event needs QueueEnqueue")
	}
	a, err := s.buildEnqueue("event", []Event{ev})
	if err != nil {
		return err
	}
	from := b.Len()
	b.Queue(s.enqueueOrAbort, insertOneArgs(a, 0)...).QueryRow(func(row pgx.Row) error {
		var id uuid.UUID
		if err := row.Scan(&id); err != nil {
			return fmt.Errorf("outbox: enqueue: %w", err)
		}
		*dst = Enqueued{New: true, EventID: id}
		return nil
	})
	if s.cfg.notify() {
		b.Queue(s.enqueueNotify, s.channel)
	}
	pgtx.NameCall(b, from, "outbox.Store.QueueEnqueueOrAbort("+ev.DedupKey+")", s.fail.Classify)
	return nil
}
