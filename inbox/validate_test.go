package inbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/pgtx"
)

func TestInvalidInputWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := newMessage("g")
	ok := inbox.Result{Code: "OK"}

	msg := func(edit func(*inbox.Message)) inbox.Message { m := good; edit(&m); return m }
	res := func(code, payload string) inbox.Result {
		r := inbox.Result{Code: code}
		if payload != "" {
			r.Payload = []byte(payload)
		}
		return r
	}
	tooBig := `"` + strings.Repeat("x", inbox.MaxResultPayloadBytes) + `"`

	cases := []struct {
		name  string
		msg   inbox.Message
		res   inbox.Result
		field string
	}{
		{"empty group", msg(func(m *inbox.Message) { m.Group = "" }), ok, "Message.Group"},
		{"long group", msg(func(m *inbox.Message) { m.Group = strings.Repeat("g", inbox.MaxGroupLen+1) }), ok, "Message.Group"},
		{"zero message id", msg(func(m *inbox.Message) { m.MessageID = uuid.Nil }), ok, "Message.MessageID"},
		{"empty topic", msg(func(m *inbox.Message) { m.Topic = "" }), ok, "Message.Topic"},
		{"long topic", msg(func(m *inbox.Message) { m.Topic = strings.Repeat("t", inbox.MaxTopicLen+1) }), ok, "Message.Topic"},
		{"long tag", msg(func(m *inbox.Message) { m.Tag = strings.Repeat("é", inbox.MaxTagLen+1) }), ok, "Message.Tag"},
		{"long key", msg(func(m *inbox.Message) { m.MessageKey = strings.Repeat("k", inbox.MaxMessageKeyLen+1) }), ok, "Message.MessageKey"},
		{"long ref", msg(func(m *inbox.Message) { m.Ref = strings.Repeat("r", inbox.MaxRefLen+1) }), ok, "Message.Ref"},
		{"invalid utf8", msg(func(m *inbox.Message) { m.Topic = "a\xffb" }), ok, "Message.Topic"},
		{"nul byte", msg(func(m *inbox.Message) { m.Ref = "a\x00b" }), ok, "Message.Ref"},
		{"empty hash", msg(func(m *inbox.Message) { m.PayloadHash = []byte{} }), ok, "Message.PayloadHash"},
		{"long hash", msg(func(m *inbox.Message) { m.PayloadHash = make([]byte, inbox.MaxPayloadHashLen+1) }), ok, "Message.PayloadHash"},
		{"empty code", good, res("", ""), "Result.Code"},
		{"long code", good, res(strings.Repeat("c", inbox.MaxResultCodeLen+1), ""), "Result.Code"},
		{"invalid json", good, res("OK", `{"a":`), "Result.Payload"},
		{"json nul", good, res("OK", `"a\u0000"`), "Result.Payload"},
		{"huge json", good, res("OK", tooBig), "Result.Payload"},
	}
	check := func(t *testing.T, what string, err error, field string) {
		t.Helper()
		var ve *inbox.Error
		if !errors.Is(err, inbox.ErrInvalidArgument) || !errors.As(err, &ve) {
			t.Fatalf("%s: %v, want ErrInvalidArgument", what, err)
		}
		if field != "" && ve.Field != field && ve.Field != strings.Replace(field, "Message.", "Key.", 1) {
			t.Fatalf("%s: field %q, want %q", what, ve.Field, field)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			keyOnly := c.field == "Message.Group" || c.field == "Message.MessageID"
			resOnly := strings.HasPrefix(c.field, "Result.")
			b.inTx(t, func(tx pgx.Tx) error {
				var dst inbox.Claim
				batch := &pgx.Batch{}
				if !resOnly {
					_, err := b.in.ClaimMessage(b.ctx, tx, c.msg)
					check(t, "ClaimMessage", err, c.field)
					check(t, "QueueClaimMessage", b.in.QueueClaimMessage(batch, c.msg, &dst, pgtx.Return), c.field)
				}
				_, err := b.in.ClaimMessage(b.ctx, tx, withResult(c.msg, c.res))
				check(t, "ClaimMessage with a result", err, c.field)
				check(t, "QueueClaimMessage with a result", b.in.QueueClaimMessage(batch, withResult(c.msg, c.res), &dst, pgtx.Return), c.field)
				if keyOnly || resOnly {
					check(t, "Complete", b.in.Complete(b.ctx, tx, c.msg.Key(), c.res), c.field)
					check(t, "QueueComplete", b.in.QueueComplete(batch, c.msg.Key(), c.res), c.field)
				}
				if keyOnly {
					_, err := b.in.Lookup(b.ctx, tx, c.msg.Key())
					check(t, "Lookup", err, c.field)
				}
				if batch.Len() != 0 {
					t.Fatalf("%d statements queued for invalid input", batch.Len())
				}
				return nil
			})
		})
	}
	if n := b.count(t, nil); n != 0 {
		t.Fatalf("%d rows written by invalid calls", n)
	}

	// Purge arguments.
	for _, c := range []struct {
		olderThan time.Time
		batch     int
	}{{time.Time{}, 10}, {time.Now(), -1}, {time.Now(), inbox.MaxPurgeBatchSize + 1}} {
		_, err := b.in.Purge(testwait.Context(t, b.ctx, testwait.Step), b.pool, c.olderThan, c.batch)
		check(t, "Purge", err, "")
	}
	// Nil batch.
	check(t, "QueueClaimMessage(nil)", b.in.QueueClaimMessage(nil, good, &inbox.Claim{}, pgtx.Return), "")
	check(t, "QueueComplete(nil)", b.in.QueueComplete(nil, good.Key(), ok), "")
}

// TestCheckConstraintsBackValidation: a writer that bypasses the package
// cannot store what the package refuses. (ck_inbox_status is compared with
// the constants in TestStatusCheckMatchesConstants.)
func TestCheckConstraintsBackValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	table := pgx.Identifier{b.schema, "consumer_inbox"}.Sanitize()
	id := uuid.New()
	for _, c := range []struct{ constraint, sql string }{
		{"ck_inbox_result", `INSERT INTO ` + table + ` (consumer_group, message_id, topic, status) VALUES ('g', $1, 't', 20)`},
		{"ck_inbox_result", `INSERT INTO ` + table + ` (consumer_group, message_id, topic, status, result_code) VALUES ('g', $1, 't', 10, 'X')`},
		{"ck_inbox_group", `INSERT INTO ` + table + ` (consumer_group, message_id, topic) VALUES ('', $1, 't')`},
		{"ck_inbox_topic", `INSERT INTO ` + table + ` (consumer_group, message_id, topic) VALUES ('g', $1, '')`},
		{"ck_inbox_message_id", `INSERT INTO ` + table + ` (consumer_group, message_id, topic) VALUES ('g', '00000000-0000-0000-0000-000000000000', 't') RETURNING $1::uuid`},
		{"ck_inbox_payload_hash", `INSERT INTO ` + table + ` (consumer_group, message_id, topic, payload_hash) VALUES ('g', $1, 't', '')`},
	} {
		_, err := b.pool.Exec(b.ctx, c.sql, id)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.ConstraintName != c.constraint {
			t.Errorf("%s: %v, want violation of %s", c.sql, err, c.constraint)
		}
	}
}

// TestInputAtTheLimitsIsAccepted: every length limit is inclusive — a
// message whose every field is exactly at its limit, with a result code
// and payload exactly at theirs, is claimed, stored and read back whole.
func TestInputAtTheLimitsIsAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := newMessage(strings.Repeat("g", inbox.MaxGroupLen))
	m.Topic = strings.Repeat("t", inbox.MaxTopicLen)
	m.Tag = strings.Repeat("é", inbox.MaxTagLen)
	m.MessageKey = strings.Repeat("k", inbox.MaxMessageKeyLen)
	m.Ref = strings.Repeat("r", inbox.MaxRefLen)
	m.PayloadHash = make([]byte, inbox.MaxPayloadHashLen)
	res := inbox.Result{
		Code:    strings.Repeat("c", inbox.MaxResultCodeLen),
		Payload: []byte(`"` + strings.Repeat("x", inbox.MaxResultPayloadBytes-2) + `"`),
	}
	var c inbox.Claim
	b.inTx(t, func(tx pgx.Tx) error {
		var err error
		c, err = b.in.ClaimMessage(b.ctx, tx, withResult(m, res))
		return err
	})
	if !c.Fresh || c.Record.Result.Code != res.Code || len(c.Record.Result.Payload) != inbox.MaxResultPayloadBytes {
		t.Fatalf("claim at the limits: %+v", c)
	}
}
