// Package inventory keeps bucketed stock in PostgreSQL: per-bucket counters,
// reservations and an append-only ledger, with conditional updates that never
// oversell, idempotency keys that never apply a stock change twice, and an
// audit that proves both from the data.
//
// # Tables
//
// [Migrations] (applied with [migrate.Apply]) creates, in the configured schema
// (default "seckill"), the tables of the stock:
//
//   - inventory_sku: one row per (activity_id, sku_id) with the planned stock
//     and the bucket count, as far as stock is concerned; the service's catalogue tables stay the service's.
//   - sku_inventory: one row per bucket (activity_id, sku_id, bucket_no) with
//     total, available and allocated stock; CHECKs keep every counter >= 0
//     and total = available + allocated.
//   - inventory_reservation: the database record of a front-door
//     reservation, with its status machine (see Reservation lifecycle).
//   - inventory_ledger: one row per stock change (ALLOCATE, RELEASE, ADJUST,
//     PROVISION) with before/after counters and a unique idempotency key.
//     Its ledger_id is an identity column (unique across processes by
//     construction, increasing over time); the migration file
//     explains this and every other choice of the DDL. ADJUST
//     rows also carry operator and approval_ref (migration 005).
//   - inventory_token (migration 010): for a SKU provisioned with
//     [SKU].Tokens, one row per unit, free or held by a reservation,
//     instead of bucket rows; the view inventory_stock_row shows it as
//     bucket 0 with its token counts.
//   - inventory_sale_log (migration 003): every change of a SKU's sale
//     status and window, with operator, reason and time, and the SKU's
//     sale version after it (migration 006); the status and window
//     themselves are columns of inventory_sku.
//
// # Buckets
//
// A hot SKU's stock is split over 1 to 256 buckets ([Store.Provision]; the
// remainder goes to the first buckets: stock/n each, plus one for the
// first stock%n) so that concurrent
// orders update different rows. The front door picks a bucket once, e.g. with
// [PickBucket] (FNV-1a of a key, modulo the bucket count), and records it in
// the reservation; the order transaction decrements exactly that bucket and
// never switches buckets, even when it is sold out. With one bucket (bucket 0) it is the
// plain single-row inventory.
//
// Bucketing costs partial sell-outs: a bucket can be empty while others hold
// stock. [Store.Rebalance] evens out the available stock of a SKU's buckets
// under row locks taken in bucket order, with paired ADJUST ledger rows, and
// is safe to run while orders are being placed.
//
// # Buckets or tokens
//
// One bucket's limit is the update rate of one row: every allocation of
// the bucket queues on its row lock. Buckets divide the queue; inventory
// tokens remove it. A SKU provisioned with [SKU].Tokens holds its stock as
// one inventory_token row per unit (at most 10,000,000), and has one
// bucket, bucket 0, with no counter row. [Store.AllocateBucket] (and every
// Queue form, both refusal modes, with or without Config.Citus) claims
// free tokens with FOR UPDATE SKIP LOCKED, so concurrent allocations take
// different rows and never wait for one another; [Store.ReleaseStock]
// frees the tokens the reservation holds. Nothing else changes: the same
// calls, one round trip, the same ledger rows and idempotency keys (the
// counters of an ALLOCATE or RELEASE row are those of the units it moved:
// quantity to 0 available, 0 to quantity allocated, and back), the same
// guards on the reservation and the sale, the same refusals. [Store.Stock],
// [Store.GetBucket] and the audits read a token SKU as bucket 0 whose
// total, available and allocated stock are its token count, its free and
// its held tokens, and the audits also compare the tokens each
// reservation holds with its ledger (finding "token_claim").
//
// Choose tokens for a hot SKU of modest stock (thousands to a few
// million units), buckets otherwise. Tokens cost one row per unit at
// provisioning (a million rows, and their two indexes, for a million
// units) and a non-HOT update per allocation; buckets cost a few rows and
// partial sell-outs: a bucket can be empty while others hold stock, which
// [Store.Rebalance] moves. Tokens need no rebalancing: any free unit
// serves any allocation. SKIP LOCKED never waits, so a token held by a
// transaction that then rolls back is passed over while it is held: an
// allocation at the very last units can be refused as sold out while such
// a unit is about to come back (never an oversell). [Store.Rebalance] and
// [Store.AdjustStock] act on bucket rows, which a token SKU has none of:
// they refuse it ([ErrUnknownSKU], [ErrUnknownBucket]).
//
// # Contract
//
// Helpers run on the handle they are given and never begin a transaction of
// their own. Writes that belong with the caller's business data take a
// pgx.Tx: [Store.AcquireReservation], [Store.AllocateBucket],
// [Store.ReleaseStock], [Store.Rebalance], [Store.AdjustStock],
// [Store.ExpireReservations], [Store.SetSaleStatus].
// [Store.TransitionReservation] and [Store.RecordCompensationFailure] take a
// pgtx.Querier (usually the caller's transaction; a pool works for a
// stand-alone change). [Store.Provision] and the reads ([Store.GetBucket],
// [Store.Stock], [Store.GetReservation], [Store.ReservationLedger],
// [Store.Adjustments], [Store.SaleLog], [Store.LedgerByType],
// [Store.Audit]) take a pgtx.Querier. Transactions are expected to be Read Committed.
//
// Every helper is one SQL statement (data-modifying CTEs; AcquireReservation
// and Provision send it a second time after a concurrent insert, see
// [ErrConcurrentInsert]) except Rebalance, which needs its locks before it
// computes. In the order transaction the rows other transactions contend
// for are locked in one order, everywhere: the reservation first
// (AcquireReservation locks it FOR UPDATE), the bucket after it. New rows
// (the order, the outbox event) may be inserted in between; the bucket is
// best decremented last (AllocateBucket as the transaction's last
// statement), so that the hot row is held only until COMMIT. The example
// service's order transaction does exactly that.
//
// A conditional update that changes nothing is never reported as success;
// the same statement classifies why:
//
//   - AllocateBucket: an [*Error] matching [ErrSoldOut], [ErrUnknownBucket],
//     an *Error matching [ErrAlreadyApplied] when ALLOCATE:<reservation_id>
//     exists (also for every concurrent duplicate, whatever the bucket's
//     stock), [ErrReservationNotFound], or *Error
//     ([ErrAllocationMismatch]) when the reservation has another activity,
//     SKU, bucket, quantity or buyer, or is no longer PENDING_DB or
//     ORDERED: the allocation is bound to its reservation row. Only sold
//     out is a normal sell out; after it the transaction is still usable
//     (reject the reservation and emit the compensation event in it).
//   - ReleaseStock: [ErrNotAllocated], *Error when RELEASE:<reservation_id>
//     exists, [ErrInconsistent] when the bucket contradicts the ledger.
//   - TransitionReservation: [ErrReservationNotFound], or a *Error
//     matching [ErrAlreadyInState] or [ErrIllegalTransition] that carries the
//     current row. The row is locked before the guard is tested, so a
//     transition that waited behind another decides on what that one
//     committed.
//   - AcquireReservation: an *Error matching [ErrReservationConflict] when
//     the id, the request id or (with [NewReservation].Ordered) the order id
//     is taken by different data.
//   - Provision: an *Error matching [ErrProvisionConflict] for a different split.
//
// # Reservation lifecycle
//
// Every reservation status is reached through a helper:
// [Store.AcquireReservation] records PENDING_DB (or ORDERED);
// [Store.TransitionReservation] moves along the state machine of
// [ReservationStatus] (ORDERED,
// REJECTED, RELEASE_PENDING while a front-door release is in flight,
// RELEASED); [Store.ExpireReservations] sweeps PENDING_DB reservations past
// their expiry to EXPIRED (SKIP LOCKED, in batches; enqueue the
// compensation in the same transaction); [Store.RecordCompensationFailure]
// counts failed releases of a RELEASE_PENDING reservation and escalates it
// to MANUAL_REQUIRED at the caller's limit.
//
// # Manual adjustments
//
// [Store.AdjustStock] changes one bucket's stock by hand and is evidence:
// its ADJUST ledger row carries the operator, the approval reference and
// the reason, and without them the adjustment is refused (by the package,
// and by the database's ck_ledger_adjust_evidence). Rebalance moves record
// "seckill:rebalance" and their move id unless the request names
// others. One approval adjusts a SKU's bucket once (the row's key names
// the activity, the SKU, the approval and the bucket); it may adjust other
// SKUs too. [Store.Adjustments] lists them; [Store.Audit] reports an ADJUST
// row without evidence.
//
// # Sale status
//
// Each SKU has a sale status (ON_SALE, PAUSED, ENDED) and a sale window
// (either bound may be open). [Store.SetSaleStatus] changes them, locking
// the SKU row and writing the audit row (operator, reason, time) in the
// same statement; [Store.SaleLog] lists the changes. AllocateBucket's
// UPDATE carries the condition itself, so no allocation commits outside
// the sale: it fails with a *Error ([ErrNotOnSale]; its
// Status, window and At say why).
//
// # Idempotency
//
// AllocateBucket and ReleaseStock write their ledger row in the same statement as
// the counter update. The update is guarded by "no ledger row with this key
// yet", and the unique index on the key is the final guard: a concurrent
// duplicate that the guard could not see makes PostgreSQL raise
// unique_violation, failing the whole statement, so a bucket is never changed
// twice for one reservation (the caller's transaction is then aborted and the
// error is an *Error with TxAborted set). Provision is idempotent for
// the same split; AcquireReservation returns the existing row for a
// redelivery; Rebalance on even buckets changes nothing.
//
// # Pipelining
//
// Every statement-level write also has a queued form that queues into the
// caller's *pgx.Batch: [Store.QueueAcquireReservation],
// [Store.QueueAllocateBucket], [Store.QueueReleaseStock],
// [Store.QueueTransitionReservation], and the check
// [Store.QueueCheckSoldOut]. The returned error is only for invalid input
// (then nothing is queued); the result is written to the given destination
// (which may be nil: the result is discarded) and the classified error is
// returned by BatchResults.Close. All queued statements run on the server
// even when an earlier callback reports an error (a sold out, say), so
// queue together only what is idempotent or what you will roll back on
// error.
//
// The forms that can refuse take a [pgtx.OnRefusal] last: [pgtx.Return]
// returns the refusal as described; [pgtx.Abort] makes the statement raise
// it on the server instead, which aborts the whole transaction, COMMIT
// included: a transaction sent as one batch ([pgtx.RunBatch]) then commits
// only when every step succeeded (see [ErrNotSoldOut] for the conditions).
// Such a transaction can insert the reservation as ORDERED at once
// ([NewReservation].Ordered) instead of transitioning it later: one
// statement and one row version fewer per order.
//
// # Errors and input
//
// Bad input (zero ids, quantities below 1, buckets outside 0..255, unknown
// statuses, strings beyond their column limits) gives a *Error
// matching [ErrInvalidArgument] before anything is sent. Every error can be
// tested with errors.Is / errors.As; driver errors are wrapped with %w.
//
// # Audit
//
// [Store.Audit] checks, in one read-only statement, the inventory invariants
// of the kit: bucket conservation and non-negativity,
// SKU total = planned stock, ledger replay reproducing every counter, at
// most one ALLOCATE and RELEASE per reservation with every RELEASE paired
// with its ALLOCATE, and reservation statuses agreeing with the ledger. It
// returns typed [Finding] values; none means consistent.
//
// Audit replays the whole ledger, so its cost grows with every order: it
// is the audit at rest. During a sale, [Store.Checkpoint] keeps the
// ledger's sums per bucket up to a watermark (moved only past ledger ids
// whose transactions have ended, since ids become visible out of order),
// and [Store.AuditIncremental] replays only the rows after it: the same
// bucket, SKU and replay checks, exact, with the per-reservation checks
// limited to the reservations the new rows touch.
//
// # Observing
//
// [Config].Observer, a struct of hook functions (AllocateEnd, ReleaseEnd;
// a nil hook does nothing), receives the classified result of every
// allocation and release, once per execution of the statement: inside the
// caller's open transaction, so per attempt, not per commit (see
// [Observer]).
//
// # Example
//
//	store, err := inventory.New(inventory.Config{Schema: "seckill"})
//	...
//	err = pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
//		// req is the purchase's seckill.Request: its ids travel with the message
//		acq, err := store.AcquireReservation(ctx, tx, inventory.NewReservation{
//			Request: req, ReservedAt: reservedAt, ExpiresAt: expiresAt})
//		if err != nil {
//			return err
//		}
//		if !acq.Created && acq.Reservation.Status != inventory.StatusPendingDB {
//			return nil // redelivery of a decided reservation
//		}
//		// ... insert the order ...
//		_, err = store.AllocateBucket(ctx, tx, inventory.Allocation{Request: req})
//		if errors.Is(err, inventory.ErrSoldOut) {
//			_, err = store.TransitionReservation(ctx, tx, inventory.Transition{
//				ReservationID: req.ReservationID, To: inventory.StatusRejected,
//				FailureCode: "POSTGRES_SOLD_OUT"})
//			return err
//		}
//		if err != nil {
//			return err
//		}
//		_, err = store.TransitionReservation(ctx, tx, inventory.Transition{
//			ReservationID: req.ReservationID, To: inventory.StatusOrdered, OrderID: req.OrderID})
//		return err
//	})
package inventory
