package pgtx

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Observer receives the lifecycle of [RunInTx] and [RunBatch] calls, to
// build metrics (retries, unknown commits, commits per name) or tracing
// spans on, without this module depending on a metrics or tracing
// library.
//
// Every package of this module that reports anything does it the same
// way: an Observer struct of hook functions in its config, the context
// first, one event struct per package (structs can gain fields without
// breaking anyone). A nil hook does nothing, so an observer sets only the
// hooks it needs, keeps compiling when hooks are added, and the zero
// Observer observes nothing. A hook that opens something that later ends
// (a call, an attempt) returns a context: it is handed to the matching end
// hook and to the hooks in between, so a span or a start time can ride on
// it, as with pgx's QueryTracer (TraceQueryStart returns the context
// TraceQueryEnd gets); when the start hook is nil, the end hook gets the
// context it would have been given. Each hook's documentation says whether
// it fires once per attempt (a retried transaction reports again; what it
// reports may be rolled back) or once per outcome (after COMMIT, or after
// the outcome is final): count business outcomes only from the latter.
//
// Hooks, not middleware: Watermill's router middleware and River's
// middleware wrap the next step (func(next) …) and can change or stop it;
// an observer only watches, which is all metrics and spans need, and
// cannot alter a retry or a commit decision. As River's OpenTelemetry
// support (otelriver) lives outside River's core module, this module's
// OpenTelemetry observers live in a module of their own,
// examples/otelseckill, which the example service (examples/seckill) uses.
//
// The hooks run synchronously on the goroutine of the call they observe
// and must be fast and safe for concurrent use. They receive the
// caller's ctx (with whatever the start hooks added); the statements of
// RunInTx and fn run on the caller's ctx, not on the hooks' contexts. A
// start hook must return ctx or a context derived from it.
//
// For one call the hooks fire in this order:
//
//	TxStart
//	  AttemptStart, AttemptEnd   (once per attempt; Event.Retry when another follows)
//	TxEnd                        (once, when the call returns)
//
// Every hook receives an [Event] with the fields that describe the call
// (Name, Batch, IsoLevel, MaxAttempts); the attempt and end hooks fill in
// more. [Classify] applied to an end hook's Event.Err tells the outcome:
// committed (Err nil, or RunBatch's *[ResultError]), not committed, or
// unknown ([ErrCommitOutcomeUnknown]).
type Observer struct {
	// TxStart fires once per call, before the first attempt. The context
	// it returns is passed to every later hook of the call.
	TxStart func(ctx context.Context, e Event) context.Context
	// AttemptStart fires once per attempt, before its BEGIN, with
	// e.Attempt set. The context it returns is passed to the attempt's
	// AttemptEnd.
	AttemptStart func(ctx context.Context, e Event) context.Context
	// AttemptEnd fires once per attempt, when it is over: committed,
	// rolled back (to be retried or not), or COMMIT sent and its answer
	// lost (after the resolution, when ResolveCommit is set). Per
	// attempt: a transaction that was retried reports several. e has
	// Attempt, Err, Retry, Backoff, CommitLost and Elapsed set.
	AttemptEnd func(ctx context.Context, e Event)
	// TxEnd fires once per call, just before RunInTx or RunBatch returns:
	// after the COMMIT that committed (or the resolution that found it
	// committed), or once the call gave up. Per outcome: count committed
	// transactions here. e has Attempt (the attempts made), Err and
	// Elapsed set.
	TxEnd func(ctx context.Context, e Event)
}

// observesCall reports whether o has a hook of the call (TxStart, TxEnd).
func (o Observer) observesCall() bool { return o.TxStart != nil || o.TxEnd != nil }

// observesAttempt reports whether o has a hook of the attempts
// (AttemptStart, AttemptEnd).
func (o Observer) observesAttempt() bool { return o.AttemptStart != nil || o.AttemptEnd != nil }

func (o Observer) txStart(ctx context.Context, e Event) context.Context {
	if o.TxStart == nil {
		return ctx
	}
	return o.TxStart(ctx, e)
}

func (o Observer) attemptStart(ctx context.Context, e Event) context.Context {
	if o.AttemptStart == nil {
		return ctx
	}
	return o.AttemptStart(ctx, e)
}

func (o Observer) attemptEnd(ctx context.Context, e Event) {
	if o.AttemptEnd != nil {
		o.AttemptEnd(ctx, e)
	}
}

func (o Observer) txEnd(ctx context.Context, e Event) {
	if o.TxEnd != nil {
		o.TxEnd(ctx, e)
	}
}

// Event describes a [RunInTx] or [RunBatch] call to the [Observer]'s
// hooks. The call's fields are set for every hook; each hook's
// documentation says which of the others it fills in (the rest are zero).
type Event struct {
	Name        string         // Options.Name
	Batch       bool           // a RunBatch call
	IsoLevel    pgx.TxIsoLevel // the isolation level in effect
	MaxAttempts int            // the bound on attempts in effect

	// Attempt is the attempt's number, from 1 (AttemptStart,
	// AttemptEnd), or the number of attempts made (TxEnd; at least 1).
	Attempt int
	// Err is the attempt's error (AttemptEnd) or what the call returns
	// (TxEnd; for a panic in fn: an error naming it, the panic then
	// propagates): nil when the transaction committed cleanly. [Classify]
	// tells the outcome from it: Committed with a non-nil Err is
	// RunBatch's *ResultError (committed, a result callback failed); with
	// ResolveCommit and CommitLost, the outcome is what the resolution
	// found (OutcomeUnknown when it could not tell).
	Err error
	// Retry is true when another attempt follows (Err is a serialization
	// failure or a deadlock and attempts remain), after Backoff.
	Retry   bool
	Backoff time.Duration // the wait before the next attempt; 0 when Retry is false
	// CommitLost is true when COMMIT was sent and its answer never came.
	CommitLost bool
	// Elapsed is the attempt's duration, resolution included
	// (AttemptEnd), or the time since the call began, backoffs included
	// (TxEnd).
	Elapsed time.Duration
}
