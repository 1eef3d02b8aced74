package orderid_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckillkit/seckill/examples/internal/orderid"
)

func TestOrderIDLayout(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 12, 0, 0, 123e6, time.UTC)
	lo := orderid.At(at, 0)
	hi := orderid.At(at, 1<<22-1)
	next := orderid.At(at.Add(time.Millisecond), 0)
	if lo <= 0 || hi-lo != 1<<22-1 || next != hi+1 {
		t.Fatalf("layout: lo %d hi %d next %d", lo, hi, next)
	}
	if got := orderid.Time(hi); !got.Equal(at) {
		t.Fatalf("Time = %v, want %v", got, at)
	}
	if id := orderid.At(time.Date(2093, 1, 1, 0, 0, 0, 0, time.UTC), 1<<22-1); id <= 0 {
		t.Fatalf("id in 2093 not positive: %d", id)
	}
	no := orderid.FormatNo(hi)
	if len(no) > 40 || no[:10] != "SK20261130" {
		t.Fatalf("FormatNo = %q", no)
	}
	before := time.Now().Add(-time.Millisecond)
	id := orderid.New()
	if got := orderid.Time(id); got.Before(before.Truncate(time.Millisecond)) || got.After(time.Now()) {
		t.Fatalf("New time %v, now %v", got, time.Now())
	}
}

func TestIDGeneratorUniqueAndIncreasing(t *testing.T) {
	t.Parallel()
	var g orderid.Generator
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
	if d := time.Since(orderid.Time(ids[0][each-1])); d < -time.Second || d > time.Minute {
		t.Fatalf("generator drifted from the clock by %v", d)
	}
}

// FuzzLayout: for any positive id, Time gives back the
// millisecond in the id's high bits (at or after the epoch), and
// FormatNo is "SK" + that UTC date + the id in decimal — so the id
// can be parsed back — within the column's 40 characters.
func FuzzLayout(f *testing.F) {
	for _, id := range []int64{1, 1<<22 - 1, 1 << 22, orderid.New(), 1<<63 - 1, 385781806788462873} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id int64) {
		if id <= 0 {
			return // not an order id (NewOrder.OrderID > 0)
		}
		ts := orderid.Time(id)
		ms := ts.UnixMilli() - orderid.EpochUnixMilli
		if ms < 0 || ms != id>>22 || ts.Location() != time.UTC {
			t.Fatalf("Time(%d) = %v (ms %d), want ms %d UTC", id, ts, ms, id>>22)
		}
		if back := ms<<22 | id&(1<<22-1); back != id {
			t.Fatalf("layout round trip: %d → %d", id, back)
		}
		no := orderid.FormatNo(id)
		if len(no) > 40 || !strings.HasPrefix(no, "SK"+ts.Format("20060102")) {
			t.Fatalf("FormatNo(%d) = %q", id, no)
		}
		if back, err := strconv.ParseInt(no[10:], 10, 64); err != nil || back != id {
			t.Fatalf("FormatNo(%d) = %q does not parse back (%d, %v)", id, no, back, err)
		}
		if orderid.FormatNo(id) != no {
			t.Fatal("FormatNo is not deterministic")
		}
	})
}
