package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgval"
	"github.com/seckillkit/seckill/pgtx"
)

// maxClaimAttempts bounds ClaimMessage's loop in the (practically
// impossible) case that the row it raced with is purged between the claim
// and the look-up, every time.
const maxClaimAttempts = 3

// HashPayload returns the SHA-256 digest of a message body, suitable for
// Message.PayloadHash.
func HashPayload(body []byte) []byte {
	h := sha256.Sum256(body)
	return h[:]
}

// ClaimMessage claims msg for the caller's transaction tx by inserting its
// inbox row (status CLAIMED). It must run in the transaction that does the
// message's work, before that work:
//
//   - Claim.Fresh: this transaction owns the message. The row exists only
//     if tx commits; after a rollback the message can be claimed again.
//     Record the result with [Store.Complete] before committing (or set
//     Message.Result when the result is known up front).
//   - !Claim.Fresh: a duplicate. Claim.Record is the stored row (the result
//     of the first processing, or StatusClaimed if it recorded none). Do not
//     repeat the work; ack the message.
//
// If another transaction holds an uncommitted claim on the same key,
// ClaimMessage blocks until it ends: after its commit the call returns the
// committed row as a duplicate, after its rollback this call becomes the
// owner. Fresh claims and duplicates of committed messages cost one
// statement; a duplicate that waited costs two. With Config.Citus every
// claim is two statements (the insert and a look-up) sent as one batch:
// one round trip whatever the case.
//
// A duplicate whose payload hash differs from the stored one returns a
// *[Error] (matching [ErrPayloadMismatch]) and writes nothing.
// Invalid input returns a *[Error] before anything is sent.
func (in *Store) ClaimMessage(ctx context.Context, tx pgx.Tx, msg Message) (_ Claim, err error) {
	defer in.fail.Explain(&err)
	if tx == nil {
		return Claim{}, nilHandle("tx")
	}
	return in.claim(ctx, tx, msg, msg.Result)
}

func (in *Store) claim(ctx context.Context, tx pgx.Tx, msg Message, res *Result) (Claim, error) {
	if err := msg.validate(); err != nil {
		return Claim{}, err
	}
	if in.citus {
		return in.claimRouted(ctx, tx, msg, res)
	}
	args := claimArgs(msg, res)
	for attempt := 1; ; attempt++ {
		c, err := scanClaim(tx.QueryRow(ctx, in.sql.claim, args...), msg.Key())
		if err == nil {
			return c, checkHash(msg, c)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return Claim{}, fmt.Errorf("inbox: claim message %s in group %q: %w", msg.MessageID, msg.Group, err)
		}
		// The claim waited for a concurrent transaction that committed the
		// same key; see sql/claim.sql. A new statement sees its row.
		rec, err := in.Lookup(ctx, tx, msg.Key())
		if err == nil {
			c := Claim{Record: rec}
			return c, checkHash(msg, c)
		}
		if !errors.Is(err, ErrNotFound) || attempt == maxClaimAttempts {
			return Claim{}, err
		}
	}
}

func claimArgs(msg Message, res *Result) []any {
	status, code, payload := StatusClaimed, any(nil), any(nil)
	if res != nil {
		status, code = StatusProcessed, res.Code
		if res.Payload != nil {
			payload = string(res.Payload)
		}
	}
	var hash any
	if msg.PayloadHash != nil {
		hash = msg.PayloadHash
	}
	return []any{msg.Group, pgval.UUID(msg.MessageID), msg.Topic, nullable(msg.Tag), nullable(msg.MessageKey),
		nullable(msg.Ref), hash, int16(status), code, payload}
}

// scanClaim reads one row of the claim or lookup statement.
func scanClaim(row pgx.Row, k Key) (Claim, error) {
	var (
		c       Claim
		status  int16
		code    *string
		payload []byte
	)
	if err := row.Scan(&c.Fresh, &status, &code, &payload, &c.Record.PayloadHash,
		&c.Record.CreatedAt, &c.Record.ProcessedAt); err != nil {
		return Claim{}, err
	}
	c.Record.Key = k
	c.Record.Status = Status(status)
	if code != nil {
		c.Record.Result.Code = *code
	}
	if payload != nil {
		c.Record.Result.Payload = payload
	}
	return c, nil
}

// checkHash fails a duplicate whose payload hash differs from the stored
// one. A fresh claim stored the given hash, so it always matches.
func checkHash(msg Message, c Claim) error {
	if c.Fresh {
		return nil
	}
	stored, given := c.Record.PayloadHash, msg.PayloadHash
	if (stored == nil) != (given == nil) || !bytes.Equal(stored, given) {
		return &Error{Err: ErrPayloadMismatch, Op: "claim", Key: msg.Key(), Record: c.Record, Given: given}
	}
	return nil
}

// QueueClaimMessage queues the claim of [Store.ClaimMessage] into b, for a
// caller that pipelines its transaction. When the batch runs, dst is
// filled and the callback returns (through BatchResults.Close) nil, a
// *[Error], [ErrConcurrentClaim] when the claim waited for a
// concurrent transaction that then committed the same key (a duplicate
// whose row this statement cannot see; see the error's doc), or the
// driver's error. With Config.Citus it queues two statements, the insert
// and a look-up, and the look-up answers that duplicate like any other.
// Statements queued after the claim run whatever it
// returns, so a caller that queues the message's work with it must roll
// back when !dst.Fresh. The returned error reports invalid input only;
// then nothing was queued.
//
// That is on = [pgtx.Return]. With on = [pgtx.Abort] the claim is for a
// transaction sent as one batch ([pgtx.RunBatch]) that commits only when
// the message is new: it inserts the row as a fresh claim does (PROCESSED
// with Message.Result when set, else CLAIMED), but a duplicate does not
// come back as a Claim: the insert raises unique_violation (SQLSTATE 23505
// on the inbox key, pk_consumer_inbox; [pgtx.UniqueViolationOf] names it),
// which aborts the whole transaction, COMMIT included; the error
// [pgtx.RunBatch] returns names this call ([pgtx.StatementError].Call) and
// matches [ErrDuplicate]. That covers a message processed before and one
// whose first processing is still in flight: the insert waits for that
// transaction and raises when it commits (or proceeds when it rolls back).
// The payload hash is not compared then; run the general path
// ([Store.ClaimMessage], in a new transaction) after an abort to answer the
// duplicate and detect a changed payload.
//
// dst may be nil: the outcome is then discarded.
func (in *Store) QueueClaimMessage(b *pgx.Batch, msg Message, dst *Claim, on pgtx.OnRefusal) error {
	if on == pgtx.Abort {
		return in.queueClaimOrAbort(b, msg, dst)
	}
	defer in.fail.Mark(b, "inbox.Store.QueueClaimMessage")()
	if dst == nil {
		dst = new(Claim)
	}
	return in.queueClaim(b, msg, msg.Result, dst)
}

func (in *Store) queueClaim(b *pgx.Batch, msg Message, res *Result, dst *Claim) error {
	if b == nil {
		return invalid("batch", "nil")
	}
	if err := msg.validate(); err != nil {
		return err
	}
	if in.citus {
		in.queueClaimRouted(b, msg, res, dst)
		return nil
	}
	b.Queue(in.sql.claim, claimArgs(msg, res)...).QueryRow(func(row pgx.Row) error {
		c, err := scanClaim(row, msg.Key())
		if errors.Is(err, pgx.ErrNoRows) {
			*dst = Claim{Record: Record{Key: msg.Key()}}
			return fmt.Errorf("inbox: claim message %s in group %q: %w", msg.MessageID, msg.Group, ErrConcurrentClaim)
		}
		if err != nil {
			return fmt.Errorf("inbox: claim message %s in group %q: %w", msg.MessageID, msg.Group, err)
		}
		*dst = c
		return checkHash(msg, c)
	})
	return nil
}

// claimRouted is the claim of Config.Citus: the claim_insert and lookup statements
// in one batch, sent again (at most maxClaimAttempts times in all) in the
// practically impossible case that the row the insert conflicted with was
// purged before the look-up.
func (in *Store) claimRouted(ctx context.Context, tx pgx.Tx, msg Message, res *Result) (Claim, error) {
	for attempt := 1; ; attempt++ {
		var (
			b pgx.Batch
			c Claim
		)
		in.queueClaimRouted(&b, msg, res, &c)
		err := tx.SendBatch(ctx, &b).Close()
		if !errors.Is(err, ErrConcurrentClaim) || attempt == maxClaimAttempts {
			return c, err
		}
	}
}

// queueClaimRouted queues the claim_insert and lookup statements into b. The
// look-up's row answers only when the insert inserted nothing; when it
// finds no row either (the conflicting row was purged in between), the
// callback returns ErrConcurrentClaim: nothing was written, claim again.
func (in *Store) queueClaimRouted(b *pgx.Batch, msg Message, res *Result, dst *Claim) {
	key := msg.Key()
	fresh := false
	b.Queue(in.sql.claimInsert, claimArgs(msg, res)...).QueryRow(func(row pgx.Row) error {
		c, err := scanClaim(row, key)
		switch {
		case err == nil:
			*dst, fresh = c, true
			return nil
		case errors.Is(err, pgx.ErrNoRows):
			return nil // a duplicate: the look-up answers
		default:
			return fmt.Errorf("inbox: claim message %s in group %q: %w", msg.MessageID, msg.Group, err)
		}
	})
	b.Queue(in.sql.lookup, msg.Group, pgval.UUID(msg.MessageID)).QueryRow(func(row pgx.Row) error {
		c, err := scanClaim(row, key)
		switch {
		case fresh:
			return err // the row this transaction just inserted
		case errors.Is(err, pgx.ErrNoRows):
			*dst = Claim{Record: Record{Key: key}}
			return fmt.Errorf("inbox: claim message %s in group %q: %w", msg.MessageID, msg.Group, ErrConcurrentClaim)
		case err != nil:
			return fmt.Errorf("inbox: claim message %s in group %q: %w", msg.MessageID, msg.Group, err)
		}
		*dst = c
		return checkHash(msg, c)
	})
}

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
