package outbox

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/internal/textcheck"
)

// ErrInvalidArgument is matched by every error that rejects caller input
// before anything is sent to the database. The concrete type is *[Error],
// with Field and Reason.
var ErrInvalidArgument = errors.New("outbox: invalid argument")

// ErrLeaseLost is matched by the error of [Store.Mark] when some of the
// events were no longer held under the given lease: the lease expired and was recovered,
// another relay claimed them since, or they were already finished. Those
// rows were not touched. The concrete type is *[Error], with Lease and
// Lost.
var ErrLeaseLost = errors.New("outbox: lease lost")

// ErrDuplicate is matched by the error of a one-batch enqueue
// ([Store.QueueEnqueue] with [pgtx.Abort]) that met an event with the same dedup key:
// its insert raised unique_violation on uq_outbox_dedup, which aborted the
// whole transaction. The error unwraps to the server's *pgconn.PgError.
var ErrDuplicate = errors.New("outbox: an event with this dedup key exists")

// ErrRelayFailing is matched by the error [Relay.Run] returns when
// RelayConfig.MaxConsecutiveFailures (when set) cycles in a row failed:
// the relay could not claim or mark events for that long. The error wraps the last
// failure; every failure was logged. Run may be called again.
var ErrRelayFailing = errors.New("outbox: relay failing")

// ErrRelayRunning is returned by [Relay.Run] when the relay is already
// running.
var ErrRelayRunning = errors.New("outbox: relay already running")

// Error is the error of every refusal of the package: it matches (Unwrap)
// its sentinel, Err, and carries what the caller may act on:
//
//   - [ErrInvalidArgument]: Field and Reason (nothing was sent or written).
//   - [ErrLeaseLost]: Lease (the lease the caller passed) and Lost (one per
//     event not updated, never empty).
type Error struct {
	// Err is the sentinel the error matches.
	Err error
	// Field is the rejected argument or field, e.g. "events[3].Payload".
	Field string
	// Reason says why it was rejected, e.g. "longer than 128 characters".
	Reason string
	// Lease is the lease of a lease-checked update.
	Lease Lease
	// Lost lists the events a lease-checked update did not touch.
	Lost []LostEvent
}

// Error names the field and the reason of invalid input, or summarises the
// lost events of a lost lease (the first three in detail).
func (e *Error) Error() string {
	if e.Err != ErrLeaseLost {
		return textcheck.Message("outbox", e.Field, e.Reason)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "outbox: lease lost for %d event(s) of owner %q", len(e.Lost), e.Lease.Owner)
	for i, l := range e.Lost {
		if i == 3 {
			fmt.Fprintf(&b, ", …")
			break
		}
		if !l.Exists {
			fmt.Fprintf(&b, "; %s: not found", l.EventID)
			continue
		}
		fmt.Fprintf(&b, "; %s: %s", l.EventID, l.Status)
		if l.LockedBy != "" {
			fmt.Fprintf(&b, " by %q", l.LockedBy)
		}
	}
	return b.String()
}

// Unwrap returns Err, the sentinel.
func (e *Error) Unwrap() error { return e.Err }

func invalid(field, format string, args ...any) *Error {
	return &Error{Err: ErrInvalidArgument, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// LostEvent is one event a lease-checked update did not touch, with the
// row's current state: its latest committed version, read after any wait
// for the writer that took the lease away (a mark that waited behind a
// lease recovery reports RETRY without owner, not its own lost lease).
type LostEvent struct {
	// EventID is the id the caller passed.
	EventID uuid.UUID
	// Exists is false when no row has this id (never enqueued, or purged).
	Exists bool
	// Status, LockedBy are the row's current state; LockedBy is "" when the
	// row is not SENDING.
	Status   Status // the current status; 0 (StatusPending) when !Exists
	LockedBy string // the current owner's id; "" unless Status is StatusSending
}

// nilHandle rejects a nil transaction or connection handle (a
// *Error matching ErrInvalidArgument) instead of letting the call
// panic on it.
func nilHandle(name string) error { return invalid(name, "must not be nil") }
