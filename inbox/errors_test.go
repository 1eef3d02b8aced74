package inbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/inbox"
)

// TestErrorText: every refusal's text names the message, the rows and the
// figures a reader needs, and the error matches its sentinel.
func TestErrorText(t *testing.T) {
	t.Parallel()
	key := inbox.Key{Group: "orders", MessageID: uuid.MustParse("01a23b56-dcc1-7405-a7eb-acc394f14be0")}
	horizon := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		err  *inbox.Error
		want string
	}{
		{&inbox.Error{Err: inbox.ErrPayloadMismatch, Key: key, Given: []byte{0xab, 0xcd}, Record: inbox.Record{PayloadHash: []byte{0x01}}},
			`inbox: message 01a23b56-dcc1-7405-a7eb-acc394f14be0 in group "orders": payload hash abcd differs from stored 01`},
		{&inbox.Error{Err: inbox.ErrPayloadMismatch, Key: key, Record: inbox.Record{PayloadHash: []byte{0x01}}},
			`inbox: message 01a23b56-dcc1-7405-a7eb-acc394f14be0 in group "orders": payload hash (none) differs from stored 01`},
		{&inbox.Error{Err: inbox.ErrRetentionTooShort, Op: "purge", OlderThan: horizon, Age: 90 * time.Minute, MinRetention: 7 * 24 * time.Hour},
			`inbox: purge: horizon 2026-12-01T10:00:00Z is 1h30m0s old, younger than the minimum retention 168h0m0s (Config.MinRetention: the broker's replay window plus compensation and repair time)`},
		{&inbox.Error{Err: inbox.ErrAlreadyCompleted, Op: "complete", Key: key, Record: inbox.Record{Status: inbox.StatusProcessed}},
			`inbox: complete message 01a23b56-dcc1-7405-a7eb-acc394f14be0 in group "orders": row is ` + inbox.StatusProcessed.String()},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
		if !errors.Is(c.err, c.err.Err) {
			t.Errorf("%v does not match its sentinel %v", c.err, c.err.Err)
		}
	}
}
