// Package testwait gives every wait of this module's tests a deadline of
// its own, far below the package timeout (go test's default is ten
// minutes): a test whose awaited event never happens — a broken guard, a
// relay that never wakes up, a lock that is never released — fails within
// seconds, naming what it waited for, instead of hanging until the whole
// package is killed. For tests only.
package testwait

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Step is the deadline of one wait: a channel receive, a WaitGroup, a
// polling loop or a statement expected to block and then return.
const Step = 30 * time.Second

// Long is the deadline of a wait for a whole concurrent workload (hundreds
// of transactions) on a slow, shared machine.
const Long = 60 * time.Second

// Context returns a context that ends after d, or when parent ends, or
// when the test ends.
func Context(t testing.TB, parent context.Context, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(parent, d)
	t.Cleanup(cancel)
	return ctx
}

// Recv receives one value from ch within [Step]; otherwise it fails t,
// saying that what did not happen.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	return RecvWithin(t, ch, Step, what)
}

// RecvWithin is [Recv] with the deadline d.
func RecvWithin[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("%s: not within %v", what, d)
	}
	var zero T
	return zero
}

// Wait waits for wg within [Step]; otherwise it fails t, saying that what
// did not finish.
func Wait(t testing.TB, wg *sync.WaitGroup, what string) {
	t.Helper()
	WaitWithin(t, wg, Step, what)
}

// WaitWithin is [Wait] with the deadline d.
func WaitWithin(t testing.TB, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	RecvWithin(t, done, d, what)
}

// Within waits for wg for at most d and reports whether it finished: for
// a goroutine that must not call t.Fatal (a barrier inside a transaction
// function), which turns false into an error of its own.
func Within(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
		return false
	}
}
