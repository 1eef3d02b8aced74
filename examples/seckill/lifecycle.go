package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/frontdoor"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// publisher is the relays' broker. With the real stack it is JetStream
// (PubAck awaited, Nats-Msg-Id = event id) and the events reach their
// consumers through the stream; with -stack memory the events are applied
// here, at once: ORDER_CREATED reaches the buyer, a front-door release the
// front door through the same consumer as on the real stack (inbox,
// RELEASE_PENDING → RELEASED), idempotently.
func (s *service) publisher() func(context.Context, []outbox.Message) []error {
	if s.js != nil {
		return s.js.EventPublisher(s.countPublished)
	}
	return func(ctx context.Context, msgs []outbox.Message) []error {
		errs := make([]error, 0, len(msgs))
		for _, m := range msgs {
			// The event's consumers run here: the trace continues from the
			// event's headers, as from a NATS message's on the real stack.
			mctx, span := s.tel.start(s.tel.extract(ctx, propagation.MapCarrier(m.Headers)), m.Tag+" process", trace.SpanKindConsumer)
			if m.Tag == flow.TagOrderCreated {
				s.log.DebugContext(mctx, "event consumed", "tag", m.Tag, "message_id", m.EventID, "in_process", true)
			}
			span.End()
			if m.Tag == flow.TagOrderCreated && s.onOrderCreated != nil {
				if id, err := orderIDOf(m.Payload); err == nil {
					s.onOrderCreated(id)
				}
			}
			if m.Tag == flow.TagFrontDoorRelease {
				// The real stack's consumer, run here: a failed release is
				// not published, and the relay tries it again.
				if err := s.releaseConsumer()(ctx, broker.Message{ID: m.EventID, Body: m.Payload, Header: natsHeader(m.Headers)}); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			if m.Tag == flow.TagRefundRequested {
				s.stats.refunds.Add(1)
			}
			s.countPublished(m)
			errs = append(errs, nil)
		}
		return errs
	}
}

func (s *service) countPublished(m outbox.Message) {
	if _, seen := s.stats.publishedIDs.LoadOrStore(m.EventID, struct{}{}); !seen {
		s.stats.addPublished(m.Tag)
	}
}

func (s *service) countRelease(r frontdoor.ReleaseResult, err error) {
	switch {
	case err != nil:
	case r == frontdoor.Released:
		s.stats.releases.Add(1)
	case r == frontdoor.ReleasedAlready:
		s.stats.releasesAlready.Add(1)
	default:
		s.stats.releasesUnknown.Add(1)
	}
}

// natsHeader is the NATS header of an outbox event's headers, as the
// JetStream publisher sends them.
func natsHeader(h map[string]string) nats.Header {
	out := nats.Header{}
	for k, v := range h {
		out.Set(k, v)
	}
	return out
}

func orderIDOf(payload []byte) (int64, error) {
	var p struct {
		OrderID int64 `json:"order_id"`
	}
	if err := json.Unmarshal(payload, &p); err != nil || p.OrderID <= 0 {
		return 0, fmt.Errorf("event payload without an order id: %w", errors.Join(err, flow.ErrPoison))
	}
	return p.OrderID, nil
}

func reservationIDOf(payload []byte) (uuid.UUID, error) {
	var p struct {
		ReservationID uuid.UUID `json:"reservation_id"`
	}
	if err := json.Unmarshal(payload, &p); err != nil || p.ReservationID == uuid.Nil {
		return uuid.Nil, fmt.Errorf("event payload without a reservation id: %w", errors.Join(err, flow.ErrPoison))
	}
	return p.ReservationID, nil
}

// eventHandler is the consumer of one event type on the real stack: in one
// transaction it claims the event in the inbox (group), applies it and
// records the result, then the broker acks. A redelivered event finds its
// inbox row and is acked without being applied again. apply's effect
// outside PostgreSQL (Redis, the buyer) must itself be idempotent: it runs
// before COMMIT, and a transaction that fails after it is retried.
//
// known, when not "", is the result apply returns whenever it succeeds:
// the claim then stores the row with it (inbox.Message.Result) and BEGIN
// travels with the claim (pgtx.Options.DeferBegin), two round trips in
// all; otherwise (or with the service's eventTwoStep) the claim, then
// inbox.Store.Complete with apply's result, four.
func (s *service) eventHandler(group, tag, known string, apply applyFunc) func(context.Context, broker.Message) error {
	oneStep := known != "" && !s.eventTwoStep
	return func(ctx context.Context, m broker.Message) error {
		ctx = s.tel.extract(ctx, broker.HeaderCarrier(m.Header))
		ctx, span := s.tel.start(ctx, tag+" process", trace.SpanKindConsumer)
		defer span.End()
		key := inbox.Key{Group: group, MessageID: m.ID}
		msg := inbox.Message{Group: group, MessageID: m.ID, Topic: flow.EventTopic, Tag: tag, PayloadHash: inbox.HashPayload(m.Body)}
		if oneStep {
			msg.Result = &inbox.Result{Code: known}
		}
		var code string
		err := pgtx.RunInTx(ctx, s.Pool, pgtx.Options{Name: group, Observer: s.txObs, DeferBegin: oneStep}, func(tx pgx.Tx) error {
			claim, err := s.Inbox.ClaimMessage(ctx, tx, msg)
			if err != nil {
				return err
			}
			s.tel.obs.RecordInboxClaim(ctx, group, claim.Fresh)
			if !claim.Fresh {
				return flow.ErrDuplicate
			}
			if code, err = apply(ctx, tx, m.Body); err != nil {
				return err
			}
			if oneStep {
				if code != known { // the claim stored known: a different result would be a lie
					return fmt.Errorf("%s: apply returned %q, not the result %q the claim stored", group, code, known)
				}
				return nil
			}
			return s.Inbox.Complete(ctx, tx, key, inbox.Result{Code: code})
		})
		switch {
		case err == nil:
			s.log.DebugContext(ctx, "event consumed", "group", group, "tag", tag, "message_id", m.ID, "code", code)
		case errors.Is(err, flow.ErrDuplicate):
			s.log.DebugContext(ctx, "event consumed", "group", group, "tag", tag, "message_id", m.ID, "duplicate", true)
			s.stats.eventDuplicates.Add(1)
			return nil
		case s.js != nil && (errors.Is(err, flow.ErrPoison) || errors.Is(err, inbox.ErrPayloadMismatch)):
			if perr := s.recordPoison(ctx, s.js.EventStream, m, 0, err); perr != nil {
				return perr
			}
			s.stats.poison.Add(1)
			return nil
		}
		return err
	}
}

// applyFunc applies one event in its consumer's transaction and returns
// the result code the inbox stores.
type applyFunc func(ctx context.Context, tx pgx.Tx, payload []byte) (string, error)

// eventBatchHandler is the consumer of a batch of events whose result is
// known up front (known): one transaction claims them all with their
// result behind a deferred BEGIN (one pipeline of inbox claims, then
// COMMIT: two round trips for the batch), applies the fresh ones and
// commits. Each event's span continues its own trace. When the batch
// fails (an event that is poison, a payload that differs from its stored
// one, a claim that met another's COMMIT), each event is handled again
// alone by one, which classifies its own failure; a COMMIT whose outcome
// is unknown is not retried: every event stays unacked, and the
// redeliveries meet the inbox.
func (s *service) eventBatchHandler(group, tag, known string, apply applyFunc) func(context.Context, []broker.Message) []error {
	one := s.eventHandler(group, tag, known, apply)
	return func(ctx context.Context, ms []broker.Message) []error {
		errs := make([]error, len(ms))
		if len(ms) > 1 {
			err := s.claimBatch(ctx, group, tag, known, apply, ms)
			switch {
			case err == nil:
				return errs
			case errors.Is(err, pgtx.ErrCommitOutcomeUnknown) || ctx.Err() != nil:
				for i := range errs {
					errs[i] = err
				}
				return errs
			}
			s.stats.eventBatchesSplit.Add(1)
			s.log.DebugContext(ctx, "event batch handled one by one", "group", group, "events", len(ms), "error", err)
		}
		for i, m := range ms {
			errs[i] = one(ctx, m)
		}
		return errs
	}
}

// claimBatch runs eventBatchHandler's transaction for ms.
func (s *service) claimBatch(ctx context.Context, group, tag, known string, apply applyFunc, ms []broker.Message) error {
	spans := make([]trace.Span, len(ms))
	ctxs := make([]context.Context, len(ms))
	for i, m := range ms {
		ctxs[i], spans[i] = s.tel.start(s.tel.extract(ctx, broker.HeaderCarrier(m.Header)), tag+" process", trace.SpanKindConsumer)
	}
	defer func() {
		for _, sp := range spans {
			sp.End()
		}
	}()
	// The claims go out in message-id order: two batches that share events
	// (redeliveries) take their row locks in one order and never deadlock.
	order := make([]int, len(ms))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(ms[a].ID[:], ms[b].ID[:]) })
	claims := make([]inbox.Claim, len(ms))
	err := pgtx.RunInTx(ctx, s.Pool, pgtx.Options{Name: group, Observer: s.txObs, DeferBegin: true}, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, i := range order {
			m := ms[i]
			msg := inbox.Message{Group: group, MessageID: m.ID, Topic: flow.EventTopic, Tag: tag,
				PayloadHash: inbox.HashPayload(m.Body), Result: &inbox.Result{Code: known}}
			if err := s.Inbox.QueueClaimMessage(b, msg, &claims[i], pgtx.Return); err != nil {
				return err
			}
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		for i, m := range ms {
			if !claims[i].Fresh {
				continue // a redelivery: its first transaction applied it
			}
			code, err := apply(ctxs[i], tx, m.Body)
			if err != nil {
				return err
			}
			if code != known { // the claim stored known: a different result would be a lie
				return fmt.Errorf("%s: apply returned %q, not the result %q the claim stored", group, code, known)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.stats.eventBatches.Add(1)
	s.stats.eventsBatched.Add(int64(len(ms)))
	for i, m := range ms {
		s.tel.obs.RecordInboxClaim(ctxs[i], group, claims[i].Fresh)
		if !claims[i].Fresh {
			s.stats.eventDuplicates.Add(1)
		}
		s.log.DebugContext(ctxs[i], "event consumed", "group", group, "tag", tag, "message_id", m.ID, "code", known, "duplicate", !claims[i].Fresh, "batch", len(ms))
	}
	return nil
}

// eventBatchHandlers are the consumers that take their events in batches
// (see eventBatchHandler), by durable consumer name: those whose result
// is known up front, unless the service claims one event per transaction
// (eventBatch of 1) or in two steps (eventTwoStep).
func (s *service) eventBatchHandlers() map[string]func(context.Context, []broker.Message) []error {
	if s.eventBatch <= 1 || s.eventTwoStep {
		return nil
	}
	return map[string]func(context.Context, []broker.Message) []error{
		"order-created":    s.eventBatchHandler("order-created-consumer", flow.TagOrderCreated, "BUYER_NOTIFIED", s.notifyBuyer),
		"refund-requested": s.eventBatchHandler("refund-consumer", flow.TagRefundRequested, "REFUND_QUEUED", s.queueRefund),
	}
}

// notifyBuyer applies ORDER_CREATED: the buyer learns of the order (and
// ignores a second notice).
func (s *service) notifyBuyer(_ context.Context, _ pgx.Tx, p []byte) (string, error) {
	id, err := orderIDOf(p)
	if err != nil {
		return "", err
	}
	if s.onOrderCreated != nil {
		s.onOrderCreated(id)
	}
	return "BUYER_NOTIFIED", nil
}

// queueRefund applies REFUND_REQUESTED.
func (s *service) queueRefund(context.Context, pgx.Tx, []byte) (string, error) {
	s.stats.refunds.Add(1) // a real service would call the payment provider here
	return "REFUND_QUEUED", nil
}

// eventHandlers are the consumers of the real stack's events, by durable
// consumer name.
func (s *service) eventHandlers() map[string]func(context.Context, broker.Message) error {
	return map[string]func(context.Context, broker.Message) error{
		"order-created":     s.eventHandler("order-created-consumer", flow.TagOrderCreated, "BUYER_NOTIFIED", s.notifyBuyer),
		"frontdoor-release": s.releaseConsumer(),
		"refund-requested":  s.eventHandler("refund-consumer", flow.TagRefundRequested, "REFUND_QUEUED", s.queueRefund),
	}
}

// releaseConsumer applies FRONTDOOR_RELEASE events (both stacks): the
// front door gives the reservation back (idempotent), then, in the
// consumer's transaction with its inbox claim, a RELEASE_PENDING
// reservation becomes RELEASED (flow.Service.FrontDoorReleased); a
// redelivery finds the inbox row and changes nothing. A release the front
// door refuses is counted (flow.Service.FrontDoorReleaseFailed) and the
// event delivered again, until the reservation is MANUAL_REQUIRED: then
// the event is completed and a human takes over. A front door that is down
// (frontdoor.ErrDown: Redis away or being rebuilt) is waited out, not
// counted: an outage is not the release failing.
func (s *service) releaseConsumer() func(context.Context, broker.Message) error {
	return s.eventHandler("frontdoor-release-consumer", flow.TagFrontDoorRelease, "", func(ctx context.Context, tx pgx.Tx, p []byte) (string, error) {
		id, err := reservationIDOf(p)
		if err != nil {
			return "", err
		}
		r, err := s.front.Release(ctx, id, 0)
		s.countRelease(r, err)
		switch {
		case errors.Is(err, frontdoor.ErrDown):
			return "", err // not acked, delivered again
		case err != nil:
			s.stats.releaseFailures.Add(1)
			escalated, ferr := s.FrontDoorReleaseFailed(ctx, s.Pool, id, s.releaseFailures)
			switch {
			case ferr != nil:
				return "", errors.Join(err, ferr)
			case escalated:
				s.stats.releasesManual.Add(1)
				return flow.ReleaseManualRequired, nil
			}
			return "", err
		}
		return s.FrontDoorReleased(ctx, tx, id)
	})
}
