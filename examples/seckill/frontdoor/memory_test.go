package frontdoor

import (
	"context"
	"sync/atomic"
	"testing"
)

// TestMemoryCounters: the in-memory front door's cheap read agrees with
// its whole one through reserves, a release and drift.
func TestMemoryCounters(t *testing.T) {
	ctx := context.Background()
	var next atomic.Int64
	f := NewMemory([]int32{2, 2}, func() int64 { return next.Add(1) })
	countersAgree(t, ctx, f)
	a, err := f.Reserve(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reserve(ctx, 2); err != nil {
		t.Fatal(err)
	}
	countersAgree(t, ctx, f)
	if got, err := f.Release(ctx, a.ReservationID, 0); err != nil || got != Released {
		t.Fatalf("release: %v, %v", got, err)
	}
	if err := f.AddDrift(ctx, 3); err != nil {
		t.Fatal(err)
	}
	countersAgree(t, ctx, f)
	if c, _ := f.Counters(ctx); c.Held != 1 || c.Available[0]+c.Available[1] != 6 {
		t.Fatalf("counters %+v: want 1 held, 6 available (3 left of 4, and 3 of drift)", c)
	}
}
