// Package outbox is the transactional outbox: the event_outbox table, the
// helpers that enqueue events inside the caller's transaction, and a
// [Relay] that publishes them after commit, at least once.
//
// A service writes its business rows and the events that describe them in
// one transaction ([Store.Enqueue] takes the caller's pgx.Tx), so an event exists if and only if the change it describes was
// committed. Relays, in any number of processes, claim ready events with
// FOR UPDATE SKIP LOCKED ([Store.ClaimOutboxBatch]), publish them through
// [RelayConfig].Publish with no transaction open, and mark the outcome
// ([Store.Mark]). A broker
// never sees an event of a rolled-back transaction, and no committed event
// is lost: it ends SENT or, after its retries, DEAD.
//
// # Table
//
// event_outbox (migrations 001 to 003, applied by migrate.Apply with
// [Migrations], alone or with the other packages' components). Status codes are
// SMALLINT + CHECK, mirrored by [Status]: 0 PENDING, 10 SENDING, 20 SENT,
// 30 RETRY, 40 DEAD. dedup_key is unique. Indexes: the partial ready index
// idx_outbox_ready (PENDING/RETRY only, so the claim's cost follows the
// backlog, not the SENT history), idx_outbox_stale_sending for lease
// recovery, idx_outbox_ordering for ordered mode, and idx_outbox_dead
// (DEAD only, for [Store.Stats] and review). fillfactor 80 and
// aggressive per-table autovacuum settings, since the table is updated at
// the rate of orders. Also: seq (identity, the enqueue order), ordering_key, and CHECKs tying
// locked_by/locked_at to SENDING, sent_at to SENT and last_error to 4000
// bytes.
//
// # Contract
//
//   - [Store.Enqueue] runs in the caller's transaction (pgx.Tx). It is ONE
//     insert whatever the number of events,
//     followed in the same round trip by a read of the events holding their
//     dedup keys (so a duplicate that a concurrent transaction committed
//     while the insert waited for it is reported with that event's id).
//     Idempotent by dedup key: ON CONFLICT (dedup_key) DO NOTHING, reported
//     per event in [Enqueued].New — a duplicate is not an error and writes
//     nothing. Event ids are UUIDv7 (time-ordered).
//   - [Store.ClaimOutboxBatch], [Store.Mark], [Store.Recover],
//     [Store.PurgeSent], [Store.ArchiveSent] are stand-alone writes: pass
//     a pool (each runs as its own implicit transaction), or a transaction
//     when you know why.
//     Never hold a transaction open across Publish.
//   - Every update of a claimed event is a compare-and-set on the [Lease]
//     (owner AND claim time AND status SENDING). A row that no longer
//     matches — its lease expired and was recovered, another claim holds it
//     (the same owner's included), it is finished — is never touched, and
//     the call says so: MarkResult.Lost and a *[Error] matching
//     [ErrLeaseLost]. Zero rows is never silently fine.
//   - Lease recovery only touches rows still SENDING under the same claim
//     with an expired lease (river issue 1302); the lost attempt counts.
//   - Delivery is at least once: an event published and not yet marked when
//     a relay dies is published again after the lease expires.
//     Consumers must be idempotent (see the inbox package).
//
// # Ordered mode
//
// Events with a non-empty [Event].OrderingKey are published in order per
// key. Precisely: per ordering key, events are published in the order of
// their enqueue sequence (seq, assigned at insert), and an event is not
// claimed while an earlier event of its key is PENDING, SENDING or RETRY
// (or DEAD, with [Config].DeadBlocksKey). Because Enqueue takes a
// transaction advisory lock per ordering key before the rows get their
// seq, a transaction enqueuing for a key waits for an earlier, still open
// transaction that enqueued for the same key: for one key, seq order is
// commit order, and a relay can never see a later event of a key without
// the earlier ones. A retried event is published again before any later
// event of its key; a failing event blocks only its own key — other keys
// flow. Events without a key are not ordered and never wait.
//
// Costs: one claim round trip per event and key (only the head of a key is
// claimable), and enqueuers of one key serialise until commit (that is
// what ordering means). Keep ordered-key transactions short, and enqueue
// the keys of one transaction in one Enqueue call (it locks them in
// sorted order; separate calls lock in call order and two transactions
// that lock two keys in opposite orders deadlock — PostgreSQL aborts one
// with 40P01, which pgtx.RunInTx retries). A Delay on an ordered event
// also holds back the later events of its key.
//
// # Relay
//
// [NewRelay] and [Relay.Run]: claim a batch, publish, mark the published
// ones SENT with one statement and the failed ones RETRY after a backoff
// (or DEAD after MaxRetries attempts), recover expired leases periodically,
// back off when idle (PollInterval doubling up to MaxPollInterval), wake up
// at once on NOTIFY. Run returns when its ctx is cancelled, after marking
// the in-flight batch (unpublished events are released back to RETRY, so
// none waits for a lease to expire) and after its goroutines have ended.
// Owner ids default to hostname-pid-random, unique per relay.
//
// With [RelayConfig].InTx a relay publishes each batch inside the
// transaction that claims it: the batch is locked (FOR UPDATE SKIP LOCKED,
// nothing written), published, marked and committed, so each event is
// written once (PENDING to SENT, no SENDING version, no lease) and a relay
// that dies mid-batch leaves its events ready at once. It drains faster
// (the bench's outbox table has both modes side by side) but keeps a
// transaction open while Publish runs: for publishers that answer in
// milliseconds. Relays of both modes can serve one outbox.
//
// LISTEN/NOTIFY: with [Config].Notify (off by default), Enqueue calls
// pg_notify once per statement that inserted (not per row) on
// the channel "seckill_outbox_<schema>"; PostgreSQL delivers it at commit and folds duplicates
// within a transaction. Committing transactions that notified serialise on
// the notification queue lock across their WAL flush, which caps an order
// path's commits per second; without NOTIFY relays poll (PollInterval). A
// relay LISTENs on a dedicated connection taken out of its pool; behind a
// transaction-mode pooler (PgBouncer) set [RelayConfig].DisableListen —
// polling still delivers everything. Logs go to a *slog.Logger; batches
// and recoveries, once committed, to an [Observer].
//
// # Pipelining
//
// The writes of a service have a Queue form — [Store.QueueEnqueue] and
// [Store.QueueMark] — that appends the statement to the caller's *pgx.Batch and fills a
// caller-provided result when the batch's results are read. Errors from
// the database (and a lost lease) come back from BatchResults.Close; the
// Queue function's own error is only for invalid input, in which case
// nothing was queued. So an order service can send its order insert, stock
// update and outbox event in one round trip; with [pgtx.Abort],
// QueueEnqueue raises on a duplicate dedup key instead (ErrDuplicate), for
// a transaction sent as one batch that commits only when everything is
// new.
//
// # Errors
//
// Invalid input returns a *[Error] matching [ErrInvalidArgument]
// before anything is sent: empty required fields, strings beyond the
// column limits (counted in characters, like VARCHAR), invalid UTF-8 or
// NUL bytes, a payload that is not JSON (or holds \u0000, which jsonb
// rejects) or exceeds [Config].MaxPayloadBytes, negative delays, retries
// or backoffs, nil ids. An invalid schema returns a *migrate.Error.
// Lost leases: [ErrLeaseLost]. Database errors are wrapped with %w.
//
// # Retention and monitoring
//
// [Store.PurgeSent] deletes SENT events older than a cutoff in small
// batches (keyset over the primary key, each batch its own statement);
// PENDING, SENDING, RETRY and DEAD rows are never purged.
// [Store.ArchiveSent] moves them instead, in the same small batches (one
// DELETE … RETURNING feeding an INSERT per batch), to event_outbox_history,
// for teams that keep their events for an audit period. [Store.Stats]
// counts events per status and the age of the oldest waiting event without
// reading the SENT history: every status but SENT is counted exactly
// through its partial index, SENT exactly only while the table is small
// and otherwise estimated from the planner's statistics.
//
// # Usage
//
//	store, err := outbox.New(outbox.Config{Schema: "shop"})
//	...
//	err = pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
//		// ... insert the order ...
//		_, err := store.Enqueue(ctx, tx, outbox.Event{
//			Topic: "ORDER_EVENT", Tag: "ORDER_CREATED",
//			AggregateType: "ORDER", AggregateID: orderID,
//			DedupKey: "ORDER_CREATED:" + orderID,
//			OrderingKey: "ORDER:" + orderID, // optional
//			Payload: payload,
//		})
//		return err
//	})
//	...
//	relay, err := outbox.NewRelay(pool, outbox.RelayConfig{Store: store, Publish: myBroker.Publish})
//	go relay.Run(ctx) // returns after ctx is cancelled and the batch is marked
package outbox
