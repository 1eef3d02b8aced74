package outbox_test

import (
	"errors"
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
