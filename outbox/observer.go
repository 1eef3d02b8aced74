package outbox

import (
	"context"
	"time"
)

// Observer receives what a [Relay] does, for metrics (events published,
// failed, dead, recovered; batch latency) or tracing, without this module
// depending on a metrics or tracing library: the context first, one event
// value per hook, a start hook returning the context its end hook gets.
// A nil hook does nothing, so an observer sets only the hooks it needs and
// keeps compiling when hooks are added.
//
// Every hook reports committed work, once: the relay's claim, marks and
// recoveries are statements of their own (no transaction of the caller is
// involved), and each hook fires after the statement it reports committed.
// Published counts marks, not deliveries: delivery stays at least once,
// and an event whose lease was lost before its mark (see [Store.Mark])
// was published by this relay but is counted once, by the relay that
// marks it; count distinct deliveries at the consumer.
//
// The hooks run on the relay's goroutine and must be fast and safe for
// concurrent use (several relays may share one Observer).
type Observer struct {
	// BatchStart fires once per non-empty claim, after the claim
	// committed, before the publish, with Owner and Messages set. The
	// context it returns is passed to the batch's BatchEnd. Per claim.
	BatchStart func(ctx context.Context, e RelayEvent) context.Context
	// BatchEnd fires once per batch, after its marks committed (or
	// failed: Err), with Owner, Claimed, Published, Failed, Dead,
	// Released, Err and Elapsed set. Per commit of the marks.
	BatchEnd func(ctx context.Context, e RelayEvent)
	// RecoverEnd fires after each lease-recovery statement that recovered
	// at least one event committed, with Owner, Recovered and Dead set.
	// Per commit.
	RecoverEnd func(ctx context.Context, e RelayEvent)
}

func (o Observer) batchStart(ctx context.Context, e RelayEvent) context.Context {
	if o.BatchStart == nil {
		return ctx
	}
	return o.BatchStart(ctx, e)
}

func (o Observer) batchEnd(ctx context.Context, e RelayEvent) {
	if o.BatchEnd != nil {
		o.BatchEnd(ctx, e)
	}
}

func (o Observer) recoverEnd(ctx context.Context, e RelayEvent) {
	if o.RecoverEnd != nil {
		o.RecoverEnd(ctx, e)
	}
}

// RelayEvent describes what a relay did, for an [Observer]: a claimed
// batch about to be published (BatchStart), a batch that is over
// (BatchEnd), or a lease-recovery statement that recovered events whose
// lease had expired (RecoverEnd, see [Store.Recover]). Each hook's doc says
// which fields it sets.
type RelayEvent struct {
	// Owner is the relay's owner id (RelayConfig.Owner).
	Owner string
	// Messages are the claimed events, in publish order; read them
	// (e.g. their Headers, to link a span to the trace that enqueued
	// each), do not modify them.
	Messages []Message
	// Claimed is the number of events the batch's claim returned.
	Claimed int
	// Published is the number of events marked SENT.
	Published int
	// Failed is the number of events marked RETRY or DEAD after a failed
	// publish.
	Failed int
	// Dead counts, of Failed (or of Recovered), the events that went DEAD
	// (their last attempt).
	Dead int
	// Released is the number of events given back at once, unattempted
	// (the relay was stopping).
	Released int
	// Recovered is the number of events taken back from an expired lease.
	Recovered int
	// Err is the error of the marking statements, if any (a lease lost
	// before the mark is not an error: the events are published again by
	// the relay that holds them now).
	Err error
	// Elapsed is the time from the claim to the end of the marks.
	Elapsed time.Duration
}
