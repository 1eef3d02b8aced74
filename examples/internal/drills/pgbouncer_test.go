package drills

import (
	"fmt"
	"time"

	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
)

// TestPgBouncerFullFlow runs the whole flow through PgBouncer in
// transaction pooling mode, with the settings users need there: pgx's exec
// query mode (no named prepared statements) and relays that poll
// (DisableListen: LISTEN does not survive transaction pooling). Orders,
// double clicks, payments, timeout cancels, payments after the cancel and
// the relays all go through PgBouncer; the audit passes, read through
// PgBouncer as well as directly.
func TestPgBouncerFullFlow(t *testing.T) {
	t.Parallel()
	pool := pgtest.PgBouncerPool(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	if m := pool.Config().ConnConfig.DefaultQueryExecMode; m != pgx.QueryExecModeExec {
		t.Fatalf("query exec mode %v through PgBouncer, want exec", m)
	}
	r := newRig(t, rigConfig{Pool: pool, Stock: 300, Buckets: 4})
	msgs := r.messages(plan{Users: 300, DoubleClick: 10, Expired: 5, Pay: 2})
	stopRelays := r.startRelays(pool, 2, outbox.RelayConfig{DisableListen: true})
	payments := r.startPayers(2, len(msgs))
	canceller := r.startCanceller(1, 50, 10*time.Millisecond)
	// No fault is injected: a consumer error that is not a transient
	// conflict means the flow does not work through PgBouncer.
	q := r.consume(msgs, deliverConfig{Workers: 8, FailFast: func(err error) bool { return errClass(err) == "other" }})
	q.wait()
	r.drain()
	payments.close()
	canceller.finish(r)
	r.drain()
	stopRelays()

	r.logErrors()
	kinds := map[string]int{}
	payments.mu.Lock()
	for _, k := range payments.results {
		kinds[fmt.Sprint(k)]++
	}
	payments.mu.Unlock()
	t.Logf("through PgBouncer: pgtx events %v; payments %v (retries %d); cancelled %d", r.tx, kinds, payments.errs.Load(), canceller.cancelled.Load())
	if len(payments.results) == 0 || canceller.cancelled.Load() == 0 {
		t.Errorf("want payments and cancels through PgBouncer, got %v and %d", kinds, canceller.cancelled.Load())
	}
	r.assertExactlyOnce(msgs)
	r.assertAllPublished()
	r.assertAudit()
	checks, err := r.svc.Audit(r.ctx) // the audit's own queries through PgBouncer
	if err != nil || !flow.Passed(checks) {
		t.Errorf("audit through PgBouncer: %v, %+v", err, checks)
	}
}
