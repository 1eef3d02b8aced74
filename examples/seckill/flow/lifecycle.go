package flow

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// Payment is a payment provider's success callback. What
// POST /payments/callback receives.
type Payment struct {
	OrderID         int64  `json:"order_id"`
	ProviderTradeNo string `json:"provider_trade_no"`
	CallbackID      string `json:"callback_id"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
}

// Provider names the payment provider of the callbacks.
const Provider = "simpay"

// Pay records a payment callback in one transaction: the payment row, the
// PAID transition, and the event that follows from it — ORDER_PAID, or a
// refund request when the order was cancelled first. A callback that
// matches nothing (unknown order, amount or currency mismatch: refused with
// the error; a second trade for a paid order: refunded) is also kept in
// payment_review for a human (order.Store.OpenPaymentReviews).
func (s *Service) Pay(ctx context.Context, p Payment) (order.PaymentResult, error) {
	var res order.PaymentResult
	raw, err := json.Marshal(p)
	if err != nil {
		return res, err
	}
	payment := order.Payment{
		PaymentID: uuid.Must(uuid.NewV7()), PaymentRequestID: uuid.Must(uuid.NewV7()),
		OrderID: p.OrderID, Provider: Provider, ProviderTradeNo: p.ProviderTradeNo, CallbackID: p.CallbackID,
		Amount: p.Amount, Currency: p.Currency, RawPayload: raw,
	}
	err = pgtx.RunInTx(ctx, s.Pool, pgtx.Options{Name: "payment", Observer: s.txObs}, func(tx pgx.Tx) error {
		var err error
		res, err = s.Orders.RecordPayment(ctx, tx, payment)
		if err != nil {
			return err
		}
		// A second trade for a paid order: refunded, and kept for review
		// in the same transaction (any other result needs no review: the
		// call sends nothing).
		if _, _, err := s.Orders.RecordPaymentReview(ctx, tx, payment, res, nil); err != nil {
			return err
		}
		id := strconv.FormatInt(p.OrderID, 10)
		switch {
		case res.Refund != nil:
			payload, _ := json.Marshal(res.Refund)
			_, err = s.Outbox.Enqueue(ctx, tx, outbox.Event{
				Topic: EventTopic, Tag: TagRefundRequested, AggregateType: "PAYMENT", AggregateID: res.Refund.PaymentID.String(),
				Payload: payload, DedupKey: TagRefundRequested + ":" + res.Refund.PaymentID.String(), Headers: s.eventHeaders(ctx),
			})
		case res.Kind == order.PaymentPaid:
			payload, _ := json.Marshal(map[string]any{"order_id": p.OrderID, "payment_id": res.PaymentID})
			_, err = s.Outbox.Enqueue(ctx, tx, outbox.Event{
				Topic: EventTopic, Tag: TagOrderPaid, AggregateType: "ORDER", AggregateID: id,
				Payload: payload, DedupKey: TagOrderPaid + ":" + id, Headers: s.eventHeaders(ctx),
			})
		}
		return err
	})
	if err != nil {
		// Refused (unknown order, amount or currency mismatch): nothing of
		// the payment was written; the callback is kept for review, with
		// its raw payload, once however often it is redelivered. Other
		// errors need no review: the call sends nothing.
		if _, _, rerr := s.Orders.RecordPaymentReview(ctx, s.Pool, payment, res, err); rerr != nil {
			return res, errors.Join(err, rerr)
		}
	}
	return res, err
}

// CancelExpired is one sweep of the timeout canceller: up to
// limit expired unpaid orders are cancelled, their stock released (RELEASE
// ledger row), their reservations RELEASE_PENDING and a front-door release
// event enqueued — all in one transaction, so a crash leaves all or
// nothing. The release event's consumer moves the reservation on
// ([Service.FrontDoorReleased], [Service.FrontDoorReleaseFailed]).
func (s *Service) CancelExpired(ctx context.Context, limit int) (int, error) {
	n := 0
	err := pgtx.RunInTx(ctx, s.Pool, pgtx.Options{Name: "cancel_expired", LockTimeout: 2 * time.Second, Observer: s.txObs}, func(tx pgx.Tx) error {
		n = 0
		cancelled, err := s.Orders.CancelExpired(ctx, tx, limit)
		if err != nil || len(cancelled) == 0 {
			return err
		}
		var b pgx.Batch
		released := make([]inventory.Allocated, len(cancelled))
		moved := make([]inventory.Reservation, len(cancelled))
		for i, c := range cancelled {
			if !c.Changed {
				continue
			}
			o := c.Order
			// The allocation as the order took it; the release checks it
			// against the ALLOCATE ledger row and raises on any difference.
			if err := s.Inventory.QueueReleaseStock(&b, inventory.StockRelease{
				Request: o.Request,
				Reason:  o.CancelReason, // PAY_TIMEOUT
			}, &released[i], pgtx.Abort); err != nil {
				return err
			}
			if err := s.Inventory.QueueTransitionReservation(&b, inventory.Transition{ReservationID: o.ReservationID, To: inventory.StatusReleasePending}, &moved[i], pgtx.Return); err != nil {
				return err
			}
			if err := s.Outbox.QueueEnqueue(&b, []outbox.Event{s.FrontDoorReleaseEvent(o.ReservationID, o.CancelReason)}, nil, pgtx.Return); err != nil {
				return err
			}
			n++
		}
		// An error here (a release already applied would mean stock coming
		// back twice; a release that does not match its allocation, a
		// broken invariant) rolls the whole sweep back: nothing is
		// half-cancelled. Every statement is routed whole to one node on
		// Citus.
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// ExpireReservations is one sweep of the reservation sweeper: up to limit
// reservations recorded as PENDING_DB whose expiry has passed become
// EXPIRED (inventory.Store.ExpireReservations), each with its front-door
// release event, in one transaction. The flow's own order transaction
// decides every reservation it records, so PENDING_DB rows come from a
// front door that records reservations ahead of their order message; a
// late message for an expired one is answered RESERVATION_EXPIRED.
func (s *Service) ExpireReservations(ctx context.Context, limit int) (int, error) {
	n := 0
	err := pgtx.RunInTx(ctx, s.Pool, pgtx.Options{Name: "expire_reservations", LockTimeout: 2 * time.Second, Observer: s.txObs}, func(tx pgx.Tx) error {
		expired, err := s.Inventory.ExpireReservations(ctx, tx, limit)
		if err != nil || len(expired) == 0 {
			n = 0
			return err
		}
		evs := make([]outbox.Event, len(expired))
		for i, r := range expired {
			evs[i] = s.FrontDoorReleaseEvent(r.ReservationID, "RESERVATION_EXPIRED")
		}
		n = len(expired)
		_, err = s.Outbox.Enqueue(ctx, tx, evs...)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// DefaultMaxReleaseFailures is the number of failed front-door releases
// after which a RELEASE_PENDING reservation moves to MANUAL_REQUIRED
// ([Service.FrontDoorReleaseFailed]).
const DefaultMaxReleaseFailures = 5

// Release outcomes of [Service.FrontDoorReleased], recorded in the
// consumer's inbox row.
const (
	ReleaseApplied         = "RELEASED"            // RELEASE_PENDING → RELEASED now
	ReleaseAlreadyApplied  = "ALREADY_RELEASED"    // already RELEASED
	ReleaseNothingToMove   = "RELEASE_FINAL"       // REJECTED or EXPIRED: final, the front door was all there was to release
	ReleaseManualRequired  = "MANUAL_REQUIRED"     // a human took over; left as it is
	ReleaseUnknownInStores = "UNKNOWN_RESERVATION" // no such reservation in PostgreSQL
)

// FrontDoorReleased records, in tx (the release consumer's transaction,
// with its inbox claim), that the front door applied a reservation's
// release: a RELEASE_PENDING reservation (a cancelled order's) becomes
// RELEASED (inventory.Store.TransitionReservation). The outcome says what
// happened; a duplicate of the release (already RELEASED) changes
// nothing, and neither does a final REJECTED or EXPIRED reservation, whose
// release concerned only the front door. Other errors are the database's.
func (s *Service) FrontDoorReleased(ctx context.Context, tx pgx.Tx, reservationID uuid.UUID) (string, error) {
	_, err := s.Inventory.TransitionReservation(ctx, tx, inventory.Transition{ReservationID: reservationID, To: inventory.StatusReleased})
	var te *inventory.Error
	switch {
	case err == nil:
		return ReleaseApplied, nil
	case errors.Is(err, inventory.ErrReservationNotFound):
		return ReleaseUnknownInStores, nil
	case errors.As(err, &te) && te.Current == inventory.StatusReleased:
		return ReleaseAlreadyApplied, nil
	case errors.As(err, &te) && te.Current == inventory.StatusManualRequired:
		return ReleaseManualRequired, nil
	case errors.As(err, &te) && (te.Current == inventory.StatusRejected || te.Current == inventory.StatusExpired):
		return ReleaseNothingToMove, nil
	}
	return "", err
}

// FrontDoorReleaseFailed records one failed front-door release of a
// reservation (inventory.Store.RecordCompensationFailure) on db, outside
// the consumer's transaction (which rolls back so that the event is
// delivered again). After maxFailures failures the reservation is
// MANUAL_REQUIRED and escalated is true: the consumer should then stop
// retrying (complete the event) and a human takes over. A reservation that
// is not RELEASE_PENDING (REJECTED or EXPIRED: final, not counted) returns
// escalated false and no error; a MANUAL_REQUIRED one returns true.
func (s *Service) FrontDoorReleaseFailed(ctx context.Context, db pgtx.Querier, reservationID uuid.UUID, maxFailures int) (escalated bool, err error) {
	rec, err := s.Inventory.RecordCompensationFailure(ctx, db, inventory.CompensationFailure{ReservationID: reservationID, MaxFailures: maxFailures, Code: "FRONTDOOR_RELEASE_FAILED"})
	var te *inventory.Error
	switch {
	case err == nil:
		return rec.Escalated, nil
	case errors.As(err, &te) && te.Current == inventory.StatusManualRequired:
		return true, nil
	case errors.As(err, &te), errors.Is(err, inventory.ErrReservationNotFound):
		return false, nil
	}
	return false, err
}
