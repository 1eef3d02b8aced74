package order

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// maxExpiryBatch bounds the limit of dueForExpiry and CancelExpired.
const maxExpiryBatch = 10000

func checkLimit(limit int) error {
	if limit <= 0 || limit > maxExpiryBatch {
		return invalid("limit", fmt.Sprintf("must be 1..%d", maxExpiryBatch))
	}
	return nil
}

// dueForExpiry returns up to limit (1..maxExpiryBatch) orders that are
// CREATED or PAYING with expire_at <= statement_timestamp(), oldest expiry
// first, and locks them FOR NO KEY UPDATE SKIP LOCKED in the caller's
// transaction: concurrent sweepers get disjoint sets, and rows locked by a
// payment in flight are skipped (the next sweep sees them again if still
// unpaid). It uses the partial index idx_orders_expirable.
//
// "Now" is the database's statement_timestamp(), not a client clock, so
// the set agrees with the guard of the timeout cancel. Cancel each returned
// order with TransitionOrder(ctx, tx, TimeoutCancel(id)) and release its
// stock in the same transaction when the result is Changed — or use
// [Store.CancelExpired], which does both steps in one statement. (The
// tests read it; the service's sweep is CancelExpired.)
func (s *Store) dueForExpiry(ctx context.Context, tx pgx.Tx, limit int) (_ []Order, err error) {
	defer s.fail.Explain(&err)
	if tx == nil {
		return nil, nilHandle("tx")
	}
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, s.sql.dueForExpiry, limit)
	if err != nil {
		return nil, fmt.Errorf("order: due for expiry: %w", err)
	}
	defer rows.Close()
	var out []Order
	for rows.Next() {
		var o Order
		if err := scanOrder(rows, &o); err != nil {
			return nil, fmt.Errorf("order: due for expiry: %w", err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("order: due for expiry: %w", err)
	}
	return out, nil
}

// CancelExpired cancels, in one statement in the caller's transaction, up
// to limit (1..10,000) expired CREATED/PAYING orders (reason PAY_TIMEOUT),
// oldest expiry first, skipping rows locked by others (FOR NO KEY UPDATE
// SKIP LOCKED over the partial index idx_orders_expirable, with the
// database's statement_timestamp() as "now"), and returns one Result
// (Changed, From, the cancelled row) per cancelled order.
// Each order appears in exactly one caller's result ever: release the
// stock of every returned order (ReservationID, ActivityID, SKUID, Bucket,
// Quantity) in the same transaction, then commit. An empty result means
// nothing is due (or everything due is locked by someone else).
func (s *Store) CancelExpired(ctx context.Context, tx pgx.Tx, limit int) (_ []Result, err error) {
	defer s.fail.Explain(&err)
	if tx == nil {
		return nil, nilHandle("tx")
	}
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, s.sql.cancelExpired, limit)
	if err != nil {
		return nil, fmt.Errorf("order: cancel expired: %w", err)
	}
	return collectCancelled(rows)
}

// QueueCancelExpired queues CancelExpired's single statement into b; the
// returned error only reports an invalid limit or a nil b (nothing
// queued). dst may be nil (the result is discarded). When the batch runs,
// the callback sets *dst to the cancelled orders. Queue it in a
// transaction's batch, and release the stock of every order in *dst in
// that same transaction before committing. It refuses nothing (an empty
// result is no refusal), so it takes no pgtx.OnRefusal.
func (s *Store) QueueCancelExpired(b *pgx.Batch, limit int, dst *[]Result) error {
	defer s.fail.Mark(b, "order.Store.QueueCancelExpired")()
	if err := checkLimit(limit); err != nil {
		return err
	}
	if b == nil {
		return invalid("QueueCancelExpired", "batch must not be nil")
	}
	if dst == nil {
		dst = new([]Result)
	}
	b.Queue(s.sql.cancelExpired, limit).Query(func(rows pgx.Rows) error {
		res, err := collectCancelled(rows)
		*dst = res
		return err
	})
	return nil
}

func collectCancelled(rows pgx.Rows) ([]Result, error) {
	defer rows.Close()
	var out []Result
	for rows.Next() {
		r := Result{Changed: true}
		if err := scanOrder(rows, &r.Order, &r.From); err != nil {
			return nil, fmt.Errorf("order: cancel expired: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("order: cancel expired: %w", err)
	}
	return out, nil
}
