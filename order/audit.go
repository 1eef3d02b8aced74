package order

import (
	"context"
	"fmt"
	"time"

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
	return collectFindings(q.Query(ctx, s.sql.audit))
}

// AuditSince is [Store.Audit] over what changed at or after since: the
// orders whose updated_at is at or after it (every statement of this
// package that writes an order sets updated_at to its statement's start),
// their items, and the payments written at or after it or made on those
// orders; a duplicate user order is reported when any of its orders
// changed. It reads those rows through BRIN indexes on updated_at
// (migration 004), so its cost follows the rows written since, not the
// table's history: it is the audit to run every few seconds during a
// sale, from a watermark, with Audit kept for the whole tables at rest.
//
// A change is seen only once it is committed and visible to q's snapshot:
// a caller advancing its watermark must take one that no transaction
// still running can write before (see the example service's live audit).
// A violation written without touching updated_at (a manual UPDATE that
// leaves it) is found by Audit, not here.
func (s *Store) AuditSince(ctx context.Context, q pgtx.Querier, since time.Time) (_ []Finding, err error) {
	defer s.fail.Explain(&err)
	if q == nil {
		return nil, nilHandle("q")
	}
	return collectFindings(q.Query(ctx, s.sql.auditSince, since))
}

// collectFindings reads an audit statement's rows; nil for none.
func collectFindings(rows pgx.Rows, err error) ([]Finding, error) {
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
