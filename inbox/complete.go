package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgval"
)

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
