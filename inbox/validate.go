package inbox

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/seckillkit/seckill/internal/jsonb"
	"github.com/seckillkit/seckill/internal/textcheck"
)

// Column limits, mirroring the VARCHAR lengths of consumer_inbox
// (characters, as PostgreSQL counts them).
const (
	maxGroupLen       = 128 // consumer_group
	maxTopicLen       = 128 // topic
	maxTagLen         = 64  // tag
	maxMessageKeyLen  = 160 // message_key
	maxRefLen         = 160 // ref
	maxResultCodeLen  = 64  // result_code
	maxPayloadHashLen = 64  // payload_hash, bytes
)

func invalid(field, reason string) error {
	return &Error{Err: ErrInvalidArgument, Field: field, Reason: reason}
}

// checkText validates a text column value: valid UTF-8 without NUL (which
// PostgreSQL rejects), at most max characters, non-empty when required.
func checkText(field, s string, max int, required bool) error {
	if r := textcheck.Reason(s, max, required); r != "" {
		return invalid(field, r)
	}
	return nil
}

func (k Key) validate(prefix string) error {
	if err := checkText(prefix+"Group", k.Group, maxGroupLen, true); err != nil {
		return err
	}
	if k.MessageID == uuid.Nil {
		return invalid(prefix+"MessageID", "zero UUID")
	}
	return nil
}

func (m Message) validate() error {
	if err := m.Key().validate("Message."); err != nil {
		return err
	}
	for _, c := range []struct {
		field    string
		v        string
		max      int
		required bool
	}{
		{"Message.Topic", m.Topic, maxTopicLen, true},
		{"Message.Tag", m.Tag, maxTagLen, false},
		{"Message.MessageKey", m.MessageKey, maxMessageKeyLen, false},
		{"Message.Ref", m.Ref, maxRefLen, false},
	} {
		if err := checkText(c.field, c.v, c.max, c.required); err != nil {
			return err
		}
	}
	if m.PayloadHash != nil && (len(m.PayloadHash) == 0 || len(m.PayloadHash) > maxPayloadHashLen) {
		return invalid("Message.PayloadHash", fmt.Sprintf("%d bytes, want nil or 1 to %d", len(m.PayloadHash), maxPayloadHashLen))
	}
	if m.Result != nil {
		return m.Result.validate()
	}
	return nil
}

func (r Result) validate() error {
	if err := checkText("Result.Code", r.Code, maxResultCodeLen, true); err != nil {
		return err
	}
	if r.Payload == nil {
		return nil
	}
	if len(r.Payload) > maxResultPayloadBytes {
		return invalid("Result.Payload", fmt.Sprintf("%d bytes, at most %d allowed", len(r.Payload), maxResultPayloadBytes))
	}
	if !json.Valid(r.Payload) {
		return invalid("Result.Payload", "not valid JSON")
	}
	// jsonb rejects the NUL character even when escaped, unpaired
	// surrogate escapes and numbers beyond numeric's range.
	if err := jsonb.Check(r.Payload); err != nil {
		return invalid("Result.Payload", err.Error())
	}
	return nil
}

// nullable maps "" to SQL NULL.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nilHandle rejects a nil transaction or connection handle (a
// *[Error] matching ErrInvalidArgument) instead of letting the call
// panic on it.
func nilHandle(name string) error { return invalid(name, "must not be nil") }
