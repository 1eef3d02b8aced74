// Package inbox is the idempotent consumer: the consumer_inbox table and the
// helpers that let a message consumer claim a message inside its own
// transaction, so that a redelivered message is recognised and answered with
// the result of its first processing.
//
// A broker delivers at least once: after a crash, a lost ack or a replay the
// same message arrives again, possibly at another instance, possibly hours
// later. Remembering processed messages in memory cannot catch that; a row
// written in the same transaction as the message's business writes can.
//
// # Table
//
// [Migrations], applied with migrate.Apply, creates consumer_inbox in the
// configured schema: one row per (consumer_group, message_id), holding the
// topic, tag, message key, an optional business reference (ref), an optional
// payload hash, the status ([StatusClaimed] or [StatusProcessed]), the result
// code and JSON result payload, created_at (the claim time, BRIN-indexed for
// retention, which reads it as a bound of processed_at) and processed_at. No
// index covers a column [Store.Complete] changes, so its update is HOT
// (migration 003). Consumer groups are independent: the same message id in two
// groups is two rows.
//
// # Contract
//
// [Store.ClaimMessage] takes the caller's pgx.Tx and must run in the
// transaction that does the message's work, before that work. It inserts the
// row with INSERT … ON CONFLICT DO NOTHING:
//
//   - Claim.Fresh: this transaction owns the message. The row exists only if
//     the transaction commits; a rollback removes it and the message can be
//     claimed again. Record what was done with [Store.Complete] (one UPDATE,
//     same transaction), or set Message.Result when the result is known up
//     front. Ack the message only after COMMIT.
//   - !Claim.Fresh: a duplicate. Claim.Record holds the stored result code,
//     payload and times. Do not repeat the work; ack.
//
// A claim that meets another transaction's uncommitted claim on the same key
// waits for it: after its commit the claim is a duplicate and returns the
// committed result; after its rollback the claim becomes the owner. Fresh
// claims and duplicates of committed messages cost one statement; a
// duplicate that had to wait costs a second one (the claiming statement's
// snapshot cannot see a row committed while it waited, so a new statement
// reads it). A
// duplicate writes nothing and takes no row lock.
//
// [Store.Lookup] reads a stored row by [Key] through any [pgtx.Querier].
// [Store.Purge] deletes rows processed before a cutoff in small batches;
// retention must exceed the broker's replay window, or a redelivery of a
// purged message is processed again. [Store.Archive] moves them to
// consumer_inbox_history instead, one DELETE … RETURNING feeding an INSERT
// per batch. Config.MinRetention makes both refuse a horizon younger than
// the replay window with a *[Error].
//
// # Pipelining
//
// [Store.QueueClaimMessage] (with [pgtx.Return]) and [Store.QueueComplete]
// queue the same statements into a caller's
// *pgx.Batch. Their returned error reports invalid input only (nothing is
// queued then). When the batch runs, each callback fills the caller's
// destination (a *[Claim]) and returns nil or a classified error, which the
// caller receives from BatchResults.Close; the first error ends the callbacks.
// Statements queued after a claim run whatever the claim finds, so roll the
// transaction back when the claim is not fresh. A queued claim that had to
// wait for a concurrent owner that committed returns [ErrConcurrentClaim]
// (a batch callback cannot send the second statement): treat it as a
// duplicate and use [Store.Lookup] for the result.
//
// # Errors
//
//   - [ErrInvalidArgument] (*[Error]): bad input (empty group or
//     topic, zero UUID, strings over the column limits, invalid UTF-8 or
//     JSON, …), returned before anything is sent; nothing is written.
//   - [ErrPayloadMismatch] (*[Error], carrying both hashes):
//     a redelivery whose payload hash differs from the stored one. Nothing
//     is written; the transaction stays usable.
//   - [ErrNotFound]: Lookup found no row; Complete found no claim.
//   - [ErrAlreadyCompleted] (*[Error]): Complete on a row whose result
//     is already recorded; results are never overwritten.
//   - [ErrNotClaimer] (*[Error]): Complete on a row another, committed
//     transaction claimed without a result; only the claiming transaction
//     records a result. Nothing is written.
//   - [ErrConcurrentClaim]: batch forms only, see above.
//
// Driver errors are wrapped with %w; under REPEATABLE READ or SERIALIZABLE a
// claim racing a concurrent commit fails with SQLSTATE 40001, which
// pgtx.RunInTx retries.
//
// # Usage
//
//	in, err := inbox.New(inbox.Config{Schema: "seckill"})
//	...
//	err = pgtx.RunInTx(ctx, pool, pgtx.Options{}, func(tx pgx.Tx) error {
//		c, err := in.ClaimMessage(ctx, tx, inbox.Message{
//			Group: "order-service", MessageID: id, Topic: "seckill.reserve",
//			PayloadHash: inbox.HashPayload(body),
//		})
//		if err != nil || !c.Fresh {
//			return err // duplicate: c.Record.Result is the first result
//		}
//		// ... business writes in tx ...
//		return in.Complete(ctx, tx, c.Record.Key, inbox.Result{Code: "ORDER_CREATED"})
//	})
//	// ack after commit
package inbox
