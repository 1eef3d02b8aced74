package inbox

import (
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/seckillkit/seckill/internal/textcheck"
)

// ErrInvalidArgument is matched by every error that rejects input before
// anything is sent to the database (nothing is written). The concrete type
// is *ValidationError.
var ErrInvalidArgument = errors.New("inbox: invalid argument")

// ErrPayloadMismatch is matched when a message is redelivered with a
// payload hash different from the one stored by its first processing: the
// same message id carries a different body, which is a producer bug or a
// collision, never a silent duplicate. The concrete type is
// *PayloadMismatchError. Nothing was written.
var ErrPayloadMismatch = errors.New("inbox: payload hash differs from the stored one")

// ErrNotFound is matched when no inbox row is visible for a key: by
// [Inbox.Lookup], and by [Inbox.Complete] when the message was not claimed
// (in this transaction or a committed one).
var ErrNotFound = errors.New("inbox: message not found")

// ErrAlreadyCompleted is matched when [Inbox.Complete] finds the row
// already PROCESSED: a result is recorded once and never overwritten. The
// concrete type is *StateError.
var ErrAlreadyCompleted = errors.New("inbox: result already recorded")

// ErrNotClaimer is matched when [Inbox.Complete] finds the message CLAIMED
// by another transaction that committed without a result: the result of a
// message belongs to the transaction that claimed it and did its work, so
// nothing is written. The concrete type is *StateError.
var ErrNotClaimer = errors.New("inbox: message claimed by another transaction")

// ErrConcurrentClaim is returned only by the batch forms
// ([Inbox.QueueClaimMessage], [Inbox.QueueClaimMessageWithResult]) when the
// claim waited for a concurrent transaction that inserted the same key and
// then committed: the message IS a duplicate, but the committed row is not
// visible to the claiming statement's snapshot and a batch callback cannot
// send a second statement. Treat it as a duplicate: roll back the work
// queued with it, and call [Inbox.Lookup] (a new statement sees the row)
// for the stored result. [Inbox.ClaimMessage] resolves this case itself,
// and so do the batch forms of an Inbox with Config.Citus, which queue the
// look-up with the insert: for them it means only that the row the insert
// conflicted with was deleted (purged) before the look-up; nothing was
// written, claim again.
var ErrConcurrentClaim = errors.New("inbox: message committed by a concurrent transaction while claiming")

// ErrDuplicate is matched by the error of a one-batch claim
// ([Inbox.QueueClaimMessageOrAbort]) that met the message already claimed:
// its insert raised unique_violation on [ConstraintClaimed], which aborted
// the whole transaction. The error unwraps to the server's
// *pgconn.PgError. Run the general path ([Inbox.ClaimMessage], in a new
// transaction) to answer the duplicate.
var ErrDuplicate = errors.New("inbox: message already claimed")

// ValidationError rejects one argument and says why. It matches
// [ErrInvalidArgument].
type ValidationError struct {
	Field  string // e.g. "Message.Group"
	Reason string // e.g. "empty"
}

// Error names the package, the field and the reason, e.g.
// "inbox: invalid Message.Group: empty".
func (e *ValidationError) Error() string {
	return textcheck.Message("inbox", e.Field, e.Reason)
}

// Is reports whether target is [ErrInvalidArgument].
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidArgument }

// PayloadMismatchError reports a redelivery whose payload hash differs
// from the stored one. It matches [ErrPayloadMismatch].
type PayloadMismatchError struct {
	Key    Key    // the message's consumer group and id
	Stored []byte // hash stored by the first processing (nil: none)
	Given  []byte // hash of this delivery (nil: none)
	// Record is the stored row, for logging or manual repair.
	Record Record
}

// Error names the message and its group and gives both hashes in hex
// ("(none)" for a missing one).
func (e *PayloadMismatchError) Error() string {
	return fmt.Sprintf("inbox: message %s in group %q: payload hash %s differs from stored %s",
		e.Key.MessageID, e.Key.Group, hexOrNone(e.Given), hexOrNone(e.Stored))
}

// Is reports whether target is [ErrPayloadMismatch].
func (e *PayloadMismatchError) Is(target error) bool { return target == ErrPayloadMismatch }

func hexOrNone(b []byte) string {
	if b == nil {
		return "(none)"
	}
	return hex.EncodeToString(b)
}

// StateError reports that a row is not in the state an operation needs.
// It matches [ErrAlreadyCompleted] when Status is StatusProcessed and
// [ErrNotClaimer] when Status is StatusClaimed (claimed by another
// transaction).
type StateError struct {
	Key    Key    // the message's consumer group and id
	Status Status // the current status
	Op     string // e.g. "complete"
}

// Error names the operation, the message and its group, and the row's
// current status.
func (e *StateError) Error() string {
	return fmt.Sprintf("inbox: %s message %s in group %q: row is %s", e.Op, e.Key.MessageID, e.Key.Group, e.Status)
}

// Is reports whether target is [ErrAlreadyCompleted] for a PROCESSED row
// or [ErrNotClaimer] for a CLAIMED one.
func (e *StateError) Is(target error) bool {
	return (target == ErrAlreadyCompleted && e.Status == StatusProcessed) ||
		(target == ErrNotClaimer && e.Status == StatusClaimed)
}

// notFound wraps ErrNotFound with the key.
func notFound(op string, k Key) error {
	return fmt.Errorf("inbox: %s message %s in group %q: %w", op, k.MessageID, k.Group, ErrNotFound)
}
