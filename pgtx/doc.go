// Package pgtx runs PostgreSQL transactions the way a flash sale needs
// them: it retries what is safe to retry and names what is not.
//
// # Running a transaction
//
// [RunInTx] begins a transaction (Read Committed unless [Options] say
// otherwise), runs fn, and commits:
//
//	err := pgtx.RunInTx(ctx, pool, pgtx.Options{LockTimeout: 150 * time.Millisecond},
//		func(tx pgx.Tx) error {
//			// claim the message, insert the order, decrement the bucket, enqueue the event …
//			return nil
//		})
//
// fn must not commit or roll back itself and must be safe to run again,
// because RunInTx runs the whole transaction again when it fails with a
// serialization failure (SQLSTATE 40001) or a deadlock (40P01) — only those
// two, matched explicitly — after a jittered exponential backoff
// ([Options.BaseBackoff]), up to [Options.MaxAttempts]. Retrying the whole
// transaction, not the failed statement, is what makes the retry correct:
// the failed attempt was rolled back in full. When the attempts run out,
// the error matches [ErrTooManyAttempts] and unwraps to the last cause.
//
// Any other error of fn rolls the transaction back and comes back
// unchanged. A panic rolls back and is re-raised. ROLLBACK always runs on a
// context detached from the caller's cancellation (bounded by
// [Options.RollbackTimeout]), so a cancelled caller releases its row locks
// at once instead of when the connection is reaped.
//
// # Round trips
//
// By default BEGIN (with the SET LOCALs of the timeouts) takes a round trip
// of its own. With [Options.DeferBegin] it travels in one pipeline with
// fn's first statement instead, using pgx's Batch.BeginTx: a transaction
// that sends its work as one batch takes two round trips in all, the batch
// and COMMIT, and a transaction whose fn sends nothing takes none.
//
// [RunBatch] takes one: BEGIN, a batch of statements and COMMIT travel in
// one pipeline, so a hot row's lock is held only while the server runs the
// rest of the batch and flushes the commit. Every condition that must stop
// such a transaction has to raise in SQL (the server then skips the rest,
// COMMIT included, and the error, a *[StatementError], names the
// statement, or the helper call it belongs to with the call's condition:
// see [NameCall]); the caller falls back to its general path.
//
// # When COMMIT fails
//
// A failed COMMIT returns a *[CommitError], in one of two kinds:
//
//   - not committed: the server answered with an error (which may be
//     retryable: a Serializable COMMIT can fail with 40001), or rolled the
//     transaction back because it had already failed, or the COMMIT never
//     left the client;
//   - outcome unknown: the COMMIT was sent and the answer never came (the
//     connection broke, a timeout, a cancelled context). The transaction may
//     have committed. The error matches [ErrCommitOutcomeUnknown] and is
//     never retried: running fn again could sell the same stock twice.
//
// A message consumer answers an unknown outcome by not acknowledging the
// message: the redelivery finds the first attempt's result through its
// inbox row and unique keys. Alternatively [Options.ResolveCommit] lets
// RunInTx find out: it reads the transaction id before COMMIT (one round
// trip more) and, on an unknown outcome, asks pg_xact_status on another
// connection — committed is success, aborted is a known failure, in
// progress is asked again until decided or [Options.ResolveTimeout]. After
// a failover (the server asked is on another timeline than the one the
// transaction id was read on) the outcome stays unknown: the promoted
// standby may never have received the COMMIT and may have given the same
// id to a transaction of its own. A transaction without an id before
// COMMIT stays unknown too (a NOTIFY gets its id at COMMIT; on Citus a
// write routed to a worker leaves the coordinator without one), except a
// read-only one, whose outcome cannot matter.
//
// RunInTx returns nil exactly when the transaction committed; every other
// error proves it did not ([ErrorClass.NotCommitted]), except one that
// matches [ErrCommitOutcomeUnknown].
//
// # Classifying errors
//
// [Classify] tells what an error means: the transaction's outcome
// (committed, not committed, unknown) and the condition a caller acts on
// (retryable, serialization failure, deadlock, lock timeout, statement
// timeout), as the fields of an [ErrorClass]:
//
//	if c := pgtx.Classify(err); c.LockTimeout {
//		// the hot row was busy: answer "try again" without queueing
//	}
//
// [UniqueViolationOf] reports a unique violation with the constraint's
// name. Both work on any error chain built with %w; use them in fn and
// around RunInTx.
//
// # Handles
//
// [TxBeginner] is what RunInTx needs (a *pgxpool.Pool or *pgx.Conn).
// [Querier] is the smallest handle the helpers of the other packages of
// this module take for reads and stand-alone writes; a pool, a connection
// and a pgx.Tx all satisfy it.
//
// # Observing
//
// [Options.Observer] is a struct of hook functions, each nil unless set
// (a nil hook does nothing; the zero Observer observes nothing). It is
// told of each call (TxStart, TxEnd: once, with what the call returns)
// and of each attempt (AttemptStart, AttemptEnd: once per attempt, with
// its error, whether it is retried and whether its COMMIT's answer was
// lost) — enough to count retries per attempt and commits per commit, or
// to open a span per call and per attempt, without wrapping fn. The other
// packages of this module report through the same shape; see [Observer]
// for the convention.
package pgtx
