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
// way: an Observer interface in its config, one method per hook, the
// context first, one event struct per hook (structs can gain fields
// without breaking anyone), and a Nop type to embed so that an observer
// implementing only some hooks keeps compiling when hooks are added.
// A hook that opens something that later ends (a call, an attempt)
// returns a context: it is handed to the matching end hook and to the
// hooks in between, so a span or a start time can ride on it, as with
// pgx's QueryTracer (TraceQueryStart returns the context TraceQueryEnd
// gets). Each hook's documentation says whether it fires once per attempt
// (a retried transaction reports again; what it reports may be rolled
// back) or once per outcome (after COMMIT, or after the outcome is final):
// count business outcomes only from the latter.
//
// Hooks, not middleware: Watermill's router middleware and River's
// middleware wrap the next step (func(next) …) and can change or stop it;
// an observer only watches, which is all metrics and spans need, and
// cannot alter a retry or a commit decision. As River's OpenTelemetry
// support (otelriver) lives outside River's core module, an OpenTelemetry
// or Prometheus observer for this module lives in the service (the example
// service, examples/seckill, has a Prometheus one).
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
//	  AttemptStart, AttemptEnd   (once per attempt; AttemptEnd.Retry when another follows)
//	TxEnd                        (once, when the call returns)
type Observer interface {
	// TxStart fires once per call, before the first attempt. The context
	// it returns is passed to every later hook of the call.
	TxStart(ctx context.Context, e TxStartEvent) context.Context
	// AttemptStart fires once per attempt, before its BEGIN. The context
	// it returns is passed to the attempt's AttemptEnd.
	AttemptStart(ctx context.Context, e AttemptStartEvent) context.Context
	// AttemptEnd fires once per attempt, when it is over: committed,
	// rolled back (to be retried or not), or COMMIT sent and its answer
	// lost (after the resolution, when ResolveCommit is set). Per
	// attempt: a transaction that was retried reports several.
	AttemptEnd(ctx context.Context, e AttemptEndEvent)
	// TxEnd fires once per call, just before RunInTx or RunBatch returns:
	// after the COMMIT that committed (or the resolution that found it
	// committed), or once the call gave up. Per outcome: count committed
	// transactions here.
	TxEnd(ctx context.Context, e TxEndEvent)
}

// NopObserver implements [Observer] and does nothing. Embed it in an
// observer that implements only some hooks: hooks added to Observer later
// are added to NopObserver too.
type NopObserver struct{}

// TxStart returns ctx.
func (NopObserver) TxStart(ctx context.Context, _ TxStartEvent) context.Context { return ctx }

// AttemptStart returns ctx.
func (NopObserver) AttemptStart(ctx context.Context, _ AttemptStartEvent) context.Context { return ctx }

// AttemptEnd does nothing.
func (NopObserver) AttemptEnd(context.Context, AttemptEndEvent) {}

// TxEnd does nothing.
func (NopObserver) TxEnd(context.Context, TxEndEvent) {}

// TxStartEvent describes a [RunInTx] or [RunBatch] call about to make its
// first attempt.
type TxStartEvent struct {
	Name        string         // Options.Name
	Batch       bool           // a RunBatch call
	IsoLevel    pgx.TxIsoLevel // the isolation level in effect
	MaxAttempts int            // the bound on attempts in effect
}

// AttemptStartEvent describes an attempt about to begin its transaction.
type AttemptStartEvent struct {
	Name    string // Options.Name
	Attempt int    // 1-based
}

// TxOutcome is what became of a transaction.
type TxOutcome int

const (
	// TxNotCommitted: nothing of the transaction committed.
	TxNotCommitted TxOutcome = iota + 1
	// TxCommitted: the transaction committed.
	TxCommitted
	// TxOutcomeUnknown: COMMIT was sent and no answer came; the
	// resolution, if enabled, could not decide
	// ([ErrCommitOutcomeUnknown]).
	TxOutcomeUnknown
)

// String returns the outcome's name: "not_committed", "committed" or
// "unknown", usable as a metric label.
func (o TxOutcome) String() string {
	switch o {
	case TxNotCommitted:
		return "not_committed"
	case TxCommitted:
		return "committed"
	case TxOutcomeUnknown:
		return "unknown"
	}
	return "invalid"
}

// AttemptEndEvent describes an attempt that is over.
type AttemptEndEvent struct {
	Name    string // Options.Name
	Attempt int    // 1-based
	// Outcome is the attempt's transaction's fate. TxCommitted with a
	// non-nil Err is RunBatch's *ResultError (committed, a result
	// callback failed).
	Outcome TxOutcome
	// Err is the attempt's error: nil when it committed cleanly.
	Err error
	// Retry is true when another attempt follows (Err is a serialization
	// failure or a deadlock and attempts remain), after Backoff.
	Retry   bool
	Backoff time.Duration // the wait before the next attempt; 0 when Retry is false
	// CommitLost is true when COMMIT was sent and its answer never came.
	// With ResolveCommit, Outcome is then what the resolution found
	// (TxOutcomeUnknown when it could not tell).
	CommitLost bool
	// Elapsed is the attempt's duration, resolution included.
	Elapsed time.Duration
}

// TxEndEvent describes a call that is returning.
type TxEndEvent struct {
	Name     string // Options.Name
	Attempts int    // attempts made (at least 1)
	// Outcome is the call's result: TxCommitted exactly when the
	// transaction committed (Err is then nil, or RunBatch's
	// *ResultError), TxOutcomeUnknown for [ErrCommitOutcomeUnknown].
	Outcome TxOutcome
	// Err is what the call returns (for a panic in fn: an error naming
	// it; the panic then propagates).
	Err error
	// Elapsed is the time since the call began, backoffs included.
	Elapsed time.Duration
}
