package broker

import (
	"context"
	"fmt"
	"time"
)

// Defaults of the broker's retention, which bounds the inbox's.
const (
	// defaultStreamMaxAge is the streams' MaxAge: how long JetStream keeps
	// (and so may redeliver, or replay to a new consumer) a message.
	defaultStreamMaxAge = 7 * 24 * time.Hour
	// defaultRepairTime is the time a compensation or a manual repair may
	// take to resend a message after the broker stopped holding it.
	defaultRepairTime = 24 * time.Hour
)

// InboxRetention is the minimum retention of the inbox for the streams it
// consumes, read from the server: the longest MaxAge plus that stream's
// duplicate window (a publisher that resends with the same Nats-Msg-Id
// after the window is no longer deduplicated by the stream), plus the
// configured RepairTime.
// A row younger than that may meet its message again; an inbox row purged
// or archived earlier lets the message be processed twice. A stream
// without MaxAge keeps its messages for ever: no horizon is safe, and
// that is an error.
func (j *JetStream) InboxRetention(ctx context.Context) (time.Duration, error) {
	repair := j.cfg.RepairTime
	var longest time.Duration
	for _, name := range []string{j.OrderStream, j.EventStream} {
		st, err := j.js.Stream(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("jetstream: stream %s: %w", name, err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("jetstream: stream %s: %w", name, err)
		}
		if info.Config.MaxAge <= 0 {
			return 0, fmt.Errorf("jetstream: stream %s keeps messages for ever (no MaxAge): no inbox retention is safe", name)
		}
		longest = max(longest, info.Config.MaxAge+info.Config.Duplicates)
	}
	return longest + repair, nil
}
