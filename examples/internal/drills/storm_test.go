package drills

import (
	"sync"
	"testing"
	"time"

	"github.com/seckillkit/seckill/outbox"
)

// TestFaultDuplicateStorm delivers every message three times at once, and
// every tenth reservation a fourth time under a new message id (a
// re-send), each copy redelivered until acknowledged. Every message id
// gets exactly one answer that is not a duplicate, and every reservation
// exactly one order: allocated = orders, one inbox row per message id.
func TestFaultDuplicateStorm(t *testing.T) {
	t.Parallel()
	const copies, wave = 3, 25
	r := newRig(t, rigConfig{Stock: 400, Buckets: 4})
	msgs := r.messages(plan{Users: 300})
	var all []*msg
	type storm struct{ copies []*msg }
	var storms []storm
	for i, m := range msgs {
		s := storm{}
		for range copies {
			s.copies = append(s.copies, m)
		}
		all = append(all, m)
		if i%10 == 0 {
			re := resend(m)
			s.copies = append(s.copies, re)
			all = append(all, re)
		}
		storms = append(storms, s)
	}
	stopRelays := r.startRelays(r.admin, 2, outbox.RelayConfig{})

	deliveries := 0
	for start := 0; start < len(storms); start += wave {
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for _, s := range storms[start:min(start+wave, len(storms))] {
			for _, c := range s.copies {
				deliveries++
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-gate // all copies of the wave at once
					for attempt := 1; ; attempt++ {
						out, err := r.svc.PlaceOrder(r.ctx, c.ID, c.Body)
						if err == nil {
							r.ack(c, out)
							return
						}
						r.nack(c, err)
						if r.ctx.Err() != nil {
							return
						}
						time.Sleep(backoff(attempt)) // the broker's redelivery delay
					}
				}()
			}
		}
		close(gate)
		wg.Wait()
	}
	r.drain()
	stopRelays()

	r.logErrors()
	fresh := map[string]int{}
	r.mu.Lock()
	for _, m := range all {
		acks := r.acks[m.ID]
		want := copies
		if m != msgs[0] && r.byOrder[m.M.OrderID] != m { // a re-send: delivered once
			want = 1
		}
		n := 0
		for _, a := range acks {
			if !a.Duplicate {
				n++
				fresh[a.Code]++
			}
		}
		if n != 1 || len(acks) != want {
			t.Errorf("message %s: %d acknowledgements, %d of them not duplicates; want %d and 1", m.ID, len(acks), n, want)
		}
	}
	r.mu.Unlock()
	t.Logf("%d deliveries of %d message ids (%d reservations): one effect each, first answers %v", deliveries, len(all), len(msgs), fresh)
	if got := r.count(`SELECT count(*) FROM %s.orders`); got != int64(len(msgs)) {
		t.Errorf("%d orders for %d reservations", got, len(msgs))
	}
	r.assertExactlyOnce(all)
	r.assertAllPublished()
	r.assertAudit()
}
