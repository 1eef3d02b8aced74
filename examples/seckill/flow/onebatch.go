// The one-batch fast path: a fresh order, or a rejection, sent as one
// batch whose every helper raises (pgtx.Abort) on anything but the plain
// case, so the batch commits whole or not at all.

package flow

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// rejectBatch is PlaceOrderTx's rejection of m with out (SOLD_OUT, or
// USER_ALREADY_ORDERED naming the buyer's order) as one batch, for a
// message whose fresh batch was refused for that reason: the inbox row
// with its result, the reservation inserted as REJECTED, and the
// compensation event that gives the front-door reservation back; with
// soldOut, first a read that raises unless the bucket is still sold out
// with the sale on. Every statement raises where PlaceOrderTx would branch
// elsewhere (a duplicate message or reservation, the stock back, the sale
// not on), and then the general transaction decides. It writes what
// PlaceOrderTx writes for such a message, and never waits for the bucket's
// lock.
func (s *Service) rejectBatch(ctx context.Context, msgID uuid.UUID, hash []byte, m OrderMessage, out Outcome, soldOut bool) (*pgx.Batch, error) {
	result, err := resultOf(out)
	if err != nil {
		return nil, err
	}
	release := s.FrontDoorReleaseEvent(m.ReservationID, out.Code)
	release.Headers = s.eventHeaders(ctx)
	var b pgx.Batch
	if soldOut {
		if err := s.Inventory.QueueCheckSoldOut(&b, s.allocation(msgID, m), pgtx.Abort); err != nil {
			return nil, err
		}
	}
	if err := s.Inbox.QueueClaimMessage(&b, withResult(s.inboxMessage(msgID, hash, m), result), nil, pgtx.Abort); err != nil {
		return nil, err
	}
	rejected := s.newReservation(msgID, m)
	rejected.FailureCode = out.Code // inserted as REJECTED
	if err := s.Inventory.QueueAcquireReservation(&b, rejected, nil, pgtx.Abort); err != nil {
		return nil, err
	}
	if err := s.Outbox.QueueEnqueue(&b, []outbox.Event{release}, nil, pgtx.Abort); err != nil {
		return nil, err
	}
	return &b, nil
}

// freshOrderBatch is the fresh order as one batch, for pgtx.RunBatch: the
// writes of PlaceOrderTx's fresh path, each with the "or abort" helper
// that raises where PlaceOrderTx's helper would return a condition to
// branch on. So the batch commits exactly when the message is a new
// order that gets its stock, and otherwise commits nothing:
//
//  1. the inbox row, stored at once with its result (ORDER_CREATED):
//     a duplicate message raises (unique key of the inbox);
//  2. the reservation, inserted at once as ORDERED: the same reservation
//     under a new message id raises (its primary key);
//  3. the order and its item: a buyer who already ordered raises (one
//     order per activity, SKU and buyer), as does the same request;
//  4. the ORDER_CREATED event (its dedup key, the order's, raises if it
//     exists);
//  5. last, the bucket decrement and its ALLOCATE ledger row: sold out,
//     the sale not on, or the reservation not binding raise. The hot
//     bucket row is locked only from here to COMMIT, within the server.
//
// The returned error reports invalid input only (nothing queued).
func (s *Service) freshOrderBatch(ctx context.Context, msgID uuid.UUID, hash []byte, m OrderMessage) (*pgx.Batch, error) {
	result, err := resultOf(Outcome{Code: CodeOrderCreated, OrderID: m.OrderID})
	if err != nil {
		return nil, err
	}
	ordered := s.newReservation(msgID, m)
	ordered.Ordered = true // inserted as ORDERED for m.OrderID: the batch commits only with the order and the stock
	var b pgx.Batch
	if err := s.Inbox.QueueClaimMessage(&b, withResult(s.inboxMessage(msgID, hash, m), result), nil, pgtx.Abort); err != nil {
		return nil, err
	}
	if err := s.Inventory.QueueAcquireReservation(&b, ordered, nil, pgtx.Abort); err != nil {
		return nil, err
	}
	if err := s.Orders.QueueCreate(&b, s.newOrder(msgID, m), nil, pgtx.Abort); err != nil {
		return nil, err
	}
	if err := s.Outbox.QueueEnqueue(&b, []outbox.Event{s.orderCreatedEvent(ctx, m)}, nil, pgtx.Abort); err != nil {
		return nil, err
	}
	if err := s.Inventory.QueueAllocateBucket(&b, s.allocation(msgID, m), nil, pgtx.Abort); err != nil {
		return nil, err
	}
	return &b, nil
}
