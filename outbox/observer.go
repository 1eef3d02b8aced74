package outbox

import (
	"context"
	"time"
)

// Observer receives what a [Relay] does, for metrics (events published,
// failed, dead, recovered; batch latency) or tracing, without this module
// depending on a metrics or tracing library. It follows the shape of every
// observer of this module (see pgtx.Observer): the context first, one
// event struct per hook, a start hook returning the context its end hook
// gets, and [NopObserver] to embed so that an observer implementing only
// some hooks keeps compiling when hooks are added.
//
// Every hook reports committed work, once: the relay's claim, marks and
// recoveries are statements of their own (no transaction of the caller is
// involved), and each hook fires after the statement it reports committed.
// Published counts marks, not deliveries: delivery stays at least once,
// and an event whose lease was lost before its mark (see [Store.MarkSent])
// was published by this relay but is counted once, by the relay that
// marks it; count distinct deliveries at the consumer.
//
// The hooks run on the relay's goroutine and must be fast and safe for
// concurrent use (several relays may share one Observer).
type Observer interface {
	// BatchStart fires once per non-empty claim, after the claim
	// committed, before the publish. The context it returns is passed to
	// the batch's BatchEnd. Per claim.
	BatchStart(ctx context.Context, e BatchStartEvent) context.Context
	// BatchEnd fires once per batch, after its marks committed (or
	// failed: Err). Per commit of the marks.
	BatchEnd(ctx context.Context, e BatchEndEvent)
	// RecoverEnd fires after each lease-recovery statement that recovered
	// at least one event committed. Per commit.
	RecoverEnd(ctx context.Context, e RecoverEvent)
}

// NopObserver implements [Observer] and does nothing. Embed it in an
// observer that implements only some hooks: hooks added to Observer later
// are added to NopObserver too.
type NopObserver struct{}

// BatchStart returns ctx.
func (NopObserver) BatchStart(ctx context.Context, _ BatchStartEvent) context.Context { return ctx }

// BatchEnd does nothing.
func (NopObserver) BatchEnd(context.Context, BatchEndEvent) {}

// RecoverEnd does nothing.
func (NopObserver) RecoverEnd(context.Context, RecoverEvent) {}

// BatchStartEvent describes a claimed batch about to be published.
type BatchStartEvent struct {
	Owner string // the relay's owner id
	// Messages are the claimed events, in publish order; read them
	// (e.g. their Headers, to link a span to the trace that enqueued
	// each), do not modify them.
	Messages []Message
}

// BatchEndEvent describes a batch that is over.
type BatchEndEvent struct {
	Owner     string // the relay's lease owner (RelayConfig.Owner)
	Claimed   int    // events the batch's claim returned
	Published int    // marked SENT
	Failed    int    // marked RETRY or DEAD after a failed publish
	Dead      int    // of Failed, the events that went DEAD (their last attempt)
	Released  int    // given back at once, unattempted (the relay was stopping)
	// Err is the error of the marking statements, if any (a lease lost
	// before the mark is not an error: the events are published again by
	// the relay that holds them now).
	Err error
	// Elapsed is the time from the claim to the end of the marks.
	Elapsed time.Duration
}

// RecoverEvent describes a lease-recovery statement that recovered
// events whose lease had expired (see [Store.RecoverExpired]).
type RecoverEvent struct {
	Owner     string // the relay that ran the recovery
	Recovered int    // events taken back from an expired lease
	Dead      int    // of Recovered, the events that went DEAD
}
