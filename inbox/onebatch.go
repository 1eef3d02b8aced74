package inbox

import (
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// claimOrAbortSQL is the claim of a message expected to be new, for a
// transaction sent as one batch: a plain INSERT, without the ON CONFLICT of
// claimSQL, so that a duplicate raises unique_violation and aborts the
// transaction instead of returning the stored row.
const claimOrAbortSQL = `
INSERT INTO {schema}.consumer_inbox
	(consumer_group, message_id, topic, tag, message_key, ref, payload_hash, status, result_code, result_payload)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// ConstraintClaimed is the unique constraint a duplicate claim of
// [Inbox.QueueClaimMessageOrAbort] violates (the inbox key). On Citus the
// server may report it with a shard suffix.
const ConstraintClaimed = "pk_consumer_inbox"

// QueueClaimMessageOrAbort queues the claim of msg with its result res
// into b, for a transaction sent as one batch ([pgtx.RunBatch]) that
// commits only when the message is new. It inserts the row as
// [Inbox.ClaimMessageWithResult] does for a fresh claim (PROCESSED, with
// res), but a duplicate does not come back as a Claim: the insert raises
// unique_violation (SQLSTATE 23505 on [ConstraintClaimed];
// [pgtx.UniqueViolationOf] names it), which aborts the whole transaction,
// COMMIT included; the error [pgtx.RunBatch] returns names this call
// ([pgtx.StatementError].Call) and matches [ErrDuplicate]. That covers a message processed before and one whose
// first processing is still in flight: the insert waits for that
// transaction and raises when it commits (or proceeds when it rolls
// back). The payload hash is not compared; run the general path
// ([Inbox.ClaimMessage], in a new transaction) after an abort to answer
// the duplicate and detect a changed payload.
//
// Invalid input returns a *ValidationError and queues nothing.
func (in *Inbox) QueueClaimMessageOrAbort(b *pgx.Batch, msg Message, res Result) error {
	if b == nil {
		return invalid("batch", "nil")
	}
	if err := msg.validate(); err != nil {
		return err
	}
	if err := res.validate(); err != nil {
		return err
	}
	from := b.Len()
	b.Queue(in.sql.claimOrAbort, claimArgs(msg, &res)...)
	pgtx.NameCall(b, from, "inbox.Inbox.QueueClaimMessageOrAbort("+msg.Group+" "+msg.MessageID.String()+")", in.fail.Classify)
	return nil
}
