package pgtx

import (
	"context"
	"time"
)

// EventKind says what happened in a [RunInTx] call.
type EventKind int

const (
	// EventAttempt: an attempt is about to begin its transaction.
	EventAttempt EventKind = iota + 1
	// EventRetry: the attempt failed with a retryable error (Event.Err) and
	// RunInTx will try again after Event.Backoff.
	EventRetry
	// EventCommitted: the transaction committed (Event.Attempt is the
	// attempt that did).
	EventCommitted
	// EventCommitUnknown: COMMIT's outcome is unknown (Event.Err). When
	// resolution is enabled an EventResolved follows.
	EventCommitUnknown
	// EventResolved: resolution decided an unknown commit. Event.Committed
	// tells which way; Event.Err is nil when it committed.
	EventResolved
	// EventFailed: RunInTx is returning an error (Event.Err) other than a
	// commit whose outcome is unknown.
	EventFailed
)

// String returns the kind's name, e.g. "retry".
func (k EventKind) String() string {
	switch k {
	case EventAttempt:
		return "attempt"
	case EventRetry:
		return "retry"
	case EventCommitted:
		return "committed"
	case EventCommitUnknown:
		return "commit_unknown"
	case EventResolved:
		return "resolved"
	case EventFailed:
		return "failed"
	}
	return "unknown"
}

// Event describes one step of a [RunInTx] call to an [Observer].
type Event struct {
	Kind      EventKind
	Name      string        // Options.Name
	Attempt   int           // 1-based attempt number
	Err       error         // the error behind EventRetry, EventCommitUnknown, EventFailed
	Backoff   time.Duration // the wait before the next attempt (EventRetry)
	Committed bool          // EventResolved: the resolution found the transaction committed
	Elapsed   time.Duration // time since RunInTx was called
}

// Observer receives the events of [RunInTx] calls, e.g. to count retries
// and unknown commits. ObserveTx is called synchronously on the calling
// goroutine and must be fast and safe for concurrent use.
type Observer interface {
	ObserveTx(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(ctx context.Context, e Event)

// ObserveTx calls f(ctx, e).
func (f ObserverFunc) ObserveTx(ctx context.Context, e Event) { f(ctx, e) }
