package inbox

import (
	"fmt"

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
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
RETURNING true, status, result_code, result_payload, payload_hash, created_at, processed_at`

// constraintClaimed is the unique constraint a duplicate claim of
// [Store.QueueClaimMessage] with [pgtx.Abort] violates (the inbox key). On Citus the
// server may report it with a shard suffix.
const constraintClaimed = "pk_consumer_inbox"

// queueClaimOrAbort is [Store.QueueClaimMessage] with [pgtx.Abort]: the
// claim of msg for a transaction sent as one batch ([pgtx.RunBatch]) that
// commits only when the message is new. It inserts the row as
// [Store.ClaimMessage] does for a fresh claim (PROCESSED with
// Message.Result when set, else CLAIMED) and fills dst (when not nil) with
// the fresh claim, but a duplicate does not come back as a Claim: the
// insert raises unique_violation (SQLSTATE 23505 on the inbox key,
// pk_consumer_inbox; [pgtx.UniqueViolationOf] names it), which aborts the
// whole transaction, COMMIT included; the error [pgtx.RunBatch] returns
// names this call ([pgtx.StatementError].Call) and matches
// [ErrDuplicate]. That covers a message processed before and one whose
// first processing is still in flight: the insert waits for that
// transaction and raises when it commits (or proceeds when it rolls
// back). The payload hash is not compared; run the general path
// ([Store.ClaimMessage], in a new transaction) after an abort to answer
// the duplicate and detect a changed payload.
//
// Invalid input returns a *[Error] and queues nothing.
func (in *Store) queueClaimOrAbort(b *pgx.Batch, msg Message, dst *Claim) error {
	if b == nil {
		return invalid("batch", "nil")
	}
	if err := msg.validate(); err != nil {
		return err
	}
	key := msg.Key()
	from := b.Len()
	b.Queue(in.sql.claimOrAbort, claimArgs(msg, msg.Result)...).QueryRow(func(row pgx.Row) error {
		c, err := scanClaim(row, key)
		if err != nil {
			return fmt.Errorf("inbox: claim message %s in group %q: %w", msg.MessageID, msg.Group, err)
		}
		if dst != nil {
			*dst = c
		}
		return nil
	})
	pgtx.NameCall(b, from, "inbox.Store.QueueClaimMessage("+msg.Group+" "+msg.MessageID.String()+")", in.fail.Classify)
	return nil
}
