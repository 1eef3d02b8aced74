package drills

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// TestFaultDeadlocksAndLockTimeouts runs the order flow (consumers with a
// 250ms lock timeout) against everything that fights for the bucket rows:
// a Rebalance loop that locks every bucket, two timeout-cancel sweepers, a
// session that holds a bucket row lock until consumers time out, and, per
// bucket, a hostile session that makes a real deadlock with a consumer: it
// holds the bucket row the consumer is about to decrement and then inserts
// the consumer's inbox key. Every deadlock is detected by PostgreSQL and
// either the consumer's transaction is retried by pgtx (40P01) or the
// hostile one fails; every lock timeout is classified (55P03) and the
// message redelivered. No consumer error is left unclassified, and the
// result is exactly once with a clean audit.
func TestFaultDeadlocksAndLockTimeouts(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigConfig{Stock: 600, Buckets: 4, Tx: pgtx.Options{LockTimeout: 250 * time.Millisecond}})
	msgs := r.messages(plan{Users: 300, DoubleClick: 10, Expired: 4})
	victims := r.messages(plan{Users: 4, FirstUser: 10_000})
	stopRelays := r.startRelays(r.admin, 2, outbox.RelayConfig{})
	canceller := r.startCanceller(2, 3, 5*time.Millisecond)

	// A rebalancer locks all buckets, in bucket order, again and again.
	rebalance := newTxEvents()
	rctx, stopRebalance := context.WithCancel(r.ctx)
	rebalanceDone := make(chan struct{})
	var rebalances, rebalanceErrs int
	var rebalanceErr error
	go func() {
		defer close(rebalanceDone)
		for rctx.Err() == nil {
			err := pgtx.RunInTx(rctx, r.svc.Pool, pgtx.Options{Name: "rebalance", Observer: rebalance.observer(), LockTimeout: 2 * time.Second}, func(tx pgx.Tx) error {
				_, err := r.svc.Inventory.Rebalance(rctx, tx, inventory.RebalanceRequest{ActivityID: r.svc.Item.ActivityID, SKUID: r.svc.Item.SKUID})
				return err
			})
			if err != nil && rctx.Err() == nil {
				rebalanceErrs++
				rebalanceErr = err
			}
			rebalances++
			tm := time.NewTimer(10 * time.Millisecond) // pacing, not synchronisation
			select {
			case <-rctx.Done():
			case <-tm.C:
			}
			tm.Stop()
		}
	}()

	q := r.consume(msgs, deliverConfig{Workers: 6})

	// Lock timeouts: hold bucket 0 until three consumers gave up on it.
	if err := pgx.BeginFunc(r.ctx, r.admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(r.ctx, r.q(`SELECT 1 FROM %s.sku_inventory WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = 0 FOR UPDATE`),
			r.svc.Item.ActivityID, r.svc.Item.SKUID); err != nil {
			return err
		}
		for r.errCount("lock_timeout") < 3 {
			select {
			case <-r.events:
			case <-q.done:
				return nil
			case <-r.ctx.Done():
				return r.ctx.Err()
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Deadlocks: one hostile session per bucket, all at once.
	victimTx := newTxEvents()
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		hostileDeadlocks int
	)
	for _, v := range victims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := newTxEvents() // this episode's consumer
			both := pgtx.Observer{
				AttemptStart: func(ctx context.Context, e pgtx.Event) context.Context {
					return mine.AttemptStart(victimTx.AttemptStart(ctx, e), e)
				},
				AttemptEnd: func(ctx context.Context, e pgtx.Event) { victimTx.AttemptEnd(ctx, e); mine.AttemptEnd(ctx, e) },
				TxEnd:      func(ctx context.Context, e pgtx.Event) { victimTx.TxEnd(ctx, e); mine.TxEnd(ctx, e) },
			}
			dl, err := r.deadlockEpisode(v, pgtx.Options{Name: "victim", LockTimeout: 20 * time.Second, Observer: both})
			if err != nil {
				t.Errorf("deadlock episode on bucket %d: %v", v.M.Bucket, err)
				return
			}
			// The staged deadlock was detected: its consumer retried
			// after 40P01, or the hostile session was chosen instead.
			if !dl && mine.get("retry_deadlock") == 0 {
				t.Errorf("deadlock episode on bucket %d: no deadlock detected (consumer events %v)", v.M.Bucket, mine.n)
			}
			if dl {
				mu.Lock()
				hostileDeadlocks++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	q.wait()
	stopRebalance()
	<-rebalanceDone
	canceller.finish(r)
	r.drain()
	stopRelays()

	r.logErrors()
	victimRetries := victimTx.get("retry_deadlock")
	t.Logf("deadlock episodes %d: consumer retried after 40P01 %d, hostile session chosen as victim %d; victim tx events %v",
		len(victims), victimRetries, hostileDeadlocks, victimTx)
	t.Logf("consumer tx events %v; rebalances %d (tx events %v, errors %d: %v); cancelled %d (sweep errors %d)",
		r.tx, rebalances, rebalance, rebalanceErrs, rebalanceErr, canceller.cancelled.Load(), canceller.errs.Load())
	// Each episode detected its own (above); the rebalancer and the
	// canceller, running all along, may add deadlocks of their own with
	// a retrying consumer, never fewer than one an episode.
	if got := victimRetries + int64(hostileDeadlocks); got < int64(len(victims)) {
		t.Errorf("%d deadlocks detected in %d deadlock episodes, want at least one each", got, len(victims))
	}
	if victimRetries == 0 {
		t.Errorf("no consumer transaction was retried after a deadlock")
	}
	if r.errCount("lock_timeout") == 0 {
		t.Errorf("no lock timeout reached a consumer")
	}
	r.mu.Lock()
	for class, n := range r.errs {
		if class != "lock_timeout" && class != "deadlock" && class != "too_many_attempts" {
			t.Errorf("%d consumer errors of class %s: neither retried nor classified (e.g. %v)", n, class, r.sample[class])
		}
	}
	r.mu.Unlock()
	r.assertExactlyOnce(append(msgs, victims...))
	r.assertAllPublished()
	r.assertAudit()
}

// deadlockEpisode makes one real deadlock with the consumer of v: a
// hostile session locks v's bucket row, the consumer runs v and blocks on
// that row while holding its new inbox row, and the hostile session then
// inserts the same inbox key. PostgreSQL's deadlock detector breaks the
// cycle by failing one of them; the hostile session rolls back in any
// case. It reports whether the hostile session was the one failed, and an
// error when anything else went wrong (the consumer must end with a fresh
// order).
func (r *rig) deadlockEpisode(v *msg, opts pgtx.Options) (hostileFailed bool, err error) {
	conn, err := r.admin.Acquire(r.ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	tx, err := conn.Begin(r.ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(r.ctx)) }()
	if _, err := tx.Exec(r.ctx, r.q(`SELECT 1 FROM %s.sku_inventory WHERE activity_id = $1 AND sku_id = $2 AND bucket_no = $3 FOR UPDATE`),
		r.svc.Item.ActivityID, r.svc.Item.SKUID, v.M.Bucket); err != nil {
		return false, err
	}
	hostile := conn.Conn().PgConn().PID()

	pids := make(chan uint32, 16)
	type result struct {
		out flow.Outcome
		err error
	}
	res := make(chan result, 1)
	go func() {
		out, err := r.placeWith(r.ctx, opts, v, func(pid uint32) {
			select {
			case pids <- pid:
			default:
			}
		})
		res <- result{out, err}
	}()
	var victim uint32
	select {
	case victim = <-pids:
	case x := <-res:
		return false, fmt.Errorf("the consumer finished before it began: %+v, %v", x.out, x.err)
	}
	// Wait until the consumer waits for the hostile session's row lock
	// (there is no signal for that but the server's lock table).
	for {
		var blocked bool
		if err := r.admin.QueryRow(r.ctx, `SELECT $1::int = ANY(pg_blocking_pids($2::int))`, int32(hostile), int32(victim)).Scan(&blocked); err != nil {
			return false, err
		}
		if blocked {
			break
		}
		select {
		case x := <-res:
			return false, fmt.Errorf("the consumer finished without waiting for the locked bucket: %+v, %v", x.out, x.err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	_, err = tx.Exec(r.ctx, r.q(`INSERT INTO %s.consumer_inbox (consumer_group, message_id, topic) VALUES ($1, $2, 'DRILL')`), flow.ConsumerGroup, v.ID)
	switch {
	case pgtx.Classify(err).Deadlock:
		hostileFailed = true
	case err != nil:
		return false, err
	}
	_ = tx.Rollback(r.ctx)
	x := <-res
	if x.err != nil || x.out.Code != flow.CodeOrderCreated || x.out.Duplicate {
		return hostileFailed, fmt.Errorf("consumer after the deadlock: %+v, %v; want a fresh order", x.out, x.err)
	}
	r.ack(v, x.out)
	return hostileFailed, nil
}
