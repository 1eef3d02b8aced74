package main

import (
	"context"

	"github.com/seckillkit/seckill/inbox"
)

// guardInboxRetention gives the service's inbox the minimum retention of
// the real stack's streams: from then on inbox.Purge and inbox.Archive
// refuse a horizon inside the replay window (a *inbox.Error matching inbox.ErrRetentionTooShort).
func (s *service) guardInboxRetention(ctx context.Context, citus bool) error {
	minRet, err := s.js.InboxRetention(ctx)
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
