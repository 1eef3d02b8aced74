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

// claimSQL claims a message in ONE statement on the fresh path and on the
// common duplicate path (first processing committed before this statement
// began):
//
//   - ins tries the insert. ON CONFLICT DO NOTHING writes nothing for a
//     duplicate: no new row version, no row lock, no WAL, so duplicates
//     never block each other and never bloat the table (a DO UPDATE "touch"
//     would do all three).
//   - the second branch returns the stored row when ins inserted nothing.
//
// The race it cannot settle alone: another transaction has inserted the
// same key but not committed yet. The insert then waits for it; if it rolls
// back, the insert proceeds and this transaction owns the message (fresh).
// If it commits, the insert sees the conflict and does nothing, but the
// second branch reads with the statement's snapshot, taken before the wait,
// in which the other row is invisible: the statement returns NO row.
// ClaimMessage detects that and runs lookupSQL as a new statement, whose
// new snapshot (READ COMMITTED) sees the committed row. So the extra round
// trip is paid only by deliveries that raced an in-flight first processing.
// Under REPEATABLE READ or SERIALIZABLE, PostgreSQL itself refuses that case
// with SQLSTATE 40001 (the conflicting row is invisible to the transaction
// snapshot), which pgtx.RunInTx retries.
const claimSQL = `
WITH ins AS (
	INSERT INTO {schema}.consumer_inbox
		(consumer_group, message_id, topic, tag, message_key, ref, payload_hash, status, result_code, result_payload)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
	ON CONFLICT (consumer_group, message_id) DO NOTHING
	RETURNING status, result_code, result_payload, payload_hash, created_at, processed_at
)
SELECT true, status, result_code, result_payload, payload_hash, created_at, processed_at
FROM ins
UNION ALL
SELECT false, status, result_code, result_payload, payload_hash, created_at, processed_at
FROM {schema}.consumer_inbox
WHERE consumer_group = $1 AND message_id = $2 AND NOT EXISTS (SELECT FROM ins)`

// claimInsertSQL is the claim of Config.Citus: claimSQL's insert alone,
// returning the new row, or nothing for a duplicate. lookupSQL, sent after
// it in the same batch, reads the stored row: a new statement, whose
// snapshot (Read Committed) also sees a concurrent first processing that
// committed while the insert waited for it.
const claimInsertSQL = `
INSERT INTO {schema}.consumer_inbox
	(consumer_group, message_id, topic, tag, message_key, ref, payload_hash, status, result_code, result_payload)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (consumer_group, message_id) DO NOTHING
RETURNING true, status, result_code, result_payload, payload_hash, created_at, processed_at`

const lookupSQL = `
SELECT false, status, result_code, result_payload, payload_hash, created_at, processed_at
FROM {schema}.consumer_inbox
WHERE consumer_group = $1 AND message_id = $2`

// completeSQL records the result in one statement and tells why nothing
// was updated: cur is the row as the statement's snapshot sees it, upd the
// guarded update. processed_at never goes below created_at, even if the
// clock steps back between claim and completion.
//
// The claimer check: only the transaction that claimed the row may record
// its result. A CLAIMED row this statement can see was inserted either by a
// committed transaction or by this one (any of its subtransactions): an
// open transaction's insert is invisible to everyone else. So the row is
// ours exactly when its xmin is still in progress. xmin is a 32-bit xid;
// its 64-bit form (what pg_xact_status takes) is rebuilt from this
// transaction's own xid8 and the signed 32-bit distance between the two.
// A frozen xmin (below 3) is not ours. An xid at or past the snapshot's
// xmax (one past the latest completed transaction) belongs to no completed
// transaction, so it is ours, and pg_xact_status (which refuses xids that
// are not yet assigned) is asked only about older ones. (A CLAIMED row left
// without result for more than two billion transactions would be read as
// ours; purge such rows long before.)
//
// The transaction's own xid and snapshot are read in a LATERAL subquery of
// the row's query, not in a CTE of their own: on Citus (schema-based
// sharding) the statement is then routed whole to the node that holds the
// row, and the functions run there, in the transaction that inserted it.
// (A table-less CTE is run on the coordinator, with the coordinator's xid,
// and its result shipped to every worker.)
const completeSQL = `
WITH cur AS (
	SELECT i.status,
	       CASE WHEN i.xmin::text::int8 < 3 THEN false ELSE (
	         SELECT x.full >= me.nxt OR pg_xact_status(x.full::text::xid8) = 'in progress'
	           FROM (SELECT me.top + (((i.xmin::text::int8 - me.top % 4294967296) % 4294967296
	                                   + 6442450944) % 4294967296 - 2147483648) AS full) AS x) END AS mine
	FROM {schema}.consumer_inbox AS i,
	     LATERAL (SELECT pg_current_xact_id()::text::int8 AS top,
	                     pg_snapshot_xmax(pg_current_snapshot())::text::int8 AS nxt) AS me
	WHERE i.consumer_group = $1 AND i.message_id = $2
), upd AS (
	UPDATE {schema}.consumer_inbox
	SET status = 20, result_code = $3, result_payload = $4,
		processed_at = greatest(created_at, statement_timestamp())
	WHERE consumer_group = $1 AND message_id = $2 AND status = 10
	  AND (SELECT mine FROM cur)
	RETURNING 1
)
SELECT (SELECT status FROM cur), coalesce((SELECT mine FROM cur), false), EXISTS (SELECT FROM upd)`

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
		// same key; see claimSQL. A new statement sees its row.
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

// scanClaim reads one row of claimSQL or lookupSQL.
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

// claimRouted is the claim of Config.Citus: claimInsertSQL and lookupSQL
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

// queueClaimRouted queues claimInsertSQL and lookupSQL into b. The
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

// Lookup returns the inbox row of key as db sees it: a committed row, or
// one claimed earlier in the transaction db is. No row returns an error
// matching [ErrNotFound]. It writes nothing.
func (in *Store) Lookup(ctx context.Context, db pgtx.Querier, key Key) (_ Record, err error) {
	defer in.fail.Explain(&err)
	if db == nil {
		return Record{}, nilHandle("db")
	}
	if err := key.validate("Key."); err != nil {
		return Record{}, err
	}
	c, err := scanClaim(db.QueryRow(ctx, in.sql.lookup, key.Group, key.MessageID), key)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, notFound("look up", key)
	}
	if err != nil {
		return Record{}, fmt.Errorf("inbox: look up message %s in group %q: %w", key.MessageID, key.Group, err)
	}
	return c.Record, nil
}

// Complete records res as the result of the message key, claimed earlier
// in the same transaction tx (status CLAIMED → PROCESSED), so that
// duplicates receive it. It is one statement and must run in the claiming
// transaction: a rollback discards the claim and the result together.
//
// Errors: not claimed (no row visible) matches [ErrNotFound]; a result
// already recorded returns a *[Error] matching [ErrAlreadyCompleted]
// (results are never overwritten); a row claimed by another, committed
// transaction (a CLAIMED row without result) returns a *[Error] matching
// [ErrNotClaimer] and records nothing: only the claiming transaction (or
// one of its subtransactions, e.g. a claim made inside a savepoint) may
// complete it; invalid input a *[Error], before anything is sent.
func (in *Store) Complete(ctx context.Context, tx pgx.Tx, key Key, res Result) (err error) {
	defer in.fail.Explain(&err)
	if tx == nil {
		return nilHandle("tx")
	}
	args, err := completeArgs(key, res)
	if err != nil {
		return err
	}
	return completeOutcome(key, tx.QueryRow(ctx, in.sql.complete, args...))
}

// QueueComplete queues [Store.Complete] into b. When the batch runs the
// callback returns (through BatchResults.Close) nil or the error Complete
// would. The returned error reports invalid input only; then nothing was
// queued.
func (in *Store) QueueComplete(b *pgx.Batch, key Key, res Result) error {
	defer in.fail.Mark(b, "inbox.Store.QueueComplete")()
	if b == nil {
		return invalid("batch", "nil")
	}
	args, err := completeArgs(key, res)
	if err != nil {
		return err
	}
	b.Queue(in.sql.complete, args...).QueryRow(func(row pgx.Row) error {
		return completeOutcome(key, row)
	})
	return nil
}

func completeArgs(key Key, res Result) ([]any, error) {
	if err := key.validate("Key."); err != nil {
		return nil, err
	}
	if err := res.validate(); err != nil {
		return nil, err
	}
	var payload any
	if res.Payload != nil {
		payload = string(res.Payload)
	}
	return []any{key.Group, pgval.UUID(key.MessageID), res.Code, payload}, nil
}

func completeOutcome(key Key, row pgx.Row) error {
	var (
		status        *int16
		mine, updated bool
	)
	if err := row.Scan(&status, &mine, &updated); err != nil {
		return fmt.Errorf("inbox: complete message %s in group %q: %w", key.MessageID, key.Group, err)
	}
	switch {
	case updated:
		return nil
	case status == nil:
		return notFound("complete", key)
	case Status(*status) == StatusClaimed && !mine:
		// Claimed and committed by another transaction, which did the
		// work: this one must not record a result for it.
		return stateError("complete", Record{Key: key, Status: StatusClaimed})
	default:
		// PROCESSED in the snapshot, or CLAIMED in the snapshot but completed
		// by a concurrent transaction before this update could lock it.
		return stateError("complete", Record{Key: key, Status: StatusProcessed})
	}
}
