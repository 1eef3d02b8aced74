package drills

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/faultproxy"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// Kinds of cut the cutter makes.
const (
	cutCommitBefore      = "commit_before"       // the general transaction's COMMIT never reaches the server
	cutCommitAfter       = "commit_after"        // the server committed it, the client never hears it
	cutBatchCommitBefore = "batch_commit_before" // the fresh path's batch, cut at its COMMIT: the rest ran, uncommitted
	cutMidBatch          = "mid_batch"           // before a Bind in the middle of the fresh path's batch
	cutBatchAfter        = "batch_after"         // a batch or statement ran, its answer is lost (for the fresh batch: committed)
)

// cutter is a faultproxy rule that cuts connections at random points of
// the consumer transaction, each kind up to a budget.
type cutter struct {
	mu    sync.Mutex
	rng   *rand.Rand
	left  map[string]int
	made  map[string]int
	stmts map[string]string // prepared statement name → SQL, from Parse messages
	conns map[int]*cutConn
	// general counts the batches recognised as the general path's (by
	// their SAVEPOINT), which mid-batch cuts spare.
	general int
}

// cutConn is what the cutter knows of one connection's current batch.
type cutConn struct {
	unnamed   string // the SQL of the last unnamed Parse
	binds     int    // Binds since the last Sync
	savepoint bool   // the batch set a savepoint: the general path, not the fresh one
}

func newCutter(seed uint64, perKind int) *cutter {
	return &cutter{
		rng: rand.New(rand.NewPCG(seed, seed^0xdead)),
		// The general transaction commits only the rarer messages
		// (rejections, re-sent reservations): a smaller budget.
		left: map[string]int{cutCommitBefore: perKind / 5, cutCommitAfter: perKind / 5,
			cutBatchCommitBefore: perKind, cutMidBatch: perKind, cutBatchAfter: perKind},
		made:  map[string]int{},
		stmts: map[string]string{},
		conns: map[int]*cutConn{},
	}
}

func (c *cutter) take(kind string, p float64) bool {
	if c.left[kind] == 0 || c.rng.Float64() >= p {
		return false
	}
	c.left[kind]--
	c.made[kind]++
	return true
}

// done reports whether every kind of cut has been made as often as its
// budget allows.
func (c *cutter) done() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.left {
		if n > 0 {
			return false
		}
	}
	return true
}

// twoCStrings splits the first two NUL-terminated strings of b.
func twoCStrings(b []byte) (string, string) {
	first := cstringOf(b)
	if len(first) >= len(b) {
		return first, ""
	}
	return first, cstringOf(b[len(first)+1:])
}

func cstringOf(b []byte) string {
	for i, ch := range b {
		if ch == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func (c *cutter) rule(m faultproxy.Message) faultproxy.Action {
	c.mu.Lock()
	defer c.mu.Unlock()
	cc := c.conns[m.ConnID]
	if cc == nil {
		cc = &cutConn{}
		c.conns[m.ConnID] = cc
	}
	switch m.Type {
	case 'Q':
		if strings.HasPrefix(strings.ToUpper(m.Query()), "SAVEPOINT") {
			c.general++
		}
		if strings.EqualFold(m.Query(), "commit") {
			switch {
			case c.take(cutCommitBefore, 0.3):
				return faultproxy.CutBefore
			case c.take(cutCommitAfter, 0.3):
				return faultproxy.CutAfter
			}
		}
	case 'P':
		name, sql := twoCStrings(m.Body)
		if name == "" {
			cc.unnamed = sql
		} else {
			c.stmts[name] = sql
		}
	case 'B':
		_, name := twoCStrings(m.Body) // portal, statement
		sql := cc.unnamed
		if name != "" {
			sql = c.stmts[name]
		}
		cc.binds++
		if strings.HasPrefix(strings.ToUpper(strings.TrimSpace(sql)), "SAVEPOINT") {
			cc.savepoint = true
			c.general++
		}
		if strings.EqualFold(strings.TrimSpace(sql), "commit") {
			if c.take(cutBatchCommitBefore, 0.08) {
				return faultproxy.CutBefore
			}
			return faultproxy.Forward
		}
		// Four Binds without a Sync and without a savepoint: the fresh
		// path's batch, with statements before and after this one (the
		// general transaction sends one statement per Sync, the first
		// with BEGIN and a SET LOCAL).
		if cc.binds >= 4 && !cc.savepoint && c.take(cutMidBatch, 0.03) {
			return faultproxy.CutBefore
		}
	case 'S':
		cc.binds, cc.savepoint = 0, false
		if c.take(cutBatchAfter, 0.06) {
			return faultproxy.CutAfter
		}
	}
	return faultproxy.Forward
}

func (c *cutter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.made {
		out[k] = v
	}
	return out
}

// TestFaultCutConnections runs the order flow with every consumer
// connection through a fault proxy that cuts connections at random points:
// 50 each in the fresh path's one batch at its COMMIT, before a Bind in its
// middle, and after a batch or statement ran (for the fresh batch: after
// the server committed it); 10 each before and after the general
// transaction's COMMIT (a fifth of the messages run it: fresh orders,
// rejections). Waves of buyers keep coming until every kind has been
// cut as often as planned, then a last wave sells out. Messages are
// redelivered until acknowledged. Afterwards every message is processed
// exactly once, every unknown commit was resolved (by redelivery and the
// inbox, or in place by pg_xact_status), and the audit passes.
func TestFaultCutConnections(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		resolve bool
	}{{"redelivery", false}, {"resolve_commit", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cutDrill(t, tc.resolve)
		})
	}
}

// cutDrill cuts 3×perKind + 2×perKind/5 connections: 170 in the redelivery
// variant, 85 more in the ResolveCommit one.
func cutDrill(t *testing.T, resolve bool) {
	wave, perKind, maxWaves := 200, 50, 6
	if resolve {
		wave, perKind = 110, 25
	}
	// Buckets 0-3 take the waves and never run out; bucket 4 takes the
	// last wave, which asks for more than it holds.
	perBucket := wave * maxWaves / 4
	pool, px := proxiedPool(t, pgtest.URL(t), 8)
	r := newRig(t, rigConfig{Pool: pool, Stock: int32(5 * perBucket), Buckets: 5, Tx: pgtx.Options{ResolveCommit: resolve}})
	stopRelays := r.startRelays(r.admin, 2, outbox.RelayConfig{})

	// A fifth of the messages (by id) run the step-by-step transaction,
	// whose COMMIT the commit cuts aim at; the rest PlaceOrder, whose
	// fresh orders and common rejections are one batch each.
	mixed := func(ctx context.Context, m *msg) (flow.Outcome, error) {
		if m.ID[15]%5 == 0 {
			return r.svc.PlaceOrderStepByStep(ctx, m.ID, m.Body)
		}
		return r.svc.PlaceOrder(ctx, m.ID, m.Body)
	}
	cuts := newCutter(rand.Uint64(), perKind)
	px.SetRule(cuts.rule)
	var msgs []*msg
	users, waves := 0, 0
	for ; ; waves++ {
		p := plan{Users: wave, FirstUser: int64(users) + 1, DoubleClick: 10, Buckets: []int16{0, 1, 2, 3}}
		last := cuts.done() || waves == maxWaves-1
		if last {
			p.Users, p.Buckets = perBucket+wave/10, []int16{4}
		}
		ms := r.messages(p)
		users += p.Users
		msgs = append(msgs, ms...)
		r.consume(ms, deliverConfig{Workers: 8, Handle: mixed}).wait()
		if last {
			waves++
			break
		}
	}
	px.SetRule(nil)
	r.drain()
	stopRelays()

	made := cuts.counts()
	total := 0
	for _, n := range made {
		total += n
	}
	t.Logf("%d messages in %d waves, cuts %v (%d in all, proxy counted %d); %d general-path batches spared by mid-batch cuts", len(msgs), waves, made, total, px.Cuts(), cuts.general)
	t.Logf("pgtx events %v", r.tx)
	r.logErrors()
	for _, k := range []string{cutCommitBefore, cutCommitAfter, cutBatchCommitBefore, cutMidBatch, cutBatchAfter} {
		want := perKind
		if k == cutCommitBefore || k == cutCommitAfter {
			want = perKind / 5
		}
		if made[k] != want {
			t.Errorf("%d %s cuts made, want %d", made[k], k, want)
		}
	}
	if cuts.general == 0 {
		t.Errorf("no general transaction recognised (by its SAVEPOINT): the flow never left the fresh path")
	}
	if sold := r.count(`SELECT count(*) FROM %s.consumer_inbox WHERE result_code = $1`, flow.CodeSoldOut); sold == 0 {
		t.Errorf("no message sold out: the last wave should have asked for more than the stock")
	}

	r.assertExactlyOnce(msgs)
	r.assertAllPublished()
	r.assertAudit()

	unknown := r.tx.get("commit_unknown")
	if unknown == 0 {
		t.Fatalf("no commit with unknown outcome observed")
	}
	if !resolve {
		// Each unknown commit reached the consumer, which nacked; the
		// redelivery found the answer: a duplicate if it had committed, a
		// fresh order if not.
		if got := r.errCount("commit_unknown"); got != unknown {
			t.Errorf("consumers saw %d unknown commits, the observer %d", got, unknown)
		}
		committed, notCommitted := 0, 0
		r.mu.Lock()
		for id := range r.unknown {
			acks := r.acks[id]
			switch {
			case len(acks) == 0:
				t.Errorf("message %s with an unknown commit was never acknowledged", id)
			case acks[len(acks)-1].Duplicate:
				committed++
			default:
				notCommitted++
			}
		}
		r.mu.Unlock()
		t.Logf("unknown commits %d on %d messages: resolved by redelivery as committed %d, not committed %d",
			unknown, committed+notCommitted, committed, notCommitted)
		if committed == 0 || notCommitted == 0 {
			t.Errorf("want redeliveries resolving both committed and not committed unknown outcomes, got %d and %d", committed, notCommitted)
		}
		return
	}
	// ResolveCommit: pg_xact_status decided in place every unknown commit
	// whose transaction id reached the client (the general transaction
	// reads it before COMMIT is sent); a cut one-batch transaction usually
	// loses the id with the rest of the batch's answer, so its consumer
	// sees ErrCommitOutcomeUnknown, nacks, and the redelivery answers.
	resolved := r.tx.get("resolved")
	rc, ra := r.tx.get("resolved_committed"), r.tx.get("resolved_aborted")
	seen := r.errCount("commit_unknown")
	t.Logf("unknown commits %d: resolved in place %d (committed %d, aborted %d), left to redelivery %d", unknown, resolved, rc, ra, seen)
	if resolved+seen != unknown {
		t.Errorf("%d unknown commits, %d resolved in place and %d seen by consumers", unknown, resolved, seen)
	}
	if rc == 0 || ra == 0 {
		t.Errorf("want resolutions both ways, got committed %d, aborted %d", rc, ra)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.unknown {
		if len(r.acks[id]) == 0 {
			t.Errorf("message %s with an unknown commit was never acknowledged", id)
		}
	}
}
