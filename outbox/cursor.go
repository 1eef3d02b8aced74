package outbox

import (
	"bytes"
	"time"

	"github.com/google/uuid"
)

// cursorRescan bounds how long a relay claims from its cursor before it
// claims from the head of idx_outbox_ready again.
const cursorRescan = time.Second

// claimCursor is where a relay's next claim starts in idx_outbox_ready
// (available_at, created_at, event_id).
//
// Every claimed event leaves a dead entry at the head of the index: the
// claim moves the row out of the partial index, and the entry stays until
// VACUUM. A claim from the head walks over every entry the relays claimed
// before it, so draining a large backlog slows down as it goes (draining
// 100,000 of a 200,000-event backlog made the head scan six times as many
// buffers). A relay therefore starts each claim after the last key it
// claimed, while its claims come back full (a backlog). It claims from the
// head again when a claim comes back short (it reached the end of what is
// ready), and at least every cursorRescan, so that an event behind the
// cursor waits at most that long: an event whose transaction committed
// after later-stamped ones (available_at is the enqueuing statement's
// time, not its commit's), or the next event of an ordering key whose head
// another relay held.
//
// An ordered event's successor becomes claimable once the event is SENT,
// and usually sorts after it: the cursor stops at the first ordered event
// of a claim, so the next claim sees its successor.
type claimCursor struct {
	set                    bool
	availableAt, createdAt time.Time
	eventID                uuid.UUID
	headAt                 time.Time // the last claim from the head
}

// key orders claimed events as idx_outbox_ready does.
func cursorCompare(aAvail, aCreated time.Time, aID uuid.UUID, bAvail, bCreated time.Time, bID uuid.UUID) int {
	if c := aAvail.Compare(bAvail); c != 0 {
		return c
	}
	if c := aCreated.Compare(bCreated); c != 0 {
		return c
	}
	return bytes.Compare(aID[:], bID[:])
}

// advance moves the cursor past the claimed msgs: to the greatest key, or
// to the least key of an ordered event among them.
func (c *claimCursor) advance(msgs []Message) {
	var last *Message
	ordered := false
	for i := range msgs {
		m := &msgs[i]
		if m.OrderingKey != "" {
			if !ordered || cursorCompare(m.AvailableAt, m.CreatedAt, m.EventID, last.AvailableAt, last.CreatedAt, last.EventID) < 0 {
				last, ordered = m, true
			}
			continue
		}
		if !ordered && (last == nil || cursorCompare(m.AvailableAt, m.CreatedAt, m.EventID, last.AvailableAt, last.CreatedAt, last.EventID) > 0) {
			last = m
		}
	}
	if last == nil {
		return
	}
	c.set, c.availableAt, c.createdAt, c.eventID = true, last.AvailableAt, last.CreatedAt, last.EventID
}

// next decides where the claim after one of n events (of a batch size
// limit) starts: after the cursor while claims come back full and the last
// claim from the head is recent, from the head otherwise.
func (c *claimCursor) next(n, limit int, now time.Time) {
	if n < limit || now.Sub(c.headAt) >= cursorRescan {
		c.set = false
	}
}

// fromHead records that a claim is about to start from the head.
func (c *claimCursor) fromHead(now time.Time) {
	if !c.set {
		c.headAt = now
	}
}
