// PlaceOrderTx, the reference consumer transaction: one helper call per
// step, every branch classified. This is the one to read first and copy.

package flow

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/examples/internal/orderid"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
)

// PlaceOrderTx is the consumer transaction with every
// branch, one helper call per step, in the caller's transaction tx (Read
// Committed). It returns the message's Outcome; ErrDuplicate (answer from
// the inbox, roll back), an error matching ErrPoison (roll back, ack and
// alert) or another error (roll back, redeliver).
//
// The steps:
//
//  1. claim the message in the inbox; a duplicate ends here;
//  2. record the reservation and lock it; one that an earlier message
//     already decided (the same reservation under a new message id) is
//     answered with that decision;
//  3. a savepoint, so that a refusal at step 4 or 8 undoes steps 4–7;
//  4. create the order and its item; a buyer who already ordered is
//     rejected, an existing order of this very request is answered;
//  5. enqueue ORDER_CREATED;
//  6. move the reservation to ORDERED;
//  7. record the result in the inbox, for duplicates;
//  8. last, take the stock (the bucket decrement and its ledger row), so
//     the hot bucket row stays locked only until COMMIT; sold out or the
//     sale not on rejects the reservation.
//
// A rejection (PostgreSQL refuses what the front door accepted) moves the
// reservation to REJECTED and enqueues the compensation event that gives
// the front-door reservation back, in the same transaction.
func (s *Service) PlaceOrderTx(ctx context.Context, tx pgx.Tx, msgID uuid.UUID, hash []byte, m OrderMessage) (Outcome, error) {
	key := inbox.Key{Group: ConsumerGroup, MessageID: msgID}
	result, err := resultOf(Outcome{Code: CodeOrderCreated, OrderID: m.OrderID})
	if err != nil {
		return Outcome{}, err
	}

	// 1. Claim the message.
	claim, err := s.Inbox.ClaimMessage(ctx, tx, s.inboxMessage(msgID, hash, m))
	if err != nil {
		return Outcome{}, poisonIf(err, inbox.ErrPayloadMismatch, inbox.ErrInvalidArgument)
	}
	if !claim.Fresh {
		rec := claim.Record
		return Outcome{}, &duplicateError{rec: &rec} // processed before: answer with its stored result
	}

	// 2. Record the reservation and lock it.
	acq, err := s.Inventory.AcquireReservation(ctx, tx, s.newReservation(msgID, m))
	if err != nil {
		return Outcome{}, poisonIf(err, inventory.ErrReservationConflict, inventory.ErrInvalidArgument)
	}
	if !acq.Created && acq.Reservation.Status != inventory.StatusPendingDB {
		return s.finishKnownReservation(ctx, tx, key, acq.Reservation)
	}

	// 3. A savepoint to come back to if the order or the stock is refused.
	if _, err := tx.Exec(ctx, "SAVEPOINT "+savepoint); err != nil {
		return Outcome{}, err
	}

	// 4. The order and its item.
	created, err := s.Orders.Create(ctx, tx, s.newOrder(msgID, m))
	var already *order.Error
	switch {
	case errors.Is(err, order.ErrUserAlreadyOrdered) && errors.As(err, &already):
		return s.rollBackAndReject(ctx, tx, key, m, CodeUserAlreadyOrdered, already.Order.OrderID)
	case err != nil:
		return Outcome{}, poisonIf(err, order.ErrInvalidArgument)
	case created.Existing:
		// An earlier attempt of this request created it (nothing written now).
		return s.finish(ctx, tx, key, m.ReservationID, Outcome{Code: CodeOrderAlready, OrderID: created.Order.OrderID}, true)
	}

	// 5. The ORDER_CREATED event.
	if _, err := s.Outbox.Enqueue(ctx, tx, s.orderCreatedEvent(ctx, m)); err != nil {
		return Outcome{}, poisonIf(err, outbox.ErrInvalidArgument)
	}

	// 6. The reservation is ORDERED.
	if _, err := s.Inventory.TransitionReservation(ctx, tx, inventory.Transition{
		ReservationID: m.ReservationID, To: inventory.StatusOrdered, OrderID: m.OrderID,
	}); err != nil {
		return Outcome{}, err
	}

	// 7. The result, for duplicates.
	if err := s.Inbox.Complete(ctx, tx, key, result); err != nil {
		return Outcome{}, err
	}

	// 8. Last, the stock.
	_, err = s.Inventory.AllocateBucket(ctx, tx, s.allocation(msgID, m))
	switch {
	case err == nil:
		return Outcome{Code: CodeOrderCreated, OrderID: m.OrderID}, nil
	case errors.Is(err, inventory.ErrSoldOut):
		return s.rollBackAndReject(ctx, tx, key, m, CodeSoldOut, 0)
	case errors.Is(err, inventory.ErrNotOnSale):
		return s.rollBackAndReject(ctx, tx, key, m, CodeNotOnSale, 0)
	}
	// Not provisioned: no redelivery will pass.
	return Outcome{}, poisonIf(err, inventory.ErrUnknownBucket, inventory.ErrUnknownSKU, inventory.ErrInvalidArgument)
}

// poisonIf marks err as poison when it matches one of kinds.
func poisonIf(err error, kinds ...error) error {
	for _, k := range kinds {
		if errors.Is(err, k) {
			return &poisonError{err}
		}
	}
	return err
}

// The inputs of the helpers, built from the message.

func (s *Service) inboxMessage(msgID uuid.UUID, hash []byte, m OrderMessage) inbox.Message {
	return inbox.Message{
		Group: ConsumerGroup, MessageID: msgID, Topic: OrderTopic, Tag: OrderTag,
		MessageKey: m.ReservationID.String(), Ref: m.ReservationID.String(), PayloadHash: hash,
	}
}

// withResult is msg claimed with its result res recorded up front.
func withResult(msg inbox.Message, res inbox.Result) inbox.Message {
	msg.Result = &res
	return msg
}

// request is the purchase the message carries, processed as message msgID.
func (s *Service) request(msgID uuid.UUID, m OrderMessage) seckill.Request {
	return seckill.Request{
		RequestID: m.RequestID, MessageID: msgID, ReservationID: m.ReservationID, OrderID: m.OrderID,
		ActivityID: m.ActivityID, SKUID: m.SKUID, UserID: m.UserID, Bucket: m.Bucket, Quantity: 1,
	}
}

func (s *Service) newReservation(msgID uuid.UUID, m OrderMessage) inventory.NewReservation {
	return inventory.NewReservation{Request: s.request(msgID, m), ReservedAt: m.ReservedAt, ExpiresAt: m.ReservationTo}
}

func (s *Service) newOrder(msgID uuid.UUID, m OrderMessage) order.NewOrder {
	return order.NewOrder{
		Request: s.request(msgID, m),
		OrderNo: orderid.FormatNo(m.OrderID), UnitPrice: m.UnitPrice, Currency: m.Currency, ExpireAt: m.OrderExpireAt, SKUTitle: m.SKUTitle,
	}
}

func (s *Service) allocation(msgID uuid.UUID, m OrderMessage) inventory.Allocation {
	return inventory.Allocation{Request: s.request(msgID, m)}
}

// finishKnownReservation answers a message whose reservation was already
// decided by an earlier message.
func (s *Service) finishKnownReservation(ctx context.Context, tx pgx.Tx, key inbox.Key, r inventory.Reservation) (Outcome, error) {
	out := Outcome{Code: CodeOrderAlready, OrderID: r.OrderID}
	if r.Status == inventory.StatusRejected {
		// Not the rejection code itself: the rejection was decided (and
		// answered, and compensated) once, by the message that made it.
		out = Outcome{Code: CodeReservationRejected, Reason: r.FailureCode, OrderID: r.OrderID}
	} else if r.OrderID == 0 {
		out.Code = "RESERVATION_" + r.Status.String()
	}
	return s.finish(ctx, tx, key, r.ReservationID, out, false)
}

// finish records out as the message's result (and, when markOrdered, moves
// a still-pending reservation to ORDERED).
func (s *Service) finish(ctx context.Context, tx pgx.Tx, key inbox.Key, reservationID uuid.UUID, out Outcome, markOrdered bool) (Outcome, error) {
	result, err := resultOf(out)
	if err != nil {
		return Outcome{}, err
	}
	if markOrdered {
		_, err := s.Inventory.TransitionReservation(ctx, tx, inventory.Transition{ReservationID: reservationID, To: inventory.StatusOrdered, OrderID: out.OrderID})
		if err != nil && !errors.Is(err, inventory.ErrAlreadyInState) {
			return Outcome{}, err
		}
	}
	if err := s.Inbox.Complete(ctx, tx, key, result); err != nil {
		return Outcome{}, err
	}
	return out, nil
}

// rollBackAndReject undoes the writes made since the savepoint and
// rejects the reservation.
func (s *Service) rollBackAndReject(ctx context.Context, tx pgx.Tx, key inbox.Key, m OrderMessage, code string, orderID int64) (Outcome, error) {
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepoint); err != nil {
		return Outcome{}, err
	}
	return s.reject(ctx, tx, key, m, code, orderID)
}

// reject is the rejection branch: the reservation is REJECTED and a
// compensation event gives the front-door reservation back, in the same
// transaction.
func (s *Service) reject(ctx context.Context, tx pgx.Tx, key inbox.Key, m OrderMessage, code string, orderID int64) (Outcome, error) {
	out := Outcome{Code: code, OrderID: orderID}
	result, err := resultOf(out)
	if err != nil {
		return Outcome{}, err
	}
	if _, err := s.Inventory.TransitionReservation(ctx, tx, inventory.Transition{ReservationID: m.ReservationID, To: inventory.StatusRejected, FailureCode: code}); err != nil {
		return Outcome{}, err
	}
	release := s.FrontDoorReleaseEvent(m.ReservationID, code)
	release.Headers = s.eventHeaders(ctx)
	if _, err := s.Outbox.Enqueue(ctx, tx, release); err != nil {
		return Outcome{}, err
	}
	if err := s.Inbox.Complete(ctx, tx, key, result); err != nil {
		return Outcome{}, err
	}
	return out, nil
}

func resultOf(out Outcome) (inbox.Result, error) {
	payload, err := json.Marshal(out)
	if err != nil {
		return inbox.Result{}, err
	}
	return inbox.Result{Code: out.Code, Payload: payload}, nil
}

func (s *Service) orderCreatedEvent(ctx context.Context, m OrderMessage) outbox.Event {
	id := strconv.FormatInt(m.OrderID, 10)
	payload, _ := json.Marshal(map[string]any{
		"order_id": m.OrderID, "reservation_id": m.ReservationID, "user_id": m.UserID,
		"activity_id": m.ActivityID, "sku_id": m.SKUID, "amount": m.UnitPrice, "currency": m.Currency,
	})
	return outbox.Event{
		Topic: EventTopic, Tag: TagOrderCreated, AggregateType: "ORDER", AggregateID: id,
		Payload: payload, DedupKey: TagOrderCreated + ":" + id, Headers: s.eventHeaders(ctx),
	}
}
