package testwait

import (
	"sync"
	"testing"
	"time"
)

// TestWithin: a WaitGroup that finishes is reported done, one that never
// does is reported not done once the deadline passed.
func TestWithin(t *testing.T) {
	t.Parallel()
	var done sync.WaitGroup
	done.Add(1)
	go done.Done()
	if !Within(&done, Step) {
		t.Fatal("a finished WaitGroup reported not done")
	}
	var stuck sync.WaitGroup
	stuck.Add(1)
	defer stuck.Done()
	if Within(&stuck, 10*time.Millisecond) {
		t.Fatal("a stuck WaitGroup reported done")
	}
}

// TestRecvWithin returns the value sent.
func TestRecvWithin(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 1)
	ch <- 7
	if v := Recv(t, ch, "the value"); v != 7 {
		t.Fatalf("got %d, want 7", v)
	}
}
