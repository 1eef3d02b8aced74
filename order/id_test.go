package order_test

import (
	"sync"
	"testing"
	"time"

	"github.com/seckillkit/seckill/order"
)

func TestOrderIDLayout(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 12, 0, 0, 123e6, time.UTC)
	lo := order.OrderIDAt(at, 0)
	hi := order.OrderIDAt(at, 1<<22-1)
	next := order.OrderIDAt(at.Add(time.Millisecond), 0)
	if lo <= 0 || hi-lo != 1<<22-1 || next != hi+1 {
		t.Fatalf("layout: lo %d hi %d next %d", lo, hi, next)
	}
	if got := order.OrderIDTime(hi); !got.Equal(at) {
		t.Fatalf("OrderIDTime = %v, want %v", got, at)
	}
	if id := order.OrderIDAt(time.Date(2093, 1, 1, 0, 0, 0, 0, time.UTC), 1<<22-1); id <= 0 {
		t.Fatalf("id in 2093 not positive: %d", id)
	}
	no := order.FormatOrderNo(hi)
	if len(no) > 40 || no[:10] != "SK20261130" {
		t.Fatalf("FormatOrderNo = %q", no)
	}
	before := time.Now().Add(-time.Millisecond)
	id := order.NewOrderID()
	if got := order.OrderIDTime(id); got.Before(before.Truncate(time.Millisecond)) || got.After(time.Now()) {
		t.Fatalf("NewOrderID time %v, now %v", got, time.Now())
	}
}

func TestIDGeneratorUniqueAndIncreasing(t *testing.T) {
	t.Parallel()
	var g order.IDGenerator
	const workers, each = 8, 20000
	ids := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				ids[w] = append(ids[w], g.Next())
			}
		}()
	}
	wg.Wait()
	seen := make(map[int64]bool, workers*each)
	for w := range ids {
		for i, id := range ids[w] {
			if id <= 0 || seen[id] {
				t.Fatalf("id %d repeated or not positive", id)
			}
			if i > 0 && id <= ids[w][i-1] {
				t.Fatalf("ids of one goroutine not increasing: %d after %d", id, ids[w][i-1])
			}
			seen[id] = true
		}
	}
	if d := time.Since(order.OrderIDTime(ids[0][each-1])); d < -time.Second || d > time.Minute {
		t.Fatalf("generator drifted from the clock by %v", d)
	}
}
