// Package order is the order state machine of a flash sale: orders, their
// item lines and payments in PostgreSQL, with idempotent creation, one
// order per user and SKU, and conditional status transitions whose
// zero-row outcomes are always classified.
//
// It imports neither inventory nor inbox nor outbox. Work that spans them —
// releasing stock when an order is cancelled, emitting a refund or
// compensation event — is composed by the caller in the same transaction,
// from the data this package returns.
//
// # Tables
//
// [Migrations] (applied by [migrate.Apply]) creates, in the configured
// schema (default "seckill"), these tables (and the function order_refuse,
// migration 003, which raises the refusals of the queued forms with
// pgtx.Abort):
//
//   - orders: one row per order. Unique keys: order_id, order_no,
//     request_id, reservation_id, source_message_id and (activity_id,
//     sku_id, user_id) — one order per user per SKU per activity. CHECKs
//     mirror [Status] and keep paid_at / cancelled_at consistent; an extra
//     CHECK forbids an order that is both paid and cancelled. The partial
//     index idx_orders_expirable (status IN (10, 20)) serves the expiry
//     sweep.
//   - order_items: the item line(s) of an order (one line, line_no 1).
//   - payment_record: payment callbacks, unique on (provider,
//     provider_trade_no), (provider, callback_id) and payment_request_id.
//   - payment_review (migration 002): callbacks that match nothing (unknown
//     order, amount or currency mismatch, a second trade for a paid order),
//     kept for a person, one row per (provider, provider_trade_no, reason).
//
// Amounts are BIGINT minor units (e.g. fen) with a three-letter currency.
//
// # Statuses and transitions
//
// Orders are born CREATED (10). [Store.TransitionOrder] moves them along
// one table, documented on [Status]:
//
//	to               allowed from
//	PAYING (20)      CREATED
//	PAID (30)        CREATED, PAYING                 sets paid_at
//	CANCELLED (40)   CREATED, PAYING                 sets cancelled_at, cancel_reason
//	                 (timeout cancel: only if expire_at <= statement_timestamp())
//	REFUND_PENDING   PAID
//	(60)
//	CLOSED (50)      CANCELLED, PAID, REFUND_PENDING
//
// A paid order is never cancelled: a refund goes PAID → REFUND_PENDING →
// CLOSED. A payment that arrives after a cancel is recorded on
// payment_record as REFUND_PENDING and leaves the order alone.
//
// # The contract
//
// Every write is one statement on its normal path and runs in the caller's
// handle:
//
//   - [Store.Create] (pgx.Tx): INSERT … ON CONFLICT DO NOTHING of the order
//     and, only when inserted, its item line, in one statement. When a
//     unique key stops it, a second statement classifies the conflict (same
//     request → Existing result; same user and SKU →
//     [ErrUserAlreadyOrdered] carrying the existing order; id collision →
//     [ErrIDCollision]; anything else → [ErrModel]). The second statement
//     is needed because, under Read Committed, only a new statement's
//     snapshot is sure to contain the conflicting row that ON CONFLICT
//     waited for. None of the outcomes aborts the transaction.
//   - [Store.TransitionOrder] (pgtx.Querier; pass the tx when composing):
//     a data-modifying CTE locks the order row (FOR NO KEY UPDATE, which
//     returns the latest committed version), applies the guarded UPDATE
//     from the locked values and returns the row either way. A 0-row UPDATE
//     is therefore classified from the very version that made the guard
//     fail, and that version stays locked until the transaction ends:
//     [ErrNotFound], Existing (idempotent, not an error),
//     [ErrIllegalTransition] or [ErrNotExpired]. The result carries the order's reservation, SKU,
//     bucket, quantity and amount, so a cancel can release stock in the same
//     transaction — exactly when Changed is true, which happens once per
//     order.
//   - [Store.RecordPayment] (pgx.Tx): in one statement, lock the order,
//     check amount and currency, insert the payment (deduplicated by every
//     unique key) and move a payable order to PAID. Results:
//     [PaymentPaid], [PaymentDuplicate], [PaymentAfterCancel] and
//     [PaymentOnPaidOrder] (the last two with a [Refund] to turn into an
//     outbox event); errors: [ErrNotFound], [ErrMismatch] — all writing
//     nothing.
//   - [Store.CancelExpired] (pgx.Tx): the expiry sweep over
//     idx_orders_expirable with FOR NO KEY UPDATE SKIP LOCKED, bounded by a
//     limit; concurrent sweepers get disjoint batches.
//   - [Store.RecordPaymentReview], [Store.OpenPaymentReviews] and
//     [Store.ResolvePaymentReview] (pgtx.Querier): a callback that
//     RecordPayment refused, or that paid an order twice (RecordPaymentReview
//     takes RecordPayment's outcome and names the reason), is kept for a person in a transaction of its own
//     (a refused callback's payment transaction rolls back), listed, and
//     closed with who decided what.
//   - [Store.Audit] (pgtx.Querier): the order invariants as typed
//     [Finding]s. [Store.QuantitiesByStatus] is the per-status report for
//     reconciliation; [Store.Get] (by order id, request id or buyer) and
//     [Store.Payments] read rows.
//
// Time comparisons use the database clock (statement_timestamp()), never
// the client's. Helpers are written for Read Committed, the level to run
// order, payment and cancel transactions at.
//
// # Pipelining
//
// Each statement-level write has a queued form that queues into the
// caller's *pgx.Batch: [Store.QueueCreate], [Store.QueueTransitionOrder],
// [Store.QueueRecordPayment], [Store.QueueCancelExpired]. The queued form's
// own error reports only invalid input (then nothing is queued); the
// outcome is written to the caller's result (dst, which may be nil) by the
// batch callback. The last argument, a [pgtx.OnRefusal], says what a
// refusal does. With [pgtx.Return] the classified error comes back from
// BatchResults.Close (pgx stops running the later callbacks of a batch
// after the first error, although the server executed the statements); a
// queued insert that hit a conflict returns [ErrConflict]: classify it by
// calling the direct form ([Store.Create], [Store.RecordPayment]) with the
// same input in the same transaction. With [pgtx.Abort] the statement
// raises the refusal on the server, so that a transaction sent as one
// batch ([pgtx.RunBatch]) commits whole or not at all; the error matches
// the sentinel and its [pgtx.StatementError.Call] names the helper.
//
//	b := &pgx.Batch{}
//	var created, paying order.Result
//	_ = store.QueueCreate(b, in, &created, pgtx.Return)
//	_ = store.QueueTransitionOrder(b, order.Transition{OrderID: other, To: order.StatusPaying}, &paying, pgtx.Return)
//	err := tx.SendBatch(ctx, b).Close()
//
// # Errors
//
// Every error a helper returns for bad input, a refusal or a classified
// outcome matches a sentinel with errors.Is; those that carry data the
// caller acts on are an [*Error] (errors.As) holding the helper, the
// sentinel and what the classifying statement found (the existing order,
// the current status, the offending field). Bad input matches [ErrInvalidArgument] and
// nothing is sent. Driver errors are wrapped with %w, so pgtx's retry
// predicates still see SQLSTATE 40001 and 40P01.
//
// # Ids
//
// The order id (NewOrder.OrderID, of the embedded seckill.Request, a
// positive BIGINT), the user-facing order
// number (NewOrder.OrderNo) and the currency are the service's: the
// package generates none of them. Prefer time-ordered ids, so inserts land
// at the right edge of the primary-key index, and derive both
// from the request, so a redelivery carries the same ones; the example
// service's scheme (examples/internal/orderid) is one to copy. An id held by
// another order is [ErrIDCollision]; Config.DefaultCurrency, when
// set, fills an empty currency.
//
// # Usage
//
//	store, err := order.New(order.Config{Schema: "seckill"})
//	...
//	err = pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
//		res, err := store.TransitionOrder(ctx, tx, order.TimeoutCancel(id))
//		if err != nil {
//			return err // ErrIllegalTransition: paid meanwhile; ErrNotExpired: too early
//		}
//		if res.Changed {
//			// release res.Order's stock and enqueue compensation, in tx
//		}
//		return nil
//	})
//
// Compensation (giving stock or a reservation back after a cancel or a
// rejection) has no table of its own here: emit it as an event
// through the outbox in the same transaction.
package order
