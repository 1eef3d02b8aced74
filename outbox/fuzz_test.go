package outbox_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/outbox"
	"github.com/seckillkit/seckill/pgtx"
)

// FuzzEnqueueEvent feeds arbitrary text fields, payloads and headers to
// Enqueue. Client-side validation must either reject the event with a
// *ValidationError (nothing queued) or accept it — and then PostgreSQL must
// accept it too, and store every text field verbatim and the payload and
// headers as the same JSON values. Accepted events are rolled back, so each
// input costs one short transaction.
func FuzzEnqueueEvent(f *testing.F) {
	b := setup(f, outbox.Config{MaxPayloadBytes: 4096})
	seeds := []struct {
		topic, tag, dedup, ordering string
		payload                     string
		hk, hv                      string
	}{
		{"ORDER_EVENT", "ORDER_CREATED", "k1", "", `{"order_id": 1}`, "", ""},
		{"t", "", "'; DROP TABLE event_outbox; --", "$1", `[1, "two", null, true, {"a": [] }]`, "trace-id", `"quoted"`},
		{"Ünïcödé 主题 🚀", "tag", "k", "o", `"\u00e9\ud83d\ude80"`, "🔑", "\\"},
		{"t", "", "k", "", `"a\u0000b"`, "", ""},       // jsonb cannot store \u0000
		{"t", "", "k", "", `"\\u0000"`, "", ""},        // an escaped backslash: fine
		{"t", "", "k", "", `"\ud800"`, "", ""},         // lone surrogate
		{"t", "", "k", "", `1e1000000`, "", ""},        // beyond numeric's range
		{"t", "", "k", "", "\"\xf3\"", "", ""},         // invalid UTF-8 inside a JSON string
		{"t", "", "k", "", `{"a":1,"a":2}`, "", ""},    // duplicate keys: jsonb keeps the last
		{"t", "", "k", "", "  {\"a\" :\t1}\n", "", ""}, // whitespace
		{"t", "", "k\x00", "", `{}`, "", ""},           // NUL in text
		{"t\xff", "", "k", "", `{}`, "", ""},           // invalid UTF-8
		{"t", "", "k", "", `{}`, "k", "v\x00"},         // NUL in a header
		{"t", "", strings.Repeat("é", 161), "", `{}`, "", ""},
		{"t", "", "k", "", `-0.000000000000000000000000000001e-10`, "", ""},
	}
	for _, s := range seeds {
		f.Add(s.topic, s.tag, s.dedup, s.ordering, []byte(s.payload), s.hk, s.hv)
	}
	f.Fuzz(func(t *testing.T, topic, tag, dedup, ordering string, payload []byte, hk, hv string) {
		ev := outbox.Event{Topic: topic, Tag: tag, AggregateType: "FUZZ", AggregateID: "1", DedupKey: dedup,
			OrderingKey: ordering, Payload: payload}
		if hk != "" || hv != "" {
			ev.Headers = map[string]string{hk: hv}
		}
		var qb pgx.Batch
		err := b.store.QueueEnqueue(&qb, []outbox.Event{ev}, nil, pgtx.Return)
		if err != nil {
			var ve *outbox.Error
			if !errors.Is(err, outbox.ErrInvalidArgument) || !errors.As(err, &ve) || ve.Field == "" {
				t.Fatalf("rejection %v is not a *ValidationError", err)
			}
			if qb.Len() != 0 {
				t.Fatalf("rejected event queued %d statements", qb.Len())
			}
			return
		}
		if qb.Len() == 0 {
			t.Fatal("accepted event queued nothing")
		}
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(b.ctx)
		res, err := enqueueOne(b.ctx, b.store, tx, ev)
		if err != nil {
			t.Fatalf("validation accepted an event PostgreSQL rejects: %v\nevent: %+q", err, ev)
		}
		if !res.New {
			t.Fatalf("fresh event reported as duplicate: %+v", res)
		}
		headers, _ := json.Marshal(ev.Headers)
		if ev.Headers == nil {
			headers = []byte("{}")
		}
		var gotTopic, gotDedup, gotTag, gotOrd string
		var samePayload, sameHeaders bool
		err = tx.QueryRow(b.ctx, `SELECT topic, dedup_key, coalesce(tag, ''), coalesce(ordering_key, ''),
			payload = $2::jsonb, headers = $3::jsonb FROM `+b.table()+` WHERE event_id = $1`,
			res.EventID, string(payload), string(headers)).Scan(&gotTopic, &gotDedup, &gotTag, &gotOrd, &samePayload, &sameHeaders)
		if err != nil {
			t.Fatal(err)
		}
		if gotTopic != topic || gotDedup != dedup || gotTag != tag || gotOrd != ordering || !samePayload || !sameHeaders {
			t.Fatalf("stored %q %q %q %q payload=%v headers=%v, want %q %q %q %q", gotTopic, gotDedup, gotTag, gotOrd,
				samePayload, sameHeaders, topic, dedup, tag, ordering)
		}
	})
}

// FuzzTruncateError: for any bytes, the result is valid UTF-8 without NUL,
// at most MaxLastErrorBytes long, a prefix of the sanitised input, and the
// input itself when that already fits.
func FuzzTruncateError(f *testing.F) {
	f.Add("boom")
	f.Add("a\x00b\xffc")
	f.Add(strings.Repeat("é", outbox.MaxLastErrorBytes))
	f.Add(strings.Repeat("x", outbox.MaxLastErrorBytes-1) + "🚀")
	f.Add("\xf0\x9f\x9a")
	f.Fuzz(func(t *testing.T, msg string) {
		got := outbox.TruncateError(msg)
		clean := strings.ReplaceAll(strings.ToValidUTF8(msg, "\uFFFD"), "\x00", "\uFFFD")
		switch {
		case !utf8.ValidString(got), strings.IndexByte(got, 0) >= 0:
			t.Fatalf("TruncateError(%q) = %q: not valid text", msg, got)
		case len(got) > outbox.MaxLastErrorBytes:
			t.Fatalf("TruncateError: %d bytes", len(got))
		case !strings.HasPrefix(clean, got):
			t.Fatalf("TruncateError(%q) = %q: not a prefix of %q", msg, got, clean)
		case len(clean) <= outbox.MaxLastErrorBytes && got != clean:
			t.Fatalf("TruncateError(%q) = %q, want %q", msg, got, clean)
		case len(clean) > outbox.MaxLastErrorBytes && len(got) < outbox.MaxLastErrorBytes-utf8.UTFMax+1:
			t.Fatalf("TruncateError cut too much: %d bytes", len(got))
		case utf8.ValidString(msg) && strings.IndexByte(msg, 0) < 0 && !strings.HasPrefix(msg, got):
			t.Fatalf("valid input changed: %q → %q", msg, got)
		}
	})
}
