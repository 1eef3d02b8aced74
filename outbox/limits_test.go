package outbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/outbox"
)

// TestClaimLimitEdges: a claim's limit is a positive int4, both ends
// inclusive: 1 and 2,147,483,647 are accepted, 0 and 2,147,483,648 are
// refused with ErrInvalidArgument before anything is sent.
func TestClaimLimitEdges(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	for _, limit := range []int{1, 1<<31 - 1} {
		if _, err := b.store.ClaimOutboxBatch(b.ctx, b.pool, "edge", limit); err != nil {
			t.Fatalf("limit %d: %v, want accepted", limit, err)
		}
	}
	for _, limit := range []int{0, -1, 1 << 31} {
		var e *outbox.Error
		if _, err := b.store.ClaimOutboxBatch(b.ctx, b.pool, "edge", limit); !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &e) || e.Field != "limit" {
			t.Fatalf("limit %d: %v, want ErrInvalidArgument on limit", limit, err)
		}
	}
}

// TestCursorOrder: the claim cursor orders events as idx_outbox_ready
// does: available_at, then created_at, then event id, each deciding only
// when the ones before it tie.
func TestCursorOrder(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Microsecond)
	lo, hi := uuid.MustParse("00000000-0000-7000-8000-000000000001"), uuid.MustParse("00000000-0000-7000-8000-000000000002")
	for _, c := range []struct {
		name             string
		aAvail, aCreated time.Time
		aID              uuid.UUID
		bAvail, bCreated time.Time
		bID              uuid.UUID
		want             int
	}{
		{"available first", t0, t1, hi, t1, t0, lo, -1},
		{"created when available ties", t0, t0, hi, t0, t1, lo, -1},
		{"created when available ties, reversed", t0, t1, lo, t0, t0, hi, 1},
		{"id when both tie", t0, t0, lo, t0, t0, hi, -1},
		{"the same key", t0, t0, lo, t0, t0, lo, 0},
	} {
		if got := outbox.CursorCompare(c.aAvail, c.aCreated, c.aID, c.bAvail, c.bCreated, c.bID); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestPurgeAndRecoverLimitEdges: PurgeSent's batch size and Recover's limit
// are positive int4s too, both ends inclusive.
func TestPurgeAndRecoverLimitEdges(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	calls := map[string]func(n int) error{
		"batchSize": func(n int) error {
			_, err := b.store.PurgeSent(b.ctx, b.pool, time.Now().Add(-time.Hour), n)
			return err
		},
		"limit": func(n int) error {
			_, err := b.store.Recover(b.ctx, b.pool, outbox.Lease{}, time.Minute, n)
			return err
		},
	}
	for field, call := range calls {
		for _, n := range []int{1, 1<<31 - 1} {
			if err := call(n); err != nil {
				t.Fatalf("%s %d: %v, want accepted", field, n, err)
			}
		}
		for _, n := range []int{0, -1, 1 << 31} {
			var e *outbox.Error
			if err := call(n); !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &e) || e.Field != field {
				t.Fatalf("%s %d: %v, want ErrInvalidArgument on %s", field, n, err, field)
			}
		}
	}
}

// TestChannelNameLength: the channel is seckill_outbox_<schema> up to
// PostgreSQL's 63-byte identifier limit, the limit included; past it, the
// schema's hash stands for it.
func TestChannelNameLength(t *testing.T) {
	t.Parallel()
	for _, n := range []int{48, 49} {
		schema := strings.Repeat("s", n)
		s, err := outbox.New(outbox.Config{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		ch := outbox.Channel(s)
		if len(ch) > 63 {
			t.Fatalf("schema of %d bytes: channel %q is %d bytes, over 63", n, ch, len(ch))
		}
		if plain := ch == "seckill_outbox_"+schema; plain != (n == 48) {
			t.Fatalf("schema of %d bytes: channel %q; want the schema itself up to 63 bytes in all, its hash past that", n, ch)
		}
	}
}
