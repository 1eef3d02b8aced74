package order

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/pgtx"
)

// Finding is one broken invariant, found by [Store.Audit].
type Finding struct {
	// Kind names the invariant broken:
	//
	//   - "DUPLICATE_USER_ORDER": more than one order for one (activity,
	//     sku, user); OrderID is the lowest of them;
	//   - "PAID_AND_CANCELLED": an order with both paid_at and
	//     cancelled_at, or CANCELLED with paid_at;
	//   - "STATUS_TIMESTAMPS": the status timestamps do not match the
	//     status (CREATED/PAYING: none; PAID/REFUND_PENDING: paid_at only;
	//     CANCELLED: cancelled_at and cancel_reason only; CLOSED: exactly
	//     one of paid_at, cancelled_at);
	//   - "TOTAL_AMOUNT": total_amount <> unit_price × quantity;
	//   - "ITEMS_TOTAL": the item lines do not add up to the order (no
	//     lines, line amounts ≠ total_amount, or line quantities ≠
	//     quantity);
	//   - "PAYMENT_ON_UNPAID_ORDER": a SUCCEEDED payment on an order that
	//     is not paid (payments after a cancel must be REFUND_PENDING);
	//   - "PAYMENT_AMOUNT": a SUCCEEDED payment whose amount or currency
	//     differs from its order's.
	Kind    string
	OrderID int64  // the order concerned (for DUPLICATE_USER_ORDER the lowest of the duplicates)
	Detail  string // human-readable facts (values found)
}

// Audit checks the order invariants over the whole schema and returns every
// violation as a Finding, ordered by kind and order id; nil means clean.
// It only reads (full scans: run it off-peak or against a replica that
// has caught up). Every check is part of one statement, hence one
// snapshot, on any Querier: the findings are consistent with each other
// even while orders are created, paid and cancelled (each invariant
// holds in every committed snapshot: none comes from reading two
// moments). To read one snapshot across several audits (this one,
// inventory.Store.Audit, the caller's own counts), pass them all the same
// read-only Repeatable Read transaction (pgx.TxOptions{IsoLevel:
// pgx.RepeatableRead, AccessMode: pgx.ReadOnly}); on a pool or a Read
// Committed transaction each audit reads its own moment.
func (s *Store) Audit(ctx context.Context, q pgtx.Querier) (_ []Finding, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return nil, nilHandle("q")
	}
	rows, err := q.Query(ctx, s.sql.audit)
	if err != nil {
		return nil, fmt.Errorf("order: audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Finding, error) {
		var f Finding
		err := r.Scan(&f.Kind, &f.OrderID, &f.Detail)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("order: audit: %w", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
