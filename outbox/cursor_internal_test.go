package outbox

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestClaimCursorNext: a relay claims after its cursor only while claims
// come back full and its last claim from the head is recent.
func TestClaimCursorNext(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	msg := func(sec int, key string) Message {
		return Message{AvailableAt: t0.Add(time.Duration(sec) * time.Second), CreatedAt: t0, EventID: uuid.New(), OrderingKey: key}
	}
	var c claimCursor
	c.fromHead(t0)
	c.advance([]Message{msg(3, ""), msg(1, ""), msg(2, "")})
	if c.next(100, 100, t0.Add(time.Millisecond)); !c.set || !c.availableAt.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("after a full claim: %+v, want the greatest key", c)
	}
	c.fromHead(t0.Add(2 * time.Millisecond)) // from the cursor: headAt stays
	if c.next(100, 100, t0.Add(cursorRescan)); c.set {
		t.Fatalf("%v after the last claim from the head: still after the cursor", cursorRescan)
	}
	c.fromHead(t0.Add(cursorRescan))
	c.advance([]Message{msg(5, ""), msg(7, "k"), msg(6, "k"), msg(9, "")})
	if c.next(4, 4, t0.Add(cursorRescan)); !c.set || !c.availableAt.Equal(t0.Add(6*time.Second)) {
		t.Fatalf("claim with ordered events: %+v, want the least ordered key", c)
	}
	if c.next(3, 4, t0.Add(cursorRescan)); c.set {
		t.Fatal("a short claim keeps the cursor")
	}
	c.advance(nil)
	if c.set {
		t.Fatal("an empty claim set the cursor")
	}
}
