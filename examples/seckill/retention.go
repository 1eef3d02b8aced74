package main

import (
	"context"
	"fmt"
	"time"

	"github.com/seckillkit/seckill/inbox"
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

// inboxRetention is the minimum retention of the inbox for the streams it
// consumes, read from the server: the longest MaxAge plus that stream's
// duplicate window (a publisher that resends with the same Nats-Msg-Id
// after the window is no longer deduplicated by the stream), plus repair.
// A row younger than that may meet its message again; an inbox row purged
// or archived earlier lets the message be processed twice. A stream
// without MaxAge keeps its messages for ever: no horizon is safe, and
// that is an error.
func (j *jsStack) inboxRetention(ctx context.Context, repair time.Duration) (time.Duration, error) {
	var longest time.Duration
	for _, name := range []string{j.orderStream, j.eventStream} {
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

// guardInboxRetention gives the service's inbox the minimum retention of
// the real stack's streams: from then on inbox.Purge and inbox.Archive
// refuse a horizon inside the replay window (a *inbox.Error matching inbox.ErrRetentionTooShort).
func (s *service) guardInboxRetention(ctx context.Context, citus bool) error {
	minRet, err := s.js.inboxRetention(ctx, s.js.cfg.RepairTime)
	if err != nil {
		return err
	}
	in, err := inbox.New(inbox.Config{Schema: s.Service.Schema, Citus: citus, MinRetention: minRet})
	if err != nil {
		return err
	}
	s.Service.Inbox = in
	return nil
}
