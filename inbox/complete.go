package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/internal/pgval"
)

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
