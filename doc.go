// Package seckill is the overview of a set of PostgreSQL building blocks
// for flash sales ("seckill"): sales that never oversell, never create two
// orders for one buyer and never lose an event, under duplicate messages,
// retries, crashes and hot-row contention. PostgreSQL is the source of
// truth; a front door (Redis in production) only filters.
//
// The module has no code of its own at this level: services import the
// packages below and call their helpers inside their own pgx transactions.
//
// # Packages
//
//   - pgtx: RunInTx, a transaction runner that retries serialization
//     failures and deadlocks (and nothing else) and reports a COMMIT whose
//     outcome is unknown as ErrCommitOutcomeUnknown, optionally resolving
//     it through pg_xact_status; error predicates; the small handle
//     interfaces the other packages accept.
//   - migrate: the embedded, numbered migrations each package ships, applied
//     idempotently under an advisory lock into a configurable schema.
//   - inbox: consumer_inbox, the idempotent consumer. A message is claimed
//     inside the business transaction; a redelivery finds the stored result.
//   - outbox: event_outbox, the transactional outbox, and a relay that
//     publishes after commit, at least once, optionally in per-key order.
//   - inventory: bucketed stock (sku_inventory), reservations and the
//     inventory ledger; conditional decrements that cannot oversell.
//   - order: orders, order items and payments; a state machine whose
//     conditional transitions classify every zero-row outcome.
//   - seckilltest: for a service's own tests, a real PostgreSQL (a
//     throwaway cluster or SECKILL_DATABASE_URL) and a fresh, migrated
//     schema per test, removed by t.Cleanup.
//
// inbox, outbox, inventory and order never import each other: a service
// takes only what it needs, with only those tables.
//
// # The flow
//
// A buyer's click passes the front door, which reserves a stock bucket and
// assigns request, reservation and message ids; the message goes to a queue
// (at least once); a consumer then runs ONE local transaction:
//
//	inbox claim → reservation insert + lock → order insert (conflicts classified)
//	→ conditional bucket decrement + ALLOCATE ledger row → order item
//	→ reservation ORDERED → outbox ORDER_CREATED → COMMIT → ack
//
// Sold out in PostgreSQL, or a buyer who already ordered, rejects the
// reservation and enqueues a compensation event (release the front-door
// reservation) in the same transaction. Payment callbacks and the timeout
// canceller race on the order row; exactly one wins. A cancel releases the
// stock (RELEASE ledger row) and enqueues compensation in the same
// transaction. The outbox relay publishes after commit; consumers stay
// idempotent. The hot bucket row is decremented as late in the transaction
// as correctness allows, so its row lock is held for about one statement.
//
// # Invariants
//
// These hold after any run and any fault; the packages' Audit functions
// check them against the database:
//
//  1. At most one order per (activity, sku, user); one inbox row per
//     (consumer group, message id).
//  2. Per bucket: total = available + allocated, all ≥ 0; per SKU: the sum
//     of bucket totals equals the planned stock.
//  3. Every live order (CREATED, PAYING, PAID, REFUND_PENDING) has its
//     ALLOCATE ledger row; every release has exactly one RELEASE row; a
//     replay of the ledger reproduces each bucket's counters.
//  4. No order is both paid and cancelled; status timestamps match status.
//  5. An event committed to the outbox is eventually published at least
//     once, unless it is DEAD.
//  6. Nothing acknowledged as committed is lost after a PostgreSQL crash
//     (synchronous_commit on).
package seckill
