package inbox_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/pgtx"
)

// hostile are strings an attacker would try through a text parameter.
var hostile = []string{
	`'; DROP TABLE consumer_inbox; --`, `"quoted"`, `$1`, `' OR '1'='1`, `\`, `%s%d%!`, `);--`, `{schema}`,
	`"; TRUNCATE consumer_inbox; --`, "é主🚀\u200b", `E'\x41'`, "tab\tnew\nline",
}

// TestEveryEntryPointRejectsInvalidInput covers what
// TestInvalidInputWritesNothing (validate_test.go) does not:
// QueueClaimMessage (with a result) with a nil batch or an
// invalid result, a NUL byte in the group, result payloads jsonb cannot
// store (unpaired surrogate escapes, numbers beyond numeric, invalid UTF-8
// inside a string — database errors before), and that an escaped
// backslash before "u0000" is accepted (it was rejected). Covered there:
// ClaimMessage, QueueClaimMessage (with and without a result), Complete,
// QueueComplete, Lookup, Purge; New in TestNewRejectsBadSchema. A nil
// pgx.Tx or pgtx.Querier panics at once, before anything is sent, like any
// nil interface.
func TestEveryEntryPointRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := newMessage("g")
	check := func(what string, err error) {
		t.Helper()
		var ve *inbox.Error
		if !errors.Is(err, inbox.ErrInvalidArgument) || !errors.As(err, &ve) {
			t.Errorf("%s: %v, want a *ValidationError", what, err)
		}
	}
	var batch pgx.Batch
	ok := inbox.Result{Code: "OK"}
	check("QueueClaimMessage with a result(nil batch)", b.in.QueueClaimMessage(nil, withResult(good, ok), new(inbox.Claim), pgtx.Return))
	check("QueueClaimMessage with a result(empty code)", b.in.QueueClaimMessage(&batch, withResult(good, inbox.Result{}), new(inbox.Claim), pgtx.Return))
	nulGroup := good
	nulGroup.Group = "g\x00"
	check("QueueClaimMessage(NUL group)", b.in.QueueClaimMessage(&batch, nulGroup, new(inbox.Claim), pgtx.Return))
	b.inTx(t, func(tx pgx.Tx) error {
		for _, p := range []string{`"\ud800"`, `"\udc00x"`, `1e999999`, `1e-999999`, "\"\xf3\""} {
			res := inbox.Result{Code: "OK", Payload: json.RawMessage(p)}
			_, err := b.in.ClaimMessage(b.ctx, tx, withResult(good, res))
			check("ClaimMessage with a result("+p+")", err)
			check("Complete("+p+")", b.in.Complete(b.ctx, tx, good.Key(), res))
			check("QueueComplete("+p+")", b.in.QueueComplete(&batch, good.Key(), res))
		}
		_, err := b.in.Lookup(b.ctx, tx, nulGroup.Key())
		check("Lookup(NUL group)", err)
		return nil
	})
	if batch.Len() != 0 {
		t.Errorf("%d statements queued for invalid input", batch.Len())
	}
	if n := b.count(t, nil); n != 0 {
		t.Fatalf("%d rows written by invalid calls", n)
	}
	// An escaped backslash followed by "u0000" is plain text, not NUL.
	b.inTx(t, func(tx pgx.Tx) error {
		_, err := b.in.ClaimMessage(b.ctx, tx, withResult(good, inbox.Result{Code: "OK", Payload: json.RawMessage(`"\\u0000"`)}))
		if err != nil {
			t.Errorf(`payload "\\u0000": %v`, err)
		}
		return nil
	})
}

// TestNoSQLInjection sends hostile strings through every string-taking
// entry point — group, topic, tag, message key, ref, result code, result
// payload — claims, completes and looks them up, and checks each is stored
// and read back verbatim (or rejected with a *ValidationError when over a
// column limit), and that the table is intact.
func TestNoSQLInjection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, h := range append(hostile, strings.Repeat("'", inbox.MaxResultCodeLen+1)) {
		msg := inbox.Message{Group: h, MessageID: uuid.Must(uuid.NewV7()), Topic: h, Tag: h, MessageKey: h, Ref: h,
			PayloadHash: inbox.HashPayload([]byte(h))}
		res := inbox.Result{Code: h, Payload: json.RawMessage(`{"note": ` + mustJSON(h) + `}`)}
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			c, err := b.in.ClaimMessage(b.ctx, tx, msg)
			if err != nil || !c.Fresh {
				return errors.Join(err, errors.New("not fresh"))
			}
			return b.in.Complete(b.ctx, tx, msg.Key(), res)
		})
		if len([]rune(h)) > inbox.MaxTagLen {
			if !errors.Is(err, inbox.ErrInvalidArgument) {
				t.Errorf("%q: %v, want ErrInvalidArgument", h, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", h, err)
		}
		rec, err := b.in.Lookup(b.ctx, b.pool, msg.Key())
		if err != nil || rec.Key != msg.Key() || rec.Result.Code != h || rec.Status != inbox.StatusProcessed {
			t.Fatalf("%q: %+v, %v", h, rec, err)
		}
		var note string
		if err := json.Unmarshal(rec.Result.Payload, &struct{ Note *string }{&note}); err != nil || note != h {
			t.Fatalf("payload note %q (%v), want %q", note, err, h)
		}
		var topic, tag, key, ref string
		if err := b.pool.QueryRow(b.ctx, `SELECT topic, tag, message_key, ref FROM `+pgx.Identifier{b.schema, "consumer_inbox"}.Sanitize()+
			` WHERE consumer_group = $1 AND message_id = $2`, h, msg.MessageID).Scan(&topic, &tag, &key, &ref); err != nil {
			t.Fatal(err)
		}
		if topic != h || tag != h || key != h || ref != h {
			t.Fatalf("stored %q %q %q %q, want %q", topic, tag, key, ref, h)
		}
	}
	if n := b.count(t, nil); n != len(hostile) {
		t.Errorf("%d rows, want %d", n, len(hostile))
	}
	var ok bool
	if err := b.pool.QueryRow(b.ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{b.schema, "consumer_inbox"}.Sanitize()).Scan(&ok); err != nil || !ok {
		t.Errorf("consumer_inbox gone (%v)", err)
	}
}

func mustJSON(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}
