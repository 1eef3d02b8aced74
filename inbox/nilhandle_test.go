package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckillkit/seckill/inbox"
)

// Every method that takes a transaction or connection rejects a nil one
// with a typed error instead of panicking.
func TestNilHandleIsATypedError(t *testing.T) {
	t.Parallel()
	in, err := inbox.New(inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	calls := map[string]func() error{
		"ClaimMessage": func() error { _, err := in.ClaimMessage(ctx, nil, inbox.Message{}); return err },
		"ClaimMessage with a result": func() error {
			_, err := in.ClaimMessage(ctx, nil, withResult(inbox.Message{}, inbox.Result{}))
			return err
		},
		"Lookup":   func() error { _, err := in.Lookup(ctx, nil, inbox.Key{}); return err },
		"Complete": func() error { return in.Complete(ctx, nil, inbox.Key{}, inbox.Result{}) },
		"Purge":    func() error { _, err := in.Purge(ctx, nil, time.Now(), 1); return err },
	}
	for name, call := range calls {
		var ve *inbox.Error
		if err := call(); !errors.Is(err, inbox.ErrInvalidArgument) || !errors.As(err, &ve) || (ve.Field != "tx" && ve.Field != "db" && ve.Field != "q") {
			t.Errorf("%s(nil): %v", name, err)
		}
	}
}
