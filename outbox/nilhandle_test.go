package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckillkit/seckill/outbox"
)

// Every method that takes a transaction or connection rejects a nil one
// with a typed error instead of panicking.
func TestNilHandleIsATypedError(t *testing.T) {
	t.Parallel()
	s, err := outbox.New(outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var l outbox.Lease
	calls := map[string]func() error{
		"ClaimOutboxBatch": func() error { _, err := s.ClaimOutboxBatch(ctx, nil, "r", 1); return err },
		"MarkSent":         func() error { _, err := s.Mark(ctx, nil, outbox.Outcome{Lease: l, Sent: nil}); return err },
		"Release":          func() error { _, err := s.Mark(ctx, nil, outbox.Outcome{Lease: l, Released: nil}); return err },
		"MarkFailed":       func() error { _, err := s.Mark(ctx, nil, outbox.Outcome{Lease: l, Failed: nil}); return err },
		"RecoverExpired":   func() error { _, err := s.Recover(ctx, nil, outbox.Lease{}, time.Second, 1); return err },
		"RecoverLease":     func() error { _, err := s.Recover(ctx, nil, l, time.Second, 1000); return err },
		"EnqueueMany":      func() error { _, err := s.Enqueue(ctx, nil, nil...); return err },
		"Enqueue":          func() error { _, err := s.Enqueue(ctx, nil, outbox.Event{}); return err },
		"EventsByStatus":   func() error { _, err := s.EventsByStatus(ctx, nil, ""); return err },
		"Stats":            func() error { _, err := s.Stats(ctx, nil); return err },
		"PurgeSent":        func() error { _, err := s.PurgeSent(ctx, nil, time.Now(), 1); return err },
	}
	for name, call := range calls {
		var ve *outbox.Error
		if err := call(); !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &ve) || (ve.Field != "tx" && ve.Field != "db" && ve.Field != "q") {
			t.Errorf("%s(nil): %v", name, err)
		}
	}
}
