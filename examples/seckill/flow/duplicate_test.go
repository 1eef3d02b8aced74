package flow_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inbox"
)

// A duplicate delivery is answered with the result its first processing
// stored: the same code and order id (or rejection), Duplicate set —
// whether the first processing committed before (the claim sees its row)
// or was still in flight and committed while the duplicate waited (the
// inbox is read again).
func TestDuplicateAnsweredWithStoredResult(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 1, 1)
	m, id := b.msg(1, 0), uuid.Must(uuid.NewV7())
	first, err := b.s.PlaceOrder(b.ctx, id, body(t, m))
	if err != nil || first.Code != flow.CodeOrderCreated {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := b.s.PlaceOrder(b.ctx, id, body(t, m))
	if err != nil || !again.Duplicate || again.Code != flow.CodeOrderCreated || again.OrderID != m.OrderID {
		t.Fatalf("redelivery = %+v, %v; want the stored ORDER_CREATED for order %d", again, err, m.OrderID)
	}
	// A rejection is answered as a rejection.
	sold, sid := b.msg(2, 0), uuid.Must(uuid.NewV7())
	if out, err := b.s.PlaceOrder(b.ctx, sid, body(t, sold)); err != nil || out.Code != flow.CodeSoldOut {
		t.Fatalf("sold out: %+v, %v", out, err)
	}
	if out, err := b.s.PlaceOrder(b.ctx, sid, body(t, sold)); err != nil || !out.Duplicate || out.Code != flow.CodeSoldOut || out.OrderID != 0 {
		t.Fatalf("redelivered rejection = %+v, %v", out, err)
	}

	// In flight: the first processing holds its transaction open; the
	// duplicate waits on the inbox key, then answers from the committed row.
	b2 := setup(t, nil, 5, 1)
	m2, id2 := b2.msg(3, 0), uuid.Must(uuid.NewV7())
	raw := body(t, m2)
	tx, err := b2.pool.BeginTx(b2.ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(b2.ctx))
	if out, err := b2.s.PlaceOrderTx(b2.ctx, tx, id2, inbox.HashPayload(raw), m2); err != nil || out.Code != flow.CodeOrderCreated {
		t.Fatalf("first, in flight: %+v, %v", out, err)
	}
	type result struct {
		out flow.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := b2.s.PlaceOrder(b2.ctx, id2, raw)
		done <- result{out, err}
	}()
	for {
		var n int
		if err := b2.pool.QueryRow(b2.ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0`,
			b2.s.Schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("the duplicate did not wait: %+v, %v", r.out, r.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := tx.Commit(b2.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || !r.out.Duplicate || r.out.Code != flow.CodeOrderCreated || r.out.OrderID != m2.OrderID {
		t.Fatalf("duplicate of an in-flight processing = %+v, %v; want the stored ORDER_CREATED for order %d", r.out, r.err, m2.OrderID)
	}
	b.auditClean(t)
	b2.auditClean(t)
}
