// One delivery of an order message: the one-batch attempt for a fresh
// message, the general transaction for everything else, and the stored
// outcome a duplicate gets.

package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/pgtx"
)

// PlaceOrder processes one delivery of an order message and tells the
// caller what to do with it. It is the pipelined form of the order
// transaction: it first sends the fresh order as ONE batch (BEGIN, every
// write of a new order, each with its "or abort" helper, and COMMIT: one
// round trip),
// in which every condition that makes the message something else than a
// plain fresh order raises an error, so the server skips the rest of the
// batch and commits nothing. Only then does it run PlaceOrderTx, the
// step-by-step transaction that handles every branch, in a new
// transaction. Both end the same way for every message: the test
// TestPipelinedAndStepByStepAgree runs PlaceOrder and PlaceOrderStepByStep
// on the same messages and compares outcomes and database state.
//
// The outcome:
//
//   - nil error: acknowledge; Outcome says what happened. A duplicate
//     delivery gets the Outcome its first processing stored in the inbox
//     (same Code, OrderID and Reason), with Duplicate set;
//   - an error matching ErrPoison: acknowledge and alert, never retry;
//   - any other error, including pgtx.ErrCommitOutcomeUnknown: do not
//     acknowledge. The redelivery is safe: the inbox, the reservation and
//     the unique keys recognise whatever did commit.
func (s *Service) PlaceOrder(ctx context.Context, messageID uuid.UUID, body []byte) (Outcome, error) {
	m, hash, err := decode(body)
	if err != nil {
		return Outcome{}, err
	}
	release, err := s.enterBucket(ctx, m.Bucket)
	if err != nil {
		return Outcome{}, err
	}
	defer release()

	// The fresh order: one round trip.
	b, err := s.freshOrderBatch(ctx, messageID, hash, m)
	if err != nil {
		return Outcome{}, &poisonError{err} // invalid input: it will never pass
	}
	err = pgtx.RunBatch(ctx, s.Pool, s.txOpts, b)
	var aborted *pgtx.StatementError
	switch {
	case err == nil:
		return Outcome{Code: CodeOrderCreated, OrderID: m.OrderID}, nil
	case !errors.As(err, &aborted):
		// Not an abort by one of the statements: e.g. the pool had no
		// connection, or the COMMIT's outcome is unknown. Redeliver.
		return Outcome{}, err
	}

	// A statement raised: not a plain fresh order, nothing committed.
	// The two common refusals are recorded in one more batch, while they
	// still hold: sold out (the allocation refused), and a buyer who
	// already ordered (the order's one-per-buyer key).
	var out Outcome
	soldOut := errors.Is(err, inventory.ErrSoldOut)
	if soldOut {
		out = Outcome{Code: CodeSoldOut}
	} else if errors.Is(err, order.ErrUserAlreadyOrdered) {
		if existing, gerr := s.Orders.Get(ctx, s.Pool, seckill.Request{ActivityID: m.ActivityID, SKUID: m.SKUID, UserID: m.UserID}); gerr == nil {
			out = Outcome{Code: CodeUserAlreadyOrdered, OrderID: existing.OrderID}
		}
	}
	if out.Code != "" {
		reject, berr := s.rejectBatch(ctx, messageID, hash, m, out, soldOut)
		if berr != nil {
			return Outcome{}, &poisonError{berr}
		}
		err = pgtx.RunBatch(ctx, s.Pool, s.txOpts, reject)
		switch {
		case err == nil:
			return out, nil
		case !errors.As(err, &aborted):
			return Outcome{}, err
		}
	}
	// The general transaction finds out what the message is.
	return s.runGeneral(ctx, messageID, hash, m)
}

// PlaceOrderStepByStep is PlaceOrder without the one-batch attempt: it
// runs PlaceOrderTx, the step-by-step transaction, for every message. It
// returns what PlaceOrder returns and writes what PlaceOrder writes; a
// fresh order takes a round trip per step instead of one in all. Start
// from this one when you adapt the flow; PlaceOrder is the same
// transaction, made fast.
func (s *Service) PlaceOrderStepByStep(ctx context.Context, messageID uuid.UUID, body []byte) (Outcome, error) {
	m, hash, err := decode(body)
	if err != nil {
		return Outcome{}, err
	}
	release, err := s.enterBucket(ctx, m.Bucket)
	if err != nil {
		return Outcome{}, err
	}
	defer release()
	return s.runGeneral(ctx, messageID, hash, m)
}

// decode reads an order message body; an undecodable one is poison.
func decode(body []byte) (OrderMessage, []byte, error) {
	var m OrderMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return OrderMessage{}, nil, &poisonError{fmt.Errorf("decode: %w", err)}
	}
	return m, inbox.HashPayload(body), nil
}

// enterBucket waits for a place among the transactions of bucket (see
// Config.BucketConcurrency) and returns the function that gives it back.
func (s *Service) enterBucket(ctx context.Context, bucket int16) (func(), error) {
	if s.gates == nil || bucket < 0 || int(bucket) >= len(s.gates) {
		return func() {}, nil
	}
	g := s.gates[bucket]
	select {
	case g <- struct{}{}:
		return func() { <-g }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// runGeneral runs PlaceOrderTx in its own transaction and answers a
// duplicate from the inbox.
func (s *Service) runGeneral(ctx context.Context, messageID uuid.UUID, hash []byte, m OrderMessage) (Outcome, error) {
	var out Outcome
	err := pgtx.RunInTx(ctx, s.Pool, s.txOpts, func(tx pgx.Tx) error {
		var err error
		out, err = s.PlaceOrderTx(ctx, tx, messageID, hash, m)
		return err
	})
	if errors.Is(err, ErrDuplicate) {
		return s.storedOutcome(ctx, messageID, err)
	}
	return out, err
}

// storedOutcome answers a duplicate delivery with what its first
// processing stored in the inbox: the same Outcome, with Duplicate set. The
// row comes from the claim when the claiming statement saw it (no extra
// round trip); otherwise the inbox is read again (Lookup).
func (s *Service) storedOutcome(ctx context.Context, messageID uuid.UUID, err error) (Outcome, error) {
	var rec inbox.Record
	var dup *duplicateError
	if errors.As(err, &dup) && dup.rec != nil {
		rec = *dup.rec
	} else {
		var lerr error
		if rec, lerr = s.Inbox.Lookup(ctx, s.Pool, inbox.Key{Group: ConsumerGroup, MessageID: messageID}); lerr != nil {
			return Outcome{}, fmt.Errorf("flow: answer a duplicate from the inbox: %w", lerr)
		}
	}
	out := Outcome{Code: rec.Result.Code}
	if len(rec.Result.Payload) > 0 {
		if err := json.Unmarshal(rec.Result.Payload, &out); err != nil {
			return Outcome{}, fmt.Errorf("flow: decode the stored result of message %s: %w", messageID, err)
		}
	}
	out.Duplicate = true
	return out, nil
}
