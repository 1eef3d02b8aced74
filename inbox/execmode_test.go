package inbox_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/pgtx"
)

// TestQueryExecModes runs every statement of the package through pools in
// the query exec modes where pgx does not learn parameter types from the
// server (exec, simple_protocol: what PgBouncer in transaction mode needs)
// or encodes from a cached description (cache_describe).
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	for _, mode := range pgtest.ExecModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.pool = pgtest.NewPool(t, pgtest.WithExecMode(mode))

			// Hashes with every byte value, a payload with quotes,
			// backslashes and non-ASCII text.
			hash := make([]byte, 64)
			for i := range hash {
				hash[i] = byte(i * 4)
			}
			payload := json.RawMessage(`{"note": "O'Brien \"ü\" \\ x", "n": [1, 2.5, null]}`)
			a, c, d := newMessage("g'1"), newMessage("g'1"), newMessage("g'1")
			a.PayloadHash, a.Ref = hash, "ref-ü"
			d.PayloadHash = nil
			res := inbox.Result{Code: "DONE", Payload: payload}

			var ca, cc, cd inbox.Claim
			b.inTx(t, func(tx pgx.Tx) error {
				var err error
				if ca, err = b.in.ClaimMessage(b.ctx, tx, a); err != nil {
					return err
				}
				if err := b.in.Complete(b.ctx, tx, a.Key(), res); err != nil {
					return err
				}
				batch := &pgx.Batch{}
				if err := b.in.QueueClaimMessage(batch, c, &cc, pgtx.Return); err != nil {
					return err
				}
				if err := b.in.QueueComplete(batch, c.Key(), inbox.Result{Code: "C"}); err != nil {
					return err
				}
				if err := b.in.QueueClaimMessage(batch, withResult(d, res), &cd, pgtx.Return); err != nil {
					return err
				}
				return tx.SendBatch(b.ctx, batch).Close()
			})
			if !ca.Fresh || !cc.Fresh || !cd.Fresh || cd.Record.Status != inbox.StatusProcessed {
				t.Fatalf("claims = %+v, %+v, %+v; want all fresh, the last one processed", ca, cc, cd)
			}

			var dup, dupRes inbox.Claim
			b.inTx(t, func(tx pgx.Tx) error {
				var err error
				if dup, err = b.in.ClaimMessage(b.ctx, tx, a); err != nil {
					return err
				}
				dupRes, err = b.in.ClaimMessage(b.ctx, tx, withResult(d, inbox.Result{Code: "OTHER"}))
				return err
			})
			r := dup.Record
			if dup.Fresh || r.Status != inbox.StatusProcessed || r.Result.Code != "DONE" ||
				!pgtest.JSONSame(t, r.Result.Payload, payload) || !bytes.Equal(r.PayloadHash, hash) || r.Key != a.Key() {
				t.Fatalf("duplicate claim = %+v, want the stored result", dup)
			}
			if dupRes.Fresh || dupRes.Record.Result.Code != "DONE" || dupRes.Record.PayloadHash != nil {
				t.Fatalf("duplicate claim with result = %+v", dupRes)
			}

			// A redelivery with another hash is a mismatch, the row stays.
			other := a
			other.PayloadHash = []byte{0, '\\', 'x'}
			err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				_, err := b.in.ClaimMessage(b.ctx, tx, other)
				return err
			})
			var mm *inbox.Error
			if !errors.Is(err, inbox.ErrPayloadMismatch) || !errors.As(err, &mm) || !bytes.Equal(mm.Record.PayloadHash, hash) {
				t.Fatalf("claim with another hash = %v, want a PayloadMismatchError with the stored hash", err)
			}
			// Completing twice is a state error.
			err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				return b.in.Complete(b.ctx, tx, c.Key(), inbox.Result{Code: "C"})
			})
			if !errors.Is(err, inbox.ErrAlreadyCompleted) {
				t.Fatalf("second Complete = %v, want ErrAlreadyCompleted", err)
			}

			rec, err := b.in.Lookup(b.ctx, b.pool, c.Key())
			if err != nil || rec.Result.Code != "C" || rec.Result.Payload != nil || rec.Status != inbox.StatusProcessed {
				t.Fatalf("Lookup = %+v, %v", rec, err)
			}
			if _, err := b.in.Lookup(b.ctx, b.pool, newMessage("g'1").Key()); !errors.Is(err, inbox.ErrNotFound) {
				t.Fatalf("Lookup of an unknown key = %v, want ErrNotFound", err)
			}
			if n, err := b.in.Purge(b.ctx, b.pool, time.Now().Add(time.Hour), 2); err != nil || n != 3 {
				t.Fatalf("Purge = %d, %v, want 3", n, err)
			}
		})
	}
}
