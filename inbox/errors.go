package inbox

import (
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/seckillkit/seckill/internal/textcheck"
)

// ErrInvalidArgument is matched by every error that rejects input before
// anything is sent to the database (nothing is written). The concrete type
// is *Error, with Field and Reason.
var ErrInvalidArgument = errors.New("inbox: invalid argument")

// ErrPayloadMismatch is matched when a message is redelivered with a
// payload hash different from the one stored by its first processing: the
// same message id carries a different body, which is a producer bug or a
// collision, never a silent duplicate. The concrete type is
// *Error, with the stored row (its hash in Record.PayloadHash) and the
// delivery's hash in Given. Nothing was written.
var ErrPayloadMismatch = errors.New("inbox: payload hash differs from the stored one")

// ErrNotFound is matched when no inbox row is visible for a key: by
// [Store.Lookup], and by [Store.Complete] when the message was not claimed
// (in this transaction or a committed one).
var ErrNotFound = errors.New("inbox: message not found")

// ErrAlreadyCompleted is matched when [Store.Complete] finds the row
// already PROCESSED: a result is recorded once and never overwritten. The
// concrete type is *Error, with the row it found in Record.
var ErrAlreadyCompleted = errors.New("inbox: result already recorded")

// ErrNotClaimer is matched when [Store.Complete] finds the message CLAIMED
// by another transaction that committed without a result: the result of a
// message belongs to the transaction that claimed it and did its work, so
// nothing is written. The concrete type is *Error, with the row it found in
// Record.
var ErrNotClaimer = errors.New("inbox: message claimed by another transaction")

// ErrConcurrentClaim is returned only by the batch forms
// ([Store.QueueClaimMessage] with [pgtx.Return]) when the
// claim waited for a concurrent transaction that inserted the same key and
// then committed: the message IS a duplicate, but the committed row is not
// visible to the claiming statement's snapshot and a batch callback cannot
// send a second statement. Treat it as a duplicate: roll back the work
// queued with it, and call [Store.Lookup] (a new statement sees the row)
// for the stored result. [Store.ClaimMessage] resolves this case itself,
// and so do the batch forms of a Store with Config.Citus, which queue the
// look-up with the insert: for them it means only that the row the insert
// conflicted with was deleted (purged) before the look-up; nothing was
// written, claim again.
var ErrConcurrentClaim = errors.New("inbox: message committed by a concurrent transaction while claiming")

// ErrDuplicate is matched by the error of a one-batch claim
// ([Store.QueueClaimMessage] with [pgtx.Abort]) that met the message
// already claimed:
// its insert raised unique_violation on the inbox key, which aborted
// the whole transaction. The error unwraps to the server's
// *pgconn.PgError. Run the general path ([Store.ClaimMessage], in a new
// transaction) to answer the duplicate.
var ErrDuplicate = errors.New("inbox: message already claimed")

// Error is the error of every refusal of the package: it matches (Unwrap)
// its sentinel, Err, and carries what the caller may act on. Which fields
// are set depends on Err:
//
//   - [ErrInvalidArgument]: Field and Reason (nothing was sent).
//   - [ErrPayloadMismatch]: Key, Record (the stored row, whose PayloadHash
//     is the stored hash) and Given (this delivery's hash).
//   - [ErrAlreadyCompleted], [ErrNotClaimer]: Op, Key and Record (the row
//     found, whose Status says which).
//   - [ErrRetentionTooShort]: Op, OlderThan, Age and MinRetention.
type Error struct {
	// Err is the sentinel the error matches.
	Err error
	// Op is the operation refused, e.g. "complete", "purge", "archive".
	Op string
	// Key is the message's consumer group and id.
	Key Key
	// Record is the stored row the operation found.
	Record Record
	// Given is the payload hash of this delivery (nil: none).
	Given []byte
	// Field and Reason name the rejected argument and say why, e.g.
	// "Message.Group" and "empty".
	Field, Reason string
	// OlderThan is the purge or archive horizon the caller passed.
	OlderThan time.Time
	// Age is how old OlderThan was when checked (negative: in the future).
	Age time.Duration
	// MinRetention is Config.MinRetention.
	MinRetention time.Duration
}

// Error describes the refusal: the field and the reason of invalid input
// (e.g. "inbox: invalid Message.Group: empty"), the message, its group and
// both hashes of a payload mismatch, the row's status for a refused
// Complete, the horizon's age and the minimum retention for a refused purge
// or archive.
func (e *Error) Error() string {
	switch e.Err {
	case ErrInvalidArgument:
		return textcheck.Message("inbox", e.Field, e.Reason)
	case ErrPayloadMismatch:
		return fmt.Sprintf("inbox: message %s in group %q: payload hash %s differs from stored %s",
			e.Key.MessageID, e.Key.Group, hexOrNone(e.Given), hexOrNone(e.Record.PayloadHash))
	case ErrRetentionTooShort:
		return fmt.Sprintf("inbox: %s: horizon %s is %s old, younger than the minimum retention %s (Config.MinRetention: the broker's replay window plus compensation and repair time)",
			e.Op, e.OlderThan.UTC().Format(time.RFC3339), e.Age.Round(time.Second), e.MinRetention)
	}
	return fmt.Sprintf("inbox: %s message %s in group %q: row is %s", e.Op, e.Key.MessageID, e.Key.Group, e.Record.Status)
}

// Unwrap returns Err, the sentinel.
func (e *Error) Unwrap() error { return e.Err }

func hexOrNone(b []byte) string {
	if b == nil {
		return "(none)"
	}
	return hex.EncodeToString(b)
}

// stateError refuses op on the row rec: ErrAlreadyCompleted when it is
// PROCESSED, ErrNotClaimer when CLAIMED by another transaction.
func stateError(op string, rec Record) error {
	err := ErrNotClaimer
	if rec.Status == StatusProcessed {
		err = ErrAlreadyCompleted
	}
	return &Error{Err: err, Op: op, Key: rec.Key, Record: rec}
}

func notFound(op string, k Key) error {
	return fmt.Errorf("inbox: %s message %s in group %q: %w", op, k.MessageID, k.Group, ErrNotFound)
}
