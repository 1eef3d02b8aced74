package outbox_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// QueueEnqueue with pgtx.Abort in a one-batch transaction: a new event commits with
// the batch; an existing dedup key raises unique_violation and aborts the
// whole batch, the statements queued before it included; bad input queues
// nothing.
func TestQueueEnqueueAbort(t *testing.T) {
	t.Parallel()
	for _, notify := range []bool{false, true} {
		b := setup(t, outbox.Config{Notify: notify, Citus: notify}) // the Citus option changes nothing here
		var gots []outbox.Enqueued
		var batch pgx.Batch
		if err := b.store.QueueEnqueue(&batch, []outbox.Event{event(1)}, &gots, pgtx.Abort); err != nil {
			t.Fatal(err)
		}
		if err := pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, &batch); err != nil {
			t.Fatalf("notify %v: fresh: %v", notify, err)
		}
		if len(gots) != 1 {
			t.Fatalf("notify %v: fresh: %d outcomes, want 1", notify, len(gots))
		}
		got := gots[0]
		if !got.New || got.EventID == uuid.Nil || got.EventID.Version() != 7 {
			t.Fatalf("notify %v: fresh event reported as %+v", notify, got)
		}
		if n := b.count(t, "event_id = $1 AND dedup_key = 'k1' AND status = 0 AND topic = 'ORDER_EVENT' AND payload = '{\"order_id\": 1}'", got.EventID); n != 1 {
			t.Fatalf("notify %v: the event row is not there as enqueued", notify)
		}

		// The same dedup key again, after another event in the same batch.
		var other, again []outbox.Enqueued
		batch = pgx.Batch{}
		if err := b.store.QueueEnqueue(&batch, []outbox.Event{event(2)}, &other, pgtx.Return); err != nil {
			t.Fatal(err)
		}
		dup := event(1)
		dup.Payload = []byte(`{"order_id": 99}`)
		if err := b.store.QueueEnqueue(&batch, []outbox.Event{dup}, &again, pgtx.Abort); err != nil {
			t.Fatal(err)
		}
		err := pgtx.RunBatch(b.ctx, b.pool, pgtx.Options{}, &batch)
		if c, ok := pgtx.UniqueViolationOf(err); !ok || c != "uq_outbox_dedup" {
			t.Fatalf("notify %v: duplicate dedup key: %v, want a unique violation of uq_outbox_dedup", notify, err)
		}
		var se *pgtx.StatementError
		if !errors.Is(err, outbox.ErrDuplicate) || !errors.As(err, &se) || se.Call != "outbox.Store.QueueEnqueue(k1)" ||
			!pgtx.Classify(err).NotCommitted {
			t.Fatalf("notify %v: duplicate dedup key: %v, want outbox.ErrDuplicate from the named call", notify, err)
		}
		if again != nil {
			t.Fatalf("notify %v: aborted enqueue filled dst: %+v", notify, again)
		}
		if n := b.count(t, "true"); n != 1 {
			t.Fatalf("notify %v: %d events after the aborted batch, want 1 (nothing of it committed)", notify, n)
		}
	}

	b := setup(t, outbox.Config{})
	var batch pgx.Batch
	var dst []outbox.Enqueued
	ordered := event(3)
	ordered.OrderingKey = "key"
	noTopic := event(4)
	noTopic.Topic = ""
	for name, call := range map[string]func() error{
		"ordered":  func() error { return b.store.QueueEnqueue(&batch, []outbox.Event{ordered}, &dst, pgtx.Abort) },
		"no topic": func() error { return b.store.QueueEnqueue(&batch, []outbox.Event{noTopic}, &dst, pgtx.Abort) },
		"ordered second": func() error {
			return b.store.QueueEnqueue(&batch, []outbox.Event{event(5), ordered}, &dst, pgtx.Abort)
		},
		"nil batch": func() error {
			return b.store.QueueEnqueue(nil, []outbox.Event{event(6)}, &dst, pgtx.Abort)
		},
	} {
		if err := call(); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if batch.Len() != 0 {
		t.Fatalf("invalid input queued %d statements", batch.Len())
	}
}
