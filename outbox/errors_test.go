package outbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/outbox"
)

// TestErrorText: a lost lease names the owner, how many events were lost
// and the first three with what happened to each; invalid input names the
// field and the reason. Both match their sentinel.
func TestErrorText(t *testing.T) {
	t.Parallel()
	id := func(n byte) uuid.UUID { return uuid.UUID{15: n} }
	lost := &outbox.Error{Err: outbox.ErrLeaseLost, Lease: outbox.Lease{Owner: "relay-1"}, Lost: []outbox.LostEvent{
		{EventID: id(1), Exists: false},
		{EventID: id(2), Exists: true, Status: outbox.StatusSending, LockedBy: "relay-2"},
		{EventID: id(3), Exists: true, Status: outbox.StatusSent},
		{EventID: id(4), Exists: true, Status: outbox.StatusRetry},
	}}
	want := `outbox: lease lost for 4 event(s) of owner "relay-1"; ` + id(1).String() + `: not found; ` +
		id(2).String() + `: ` + outbox.StatusSending.String() + ` by "relay-2"; ` +
		id(3).String() + `: ` + outbox.StatusSent.String() + `, …`
	if got := lost.Error(); got != want {
		t.Errorf("lost lease: Error() = %q, want %q", got, want)
	}
	if !errors.Is(lost, outbox.ErrLeaseLost) {
		t.Errorf("%v does not match ErrLeaseLost", lost)
	}
	invalid := &outbox.Error{Err: outbox.ErrInvalidArgument, Field: "Event.Topic", Reason: "empty"}
	if got := invalid.Error(); got != "outbox: invalid Event.Topic: empty" {
		t.Errorf("invalid input: Error() = %q", got)
	}
	if !errors.Is(invalid, outbox.ErrInvalidArgument) {
		t.Errorf("%v does not match ErrInvalidArgument", invalid)
	}
}

// TestDefaultBackoff: 1 s after the first failure, doubling, at most 5
// minutes, each within ±20%.
func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		attempt int
		base    time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {9, 256 * time.Second}, {10, 5 * time.Minute}, {100, 5 * time.Minute}} {
		for range 50 {
			d := outbox.DefaultBackoff(c.attempt)
			if lo, hi := c.base*8/10, c.base*12/10; d < lo || d > hi {
				t.Fatalf("DefaultBackoff(%d) = %v, want within [%v, %v]", c.attempt, d, lo, hi)
			}
		}
	}
}
