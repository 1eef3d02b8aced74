package drills

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/seckillkit/seckill/internal/faultproxy"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// Kinds of cut the cutter makes.
const (
	cutCommitBefore = "commit_before" // COMMIT never reaches the server
	cutCommitAfter  = "commit_after"  // the server committed, the client never hears it
	cutMidBatch     = "mid_batch"     // before one of the batch's Bind messages
	cutBatchAfter   = "batch_after"   // the batch ran, its answer is lost (open transaction)
)

// cutter is a faultproxy rule that cuts connections at random points of
// the consumer transaction, each kind up to a budget.
type cutter struct {
	mu   sync.Mutex
	rng  *rand.Rand
	left map[string]int
	made map[string]int
}

func newCutter(seed uint64, perKind int) *cutter {
	return &cutter{
		rng:  rand.New(rand.NewPCG(seed, seed^0xdead)),
		left: map[string]int{cutCommitBefore: perKind, cutCommitAfter: perKind, cutMidBatch: perKind, cutBatchAfter: perKind},
		made: map[string]int{},
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

func (c *cutter) rule(m faultproxy.Message) faultproxy.Action {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch m.Type {
	case 'Q':
		if strings.EqualFold(m.Query(), "commit") {
			switch {
			case c.take(cutCommitBefore, 0.10):
				return faultproxy.CutBefore
			case c.take(cutCommitAfter, 0.11):
				return faultproxy.CutAfter
			}
		}
	case 'B':
		if c.take(cutMidBatch, 0.012) {
			return faultproxy.CutBefore
		}
	case 'S':
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
// connection through a fault proxy that cuts about 200 connections at
// random points: before COMMIT, after the server executed COMMIT, before a
// Bind of the pipelined batch, and after the batch ran. Messages are
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

// cutDrill cuts 4×perKind connections: 200 in the redelivery variant, 100
// more in the ResolveCommit one.
func cutDrill(t *testing.T, resolve bool) {
	users, perKind := 400, 50
	if resolve {
		users, perKind = 220, 25
	}
	pool, px := proxiedPool(t, pgtest.URL(t), 8)
	r := newRig(t, rigConfig{Pool: pool, Stock: int32(users) * 24 / 25, Buckets: 4, Tx: pgtx.Options{ResolveCommit: resolve}})
	msgs := r.messages(plan{Users: users, DoubleClick: 10})
	stopRelays := r.startRelays(r.admin, 2, outbox.RelayConfig{})

	cuts := newCutter(rand.Uint64(), perKind)
	px.SetRule(cuts.rule)
	q := r.consume(msgs, deliverConfig{Workers: 8})
	q.wait()
	px.SetRule(nil)
	r.drain()
	stopRelays()

	made := cuts.counts()
	total := 0
	for _, n := range made {
		total += n
	}
	t.Logf("%d messages, %d deliveries redelivered, cuts %v (%d in all, proxy counted %d)", len(msgs), q.redeliv.Load(), made, total, px.Cuts())
	t.Logf("pgtx events %v", r.tx)
	r.logErrors()
	for _, k := range []string{cutCommitBefore, cutCommitAfter, cutMidBatch, cutBatchAfter} {
		if made[k] == 0 {
			t.Errorf("no %s cut was made", k)
		}
	}
	if total < 3*perKind {
		t.Errorf("only %d connections cut, want about %d", total, 4*perKind)
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
	// ResolveCommit: pg_xact_status decided every unknown commit in place;
	// the consumer never saw ErrCommitOutcomeUnknown.
	resolved := r.tx.get("resolved")
	rc, ra := r.tx.get("resolved_committed"), r.tx.get("resolved_aborted")
	t.Logf("unknown commits %d: resolved in place %d (committed %d, aborted %d)", unknown, resolved, rc, ra)
	if resolved != unknown {
		t.Errorf("%d unknown commits, %d resolved", unknown, resolved)
	}
	if got := r.errCount("commit_unknown"); got != 0 {
		t.Errorf("consumers saw %d unknown commits despite ResolveCommit", got)
	}
	if rc == 0 || ra == 0 {
		t.Errorf("want resolutions both ways, got committed %d, aborted %d", rc, ra)
	}
}
