// Package seckill is the overview of a set of PostgreSQL building blocks
// for flash sales ("seckill"): sales that never oversell, never create two
// orders for one buyer and never lose an event, under duplicate messages,
// retries, crashes and hot-row contention. PostgreSQL is the source of
// truth; a front door (Redis in production) only filters.
//
// At this level the module has one type, Request: the ids of one purchase,
// which the inputs of inventory and order embed so a service writes each
// id once. Services import the packages below and call their helpers
// inside their own pgx transactions.
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
// assigns request, reservation, order and message ids; the message goes to
// a queue (at least once); a consumer then runs ONE local transaction. The
// example service (examples/seckill/flow) has it in two forms that end
// every message the same way. Service.PlaceOrderTx is the one to read
// first: one helper call per step, in pgtx.RunInTx —
//
//	inbox claim → reservation insert + lock → SAVEPOINT → order + item
//	(conflicts classified) → outbox ORDER_CREATED → reservation ORDERED
//	→ inbox result → conditional bucket decrement + ALLOCATE ledger row
//	→ COMMIT → ack
//
// Service.PlaceOrder sends a fresh order as ONE round trip with
// pgtx.RunBatch:
//
//	BEGIN → inbox row with its result → reservation inserted as ORDERED
//	→ order + item → ORDER_CREATED → bucket decrement → ALLOCATE ledger row
//	→ COMMIT
//
// where every condition that is not a plain fresh order raises instead of
// returning (the "…OrAbort" helpers: a duplicate message, the same
// reservation under a new message id, a buyer who already ordered, an
// event already enqueued, sold out, the sale not on), so the server skips the rest of the batch and
// commits nothing; PlaceOrder then runs PlaceOrderTx, which finds out what
// the message is. In both forms the bucket decrement comes last, so the
// hot bucket row is locked only until COMMIT — in the one-batch form,
// never across a round trip.
//
// Sold out in PostgreSQL, a sale that is not on, or a buyer who already
// ordered rejects the reservation and enqueues a compensation event
// (release the front-door reservation) in the same transaction. Payment
// callbacks and the timeout canceller race on the order row; exactly one
// wins. A cancel releases the stock (RELEASE ledger row) and enqueues
// compensation in the same transaction. The outbox relay publishes after
// commit; consumers stay idempotent. A COMMIT whose outcome is unknown is
// not acknowledged: the redelivery meets the inbox.
//
// # Invariants
//
// These hold after any run and any fault. order's Audit checks 1 and 4,
// inventory's Audit 2 and 3, each on its own tables; the example's audit
// (examples/seckill/flow) checks 1 to 5 and 7 across them; the crash and
// failover drills of the example module check 6 and 8:
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
//  7. Every state change that promises an event has it in the outbox: a
//     live order its ORDER_CREATED, a paid order its ORDER_PAID, a
//     rejected, released or expired reservation its FRONTDOOR_RELEASE, a
//     payment after a cancel its REFUND_REQUESTED (the example's event
//     names). Counting events cannot see a lost enqueue: an audit of this
//     joins the outbox to the state changes.
//  8. Nothing acknowledged is lost across a failover to a synchronous
//     standby; what asynchronous replication can lose is counted and
//     documented, never hidden.
//
// # Observing
//
// No package depends on a metrics or tracing library. pgtx, inventory and
// outbox each take an Observer of one shape (see pgtx.Observer): a struct
// of hook functions, the context first, one event struct per package,
// start hooks that return the context their end hooks get, a nil hook
// that does nothing (set only the hooks you need; the zero Observer
// observes nothing, and a hook added later breaks no one), and a stated
// rhythm per hook — per attempt (inside an open transaction, reported
// again on a retry) or per commit. Count business outcomes from the
// per-commit hooks.
// The example service (examples/seckill) builds its Prometheus metrics on
// them and carries a W3C trace id from the HTTP request to its consumers'
// logs through the order message and the outbox event headers.
//
// # Scale-out on Citus
//
// Every table lives in the Store's schema, so an activity per schema on a
// Citus coordinator with schema-based sharding puts each activity whole on
// one worker. Set Config.Citus on every store there (inbox, outbox,
// inventory, order): the helpers then send statements Citus routes whole to
// that worker, so every order transaction commits there with one phase;
// results, errors and guarantees stay the same. Leave it off on plain
// PostgreSQL, where the defaults send fewer statements. docs/citus.md in
// the repository has the set-up, what else changes (NOTIFY and advisory
// locks act on the coordinator) and the checks that count two-phase
// commits.
package seckill
