package drills

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgharness"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// replayed waits until the replica has replayed the WAL up to lsn: after
// that, a read on it sees every transaction that committed before lsn was
// read on the primary (read-your-writes).
func replayed(t *testing.T, ctx context.Context, replica *pgxpool.Pool, lsn string) {
	t.Helper()
	for {
		var ok bool
		if err := replica.QueryRow(ctx, `SELECT coalesce(pg_last_wal_replay_lsn() >= $1::text::pg_lsn, false)`, lsn).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the replica never replayed %s", lsn)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestReplicaLagReadsNeverDecideWrites runs the sale on a primary with a
// lagging asynchronous standby (recovery_min_apply_delay: it makes each
// commit visible only a second after the primary did; around the decisive
// payment its WAL receiver is held) that serves reads such as a buyer's
// order status. It shows the lag — orders just created or paid
// on the primary are missing or stale on the replica — and that a stale
// read cannot turn into a wrong write: a cancel decided on the replica's
// "CREATED" of an order the primary has PAID is refused by the primary's
// conditional UPDATE (an illegal transition, nothing written, no stock
// released). Read-your-writes works by position, not by time: after
// waiting until the replica has replayed the primary's WAL position read
// after the write, the replica shows the write. The sale ends exactly once
// with the audit passing on the primary.
func TestReplicaLagReadsNeverDecideWrites(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	const delay = time.Second
	c := startCluster(t, ctx, pgharness.Options{MaxConnections: 60}, pgharness.StandbyOptions{Name: "lagging", ApplyDelay: delay})
	pool := c.pool(t, "drill-flow", 8)
	admin := c.pool(t, "drill-admin", 4)
	replica := newPool(t, c.standby.URL, 4)
	r := newRig(t, rigConfig{Pool: pool, Admin: admin, Schema: "replica_lag", Stock: 200, Buckets: 4})
	msgs := r.messages(plan{Users: 200, DoubleClick: 10, Pay: 2})
	stopRelays := r.startRelays(admin, 2, outbox.RelayConfig{})
	payments := r.startPayers(2, len(msgs))
	q := r.consume(msgs, deliverConfig{Workers: 8})
	q.wait()
	r.drain()
	payments.close()

	// The lag, as a buyer reading the replica right after the sale sees it.
	count := func(db *pgxpool.Pool, sql string) int64 {
		var n int64
		err := db.QueryRow(ctx, r.q(sql)).Scan(&n)
		if err != nil {
			var pgErr interface{ SQLState() string }
			if errors.As(err, &pgErr) && pgErr.SQLState() == "42P01" { // the schema itself not replayed yet
				return 0
			}
			t.Fatal(err)
		}
		return n
	}
	onPrimary := count(admin, `SELECT count(*) FROM %s.orders`)
	paidPrimary := count(admin, `SELECT count(*) FROM %s.orders WHERE status = 30`)
	onReplica := count(replica, `SELECT count(*) FROM %s.orders`)
	paidReplica := count(replica, `SELECT count(*) FROM %s.orders WHERE status = 30`)
	t.Logf("right after the sale: primary %d orders (%d paid), lagging replica %d orders (%d paid)", onPrimary, paidPrimary, onReplica, paidReplica)

	// An order CREATED (unpaid) on the primary, which the replica has
	// caught up with, is paid on the primary.
	var victim int64
	if err := admin.QueryRow(ctx, r.q(`SELECT min(order_id) FROM %s.orders WHERE status = 10`)).Scan(&victim); err != nil {
		t.Fatal(err)
	}
	replayed(t, ctx, replica, primaryLSN(t, ctx, admin))
	// The replica lags behind this payment for as long as the drill needs
	// (its WAL receiver held), not just for the apply delay.
	if err := c.standby.HoldReplication(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := r.svc.Pay(ctx, flow.Payment{OrderID: victim, ProviderTradeNo: fmt.Sprintf("LAG%d", victim), CallbackID: fmt.Sprintf("LAGCB%d", victim),
		Amount: r.svc.Item.UnitPrice, Currency: r.svc.Item.Currency})
	if err != nil || res.Kind != order.PaymentPaid {
		t.Fatalf("pay order %d: %+v, %v", victim, res, err)
	}
	paidAt := primaryLSN(t, ctx, admin)
	seen, err := r.svc.Orders.Get(ctx, replica, seckill.Request{OrderID: victim})
	if err != nil {
		t.Fatal(err)
	}
	if seen.Status != order.StatusCreated {
		t.Fatalf("the replica already shows order %d as %v though its WAL receiver is held: the drill proves nothing", victim, seen.Status)
	}
	// A decision taken on the stale read — "still CREATED: the buyer may
	// cancel" — is a write, and writes go to the primary, where the
	// conditional UPDATE sees the order as it is.
	releasesBefore := r.count(`SELECT count(*) FROM %s.inventory_ledger WHERE idempotency_key LIKE 'RELEASE:%%'`)
	err = pgtx.RunInTx(ctx, r.svc.Pool, pgtx.Options{}, func(tx pgx.Tx) error {
		_, err := r.svc.Orders.TransitionOrder(ctx, tx, order.Transition{OrderID: victim, To: order.StatusCancelled, CancelReason: "USER_CANCEL"})
		return err
	})
	var ill *order.Error
	if !errors.Is(err, order.ErrIllegalTransition) || !errors.As(err, &ill) || ill.From != order.StatusPaid {
		t.Fatalf("cancel of order %d, CREATED on the replica, PAID on the primary: %v; want an illegal transition from PAID", victim, err)
	}
	now, err := r.svc.Orders.Get(ctx, admin, seckill.Request{OrderID: victim})
	if err != nil || now.Status != order.StatusPaid {
		t.Fatalf("order %d on the primary after the refused cancel: %+v, %v; want PAID", victim, now, err)
	}
	if got := r.count(`SELECT count(*) FROM %s.inventory_ledger WHERE idempotency_key LIKE 'RELEASE:%%'`); got != releasesBefore {
		t.Fatalf("%d RELEASE ledger rows after the refused cancel, want %d", got, releasesBefore)
	}
	// Read-your-writes: wait until the replica has replayed the position
	// read after the payment, then read.
	if err := c.standby.ReleaseReplication(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	replayed(t, ctx, replica, paidAt)
	seen, err = r.svc.Orders.Get(ctx, replica, seckill.Request{OrderID: victim})
	if err != nil || seen.Status != order.StatusPaid {
		t.Fatalf("order %d on the replica after it replayed %s: %+v, %v; want PAID", victim, paidAt, seen, err)
	}
	t.Logf("order %d: PAID on the primary, CREATED on the replica; a cancel decided on the replica refused by the primary (%v); "+
		"the replica showed PAID after replaying %s (%v later)", victim, ill, paidAt, time.Since(began).Round(time.Millisecond))

	r.drain()
	stopRelays()
	r.assertExactlyOnce(msgs)
	r.assertAllPublished()
	r.assertAudit()
}

// primaryLSN is the primary's current WAL position: every transaction
// that committed before it was read is at or before it.
func primaryLSN(t *testing.T, ctx context.Context, primary *pgxpool.Pool) string {
	t.Helper()
	var lsn string
	if err := primary.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}
