package inbox_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/pgtx"
)

// FuzzClaimMessage feeds arbitrary metadata, result codes, result payloads
// and bodies to ClaimMessage with a result. Validation either rejects them
// with a *ValidationError (nothing queued) or accepts them, and then
// PostgreSQL must accept them too and store the text fields verbatim, the
// payload as the same JSON value and HashPayload(body) as the hash. Each
// input runs in a transaction that is rolled back.
func FuzzClaimMessage(f *testing.F) {
	b := setup(f)
	for _, s := range []struct{ group, topic, tag, key, ref, code, payload, body string }{
		{"order-consumer", "ORDER_CREATE", "NEW", "user-1", "req-1", "ORDER_CREATED", `{"order_id": 1}`, `{"u":1}`},
		{"'; DROP TABLE consumer_inbox; --", `"quoted"`, "$1", `\x00`, "主题🚀", "OK", "", ""},
		{"g", "t", "", "", "", "OK", `"\ud800"`, "body"},
		{"g", "t", "", "", "", "OK", `1e999999`, "body"},
		{"g", "t", "", "", "", "OK", "\"\xf3\"", "body"},
		{"g", "t", "", "", "", "OK", `"\\u0000"`, "body"},
		{"g", "t", "", "", "", "OK", `"a\u0000"`, "body"},
		{"g", "t", "", "", "a\x00b", "OK", ``, ""},
		{"g", "t\xff", "", "", "", "OK", ``, ""},
		{strings.Repeat("g", inbox.MaxGroupLen), strings.Repeat("界", inbox.MaxTopicLen), "", "", "", "C", `null`, ""},
	} {
		f.Add(s.group, s.topic, s.tag, s.key, s.ref, s.code, []byte(s.payload), []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, group, topic, tag, key, ref, code string, payload, body []byte) {
		if len(payload) == 0 {
			payload = nil // "no payload"
		}
		msg := inbox.Message{Group: group, MessageID: uuid.Must(uuid.NewV7()), Topic: topic, Tag: tag,
			MessageKey: key, Ref: ref, PayloadHash: inbox.HashPayload(body)}
		if h := sha256.Sum256(body); !bytes.Equal(msg.PayloadHash, h[:]) || !bytes.Equal(inbox.HashPayload(body), msg.PayloadHash) {
			t.Fatalf("HashPayload is not SHA-256 or not deterministic")
		}
		res := inbox.Result{Code: code, Payload: payload}
		var qb pgx.Batch
		err := b.in.QueueClaimMessage(&qb, withResult(msg, res), new(inbox.Claim), pgtx.Return)
		if err != nil {
			var ve *inbox.Error
			if !errors.Is(err, inbox.ErrInvalidArgument) || !errors.As(err, &ve) || ve.Field == "" {
				t.Fatalf("rejection %v is not a *ValidationError", err)
			}
			if qb.Len() != 0 {
				t.Fatalf("rejected input queued %d statements", qb.Len())
			}
			return
		}
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(b.ctx)
		c, err := b.in.ClaimMessage(b.ctx, tx, withResult(msg, res))
		if err != nil {
			t.Fatalf("validation accepted what PostgreSQL rejects: %v\nmsg %+v result %+q", err, msg, res)
		}
		rec, err := b.in.Lookup(b.ctx, tx, msg.Key())
		if err != nil {
			t.Fatal(err)
		}
		if !c.Fresh || rec.Key != msg.Key() || rec.Status != inbox.StatusProcessed || rec.Result.Code != code ||
			!bytes.Equal(rec.PayloadHash, msg.PayloadHash) {
			t.Fatalf("stored %+v, claimed %+v", rec, c)
		}
		var same bool
		var gotTopic, gotTag, gotKey, gotRef string
		err = tx.QueryRow(b.ctx, `SELECT topic, coalesce(tag, ''), coalesce(message_key, ''), coalesce(ref, ''),
			result_payload IS NOT DISTINCT FROM $3::jsonb FROM `+pgx.Identifier{b.schema, "consumer_inbox"}.Sanitize()+`
			WHERE consumer_group = $1 AND message_id = $2`, group, msg.MessageID, nullJSON(payload)).Scan(&gotTopic, &gotTag, &gotKey, &gotRef, &same)
		if err != nil {
			t.Fatal(err)
		}
		if gotTopic != topic || gotTag != tag || gotKey != key || gotRef != ref || !same {
			t.Fatalf("stored %q %q %q %q (payload same: %v), want %q %q %q %q", gotTopic, gotTag, gotKey, gotRef, same, topic, tag, key, ref)
		}
	})
}

func nullJSON(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}
