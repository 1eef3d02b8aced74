package outbox

import "github.com/seckillkit/seckill/internal/enum"

// Status is the state of an event_outbox row. The values mirror the CHECK
// constraint ck_outbox_status one to one.
type Status int16

// The statuses of an outbox event.
const (
	// StatusPending: enqueued, not yet claimed. Claimable once available_at
	// has passed.
	StatusPending Status = 0
	// StatusSending: claimed by a relay (locked_by, locked_at set) and
	// being published. Returns to StatusRetry when its lease expires.
	StatusSending Status = 10
	// StatusSent: published and acknowledged by the broker. Terminal.
	StatusSent Status = 20
	// StatusRetry: a publish failed (or a lease expired, or a relay
	// released it); claimable again once available_at has passed.
	StatusRetry Status = 30
	// StatusDead: failed max_retry times. Terminal; needs an operator
	// (inspect last_error, then fix or delete the row).
	StatusDead Status = 40
)

// String returns the status name ("PENDING", "SENDING", …)
// or "Status(n)" for an unknown value.
func (s Status) String() string { return statusSet.Name(s) }

var statusSet = enum.New("Status", map[Status]string{
	StatusPending: "PENDING", StatusSending: "SENDING", StatusSent: "SENT",
	StatusRetry: "RETRY", StatusDead: "DEAD",
})
