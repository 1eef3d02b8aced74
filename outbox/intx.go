package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/internal/pgval"
)

// A relay in InTx mode (RelayConfig.InTx) publishes each batch inside the
// transaction that claims it. The claim locks the candidates of the claim statement
// (FOR UPDATE SKIP LOCKED, the same order and the same ordering rule) and
// writes nothing; the marks update the locked rows; COMMIT makes them SENT
// (or RETRY/DEAD) and drops the locks. Each event is written once, not
// twice (no SENDING version, no lease), and a relay that dies mid-batch
// leaves its events ready at once: the rollback drops the locks, and the
// rows never left PENDING or RETRY.
//
// The ordering rule holds as in lease mode: an ordered event's predecessor
// that another relay holds locked is still PENDING or RETRY, which blocks
// it, and a locked row that another relay marked and committed meanwhile is
// re-checked against the claim's conditions before it is taken.

// errMarkInTx reports locked events that a mark did not find ready: it
// cannot happen while the transaction holds their locks.
var errMarkInTx = errors.New("outbox: an event locked by this transaction was not ready to mark")

// runBatchInTx is runBatch in InTx mode: lock, publish, mark and commit
// one batch in one transaction. It returns the number of events locked.
func (r *Relay) runBatchInTx(ctx context.Context) (int, error) {
	start := time.Now()
	// The transaction is not interrupted by ctx: what was published must
	// be marked. It is bounded by the publish deadline (Lease) plus
	// ShutdownTimeout for the statements; each statement by
	// ShutdownTimeout.
	base := context.WithoutCancel(ctx)
	tctx, cancelTx := context.WithTimeout(base, r.cfg.Lease+r.cfg.ShutdownTimeout)
	defer cancelTx()
	stmt := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(tctx, r.cfg.ShutdownTimeout)
	}

	sctx, cancel := stmt()
	tx, err := r.pool.Begin(sctx)
	cancel()
	if err != nil {
		return 0, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(base, r.cfg.ShutdownTimeout)
		defer cancel()
		_ = tx.Rollback(rctx) // no-op after COMMIT
	}()

	claim, err := r.lockBatch(tx, stmt, start)
	if err != nil {
		return 0, err
	}
	n := len(claim.Messages)
	if n == 0 {
		sctx, cancel = stmt()
		defer cancel()
		return 0, tx.Commit(sctx)
	}
	octx := r.obs.batchStart(ctx, RelayEvent{Owner: r.cfg.Owner, Messages: claim.Messages})
	end := RelayEvent{Owner: r.cfg.Owner, Claimed: n}

	errs, stopping := r.publishUnlessStopping(ctx, start, claim.Messages)
	marks := r.txMarksOf(claim.Messages, errs, stopping)
	end.Released = marks.released
	published, failed, dead, err := r.markAndCommit(tx, stmt, marks)
	if err != nil {
		// Nothing was marked: the events are ready again once the
		// rollback (or the server, for a lost connection) drops the
		// locks, and the published ones will be published again.
		end.Released = 0
		r.cursor.set = false // they sort before the cursor: claim from the head
		err = fmt.Errorf("mark in transaction: %w", err)
	} else {
		end.Published, end.Failed, end.Dead = published, failed, dead
		if dead > 0 {
			r.log.WarnContext(ctx, "outbox relay: events dead after their last attempt", "count", dead)
		}
	}
	end.Err, end.Elapsed = err, time.Since(start)
	r.obs.batchEnd(octx, end)
	return n, err
}

// lockBatch locks the relay's next batch in tx (from its cursor, or the
// head), as lockSQL's claim. stmt gives each statement its context.
func (r *Relay) lockBatch(tx pgx.Tx, stmt func() (context.Context, context.CancelFunc), start time.Time) (Claim, error) {
	r.cursor.fromHead(start)
	var claim Claim
	b := &pgx.Batch{}
	var q *pgx.QueuedQuery
	if r.cursor.set {
		q = b.Queue(r.store.lockAfterSQL, r.cfg.BatchSize, r.cursor.availableAt, r.cursor.createdAt, pgval.UUID(r.cursor.eventID))
	} else {
		q = b.Queue(r.store.lockSQL, r.cfg.BatchSize)
	}
	r.store.queueClaim(b, r.cfg.Owner, &r.cursor, q, &claim)
	sctx, cancel := stmt()
	err := tx.SendBatch(sctx, b).Close()
	cancel()
	r.claimed(len(claim.Messages), start, err)
	return claim, err
}

// txMarks are the marks of a batch published in InTx mode: the events
// sent, and the failed ones with their errors and backoffs (µs).
type txMarks struct {
	sent     []uuid.UUID
	fids     []string
	msgs     []string
	backoffs []int64
	released int // neither: left as they were (the relay is stopping)
}

// txMarksOf sorts msgs by their publish errors. When stopping, a failed
// event is released: left as it was, the COMMIT drops its lock.
func (r *Relay) txMarksOf(msgs []Message, errs []error, stopping bool) txMarks {
	var m txMarks
	for i, msg := range msgs {
		switch {
		case errs[i] == nil:
			m.sent = append(m.sent, msg.EventID)
		case stopping:
			m.released++ // left as it was: the COMMIT drops the lock
		default:
			m.fids = append(m.fids, msg.EventID.String())
			m.msgs = append(m.msgs, truncateError(errs[i].Error()))
			m.backoffs = append(m.backoffs, r.cfg.Backoff(msg.Attempt).Microseconds())
		}
	}
	return m
}

// markAndCommit writes marks in tx and commits it. It returns the events
// marked SENT, failed, and dead of those failed.
func (r *Relay) markAndCommit(tx pgx.Tx, stmt func() (context.Context, context.CancelFunc), m txMarks) (published, failed, dead int, err error) {
	mb := &pgx.Batch{}
	if len(m.sent) > 0 {
		mb.Queue(r.store.sentTxSQL, uuidTexts(m.sent)).Exec(func(ct pgconn.CommandTag) error {
			published = int(ct.RowsAffected())
			return nil
		})
	}
	if len(m.fids) > 0 {
		mb.Queue(r.store.failTxSQL, m.fids, m.msgs, m.backoffs).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var st int16
				if err := rows.Scan(&st); err != nil {
					return err
				}
				failed++
				if Status(st) == StatusDead {
					dead++
				}
			}
			return rows.Err()
		})
	}
	if mb.Len() > 0 {
		sctx, cancel := stmt()
		err = tx.SendBatch(sctx, mb).Close()
		cancel()
		if err == nil && (published != len(m.sent) || failed != len(m.fids)) {
			err = fmt.Errorf("%w: %d of %d sent, %d of %d failed", errMarkInTx, published, len(m.sent), failed, len(m.fids))
		}
	}
	if err == nil {
		sctx, cancel := stmt()
		err = tx.Commit(sctx)
		cancel()
	}
	return published, failed, dead, err
}
