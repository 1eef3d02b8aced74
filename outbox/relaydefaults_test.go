package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seckillkit/seckill/outbox"
)

// TestRelayDefaults: NewRelay fills in the documented defaults of
// RelayConfig (RecoverInterval half the lease, MaxPollInterval at least
// PollInterval, the owner the host name, the process id and a random
// suffix), and BatchSize is accepted from 1 to 2,147,483,647 (the claim's
// int4 limit) and refused past it with ErrInvalidArgument on its field.
func TestRelayDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	pub := func(context.Context, []outbox.Message) []error { return nil }
	newRelay := func(cfg outbox.RelayConfig) outbox.RelayConfig {
		t.Helper()
		cfg.Publish, cfg.Store = pub, b.store
		r, err := outbox.NewRelay(b.pool, cfg)
		if err != nil {
			t.Fatalf("NewRelay(%+v): %v", cfg, err)
		}
		return outbox.RelayConfigOf(r)
	}
	got := newRelay(outbox.RelayConfig{})
	if got.BatchSize != 100 || got.PollInterval != 100*time.Millisecond || got.MaxPollInterval != 5*time.Second ||
		got.Lease != 30*time.Second || got.RecoverInterval != 15*time.Second || got.ShutdownTimeout != 10*time.Second ||
		got.Backoff == nil {
		t.Fatalf("defaults: %+v", got)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if prefix := fmt.Sprintf("%s-%d-", host, os.Getpid()); !strings.HasPrefix(got.Owner, prefix) || len(got.Owner) != len(prefix)+8 {
		t.Fatalf("default owner %q, want %q and 8 hex digits", got.Owner, prefix)
	}
	got = newRelay(outbox.RelayConfig{Lease: 10 * time.Second, PollInterval: 7 * time.Second})
	if got.RecoverInterval != 5*time.Second || got.MaxPollInterval != 7*time.Second {
		t.Fatalf("Lease 10s, PollInterval 7s: RecoverInterval %v (want 5s), MaxPollInterval %v (want 7s)", got.RecoverInterval, got.MaxPollInterval)
	}
	if got := newRelay(outbox.RelayConfig{BatchSize: 1<<31 - 1}); got.BatchSize != 1<<31-1 {
		t.Fatalf("BatchSize 2147483647 became %d", got.BatchSize)
	}
	_, err = outbox.NewRelay(b.pool, outbox.RelayConfig{Publish: pub, Store: b.store, BatchSize: 1 << 31})
	var e *outbox.Error
	if !errors.As(err, &e) || !errors.Is(err, outbox.ErrInvalidArgument) || e.Field != "RelayConfig.BatchSize" {
		t.Fatalf("BatchSize 2^31: %v, want ErrInvalidArgument on RelayConfig.BatchSize", err)
	}
}

// TestOwnerIDFitsItsColumn: the default owner is the host name, the
// process id and 4 random bytes in hex; a host name too long for
// locked_by (128 bytes with the rest) is cut to fit, one that fits
// exactly is kept whole.
func TestOwnerIDFitsItsColumn(t *testing.T) {
	t.Parallel()
	rnd := []byte{0xde, 0xad, 0xbe, 0xef}
	if got := outbox.OwnerID("db-7", 42, rnd); got != "db-7-42-deadbeef" {
		t.Fatalf("owner %q", got)
	}
	suffix := "-42-deadbeef"
	exact := strings.Repeat("h", outbox.MaxOwnerLen-len(suffix))
	if got := outbox.OwnerID(exact, 42, rnd); got != exact+suffix {
		t.Fatalf("host of %d bytes: owner %q (%d bytes), want it whole", len(exact), got, len(got))
	}
	if got := outbox.OwnerID(exact+"xyz", 42, rnd); got != exact+suffix {
		t.Fatalf("host of %d bytes: owner %q (%d bytes), want it cut to %d bytes", len(exact)+3, got, len(got), outbox.MaxOwnerLen)
	}
	if got := outbox.OwnerID(strings.Repeat("h", 300), 42, rnd); len(got) != outbox.MaxOwnerLen || !strings.HasSuffix(got, suffix) {
		t.Fatalf("host of 300 bytes: owner of %d bytes", len(got))
	}
}
