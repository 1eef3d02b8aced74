package inbox_test

// The inbox's conformance table and scenarios, run by internal/conformance:
// nil handles, invalid and hostile input, every pgx exec mode, PgBouncer in
// transaction pooling mode, and the fuzz target of ClaimMessage.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/conformance"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/testwait"
	"github.com/seckillkit/seckill/pgtx"
)

// hostile are strings an attacker would try through a text parameter.
var hostile = conformance.Hostile("consumer_inbox", "consumer_inbox")

// invalid is the inbox's refusal of invalid input; nilHandle its refusal
// of a nil transaction or connection.
var (
	invalid   = conformance.Typed(inbox.ErrInvalidArgument, func(e *inbox.Error) string { return e.Field })
	nilHandle = conformance.Typed(inbox.ErrInvalidArgument, func(e *inbox.Error) string { return e.Field }, "tx", "db", "q")
)

// exempt lists the exported methods of *inbox.Store with nothing to
// conform to, with the reason; every other method has a row in
// inboxEntries (TestConformanceTableCoversStore checks both).
var exempt = map[string]string{
	"Schema": "returns the configured schema name",
}

// TestConformanceTableCoversStore: every exported method of *inbox.Store
// is in the conformance table or exempt.
func TestConformanceTableCoversStore(t *testing.T) {
	t.Parallel()
	conformance.Covered(t, &inbox.Store{}, inboxEntries(nil), exempt)
}

// inboxEntries is the conformance table. The invalid cases cover what
// TestInvalidInputWritesNothing (validate_test.go) does not:
// QueueClaimMessage (with a result) with a nil batch or an invalid result,
// a NUL byte in the group, result payloads jsonb cannot store (unpaired
// surrogate escapes, numbers beyond numeric, invalid UTF-8 inside a string
// — database errors before). Covered there: ClaimMessage,
// QueueClaimMessage (with and without a result), Complete, QueueComplete,
// Lookup, Purge; New in TestNewRejectsBadSchema.
func inboxEntries(b *testBundle) []conformance.Entry {
	good := newMessage("g")
	nulGroup := good
	nulGroup.Group = "g\x00"
	ok := inbox.Result{Code: "OK"}
	badPayloads := []string{`"\ud800"`, `"\udc00x"`, `1e999999`, `1e-999999`, "\"\xf3\""}
	payloadCases := func(what string, call func(ctx context.Context, tx pgx.Tx, b *pgx.Batch, res inbox.Result) error) []conformance.Case {
		var cs []conformance.Case
		for _, p := range badPayloads {
			res := inbox.Result{Code: "OK", Payload: json.RawMessage(p)}
			cs = append(cs, conformance.Case{Name: what + " " + p, Do: func(ctx context.Context, tx pgx.Tx, qb *pgx.Batch) error {
				return call(ctx, tx, qb, res)
			}})
		}
		return cs
	}
	return []conformance.Entry{
		{Method: "ClaimMessage",
			Nil: []conformance.Call{
				{Name: "plain", Do: func(ctx context.Context) error { _, err := b.in.ClaimMessage(ctx, nil, inbox.Message{}); return err }},
				{Name: "with a result", Do: func(ctx context.Context) error {
					_, err := b.in.ClaimMessage(ctx, nil, withResult(inbox.Message{}, inbox.Result{}))
					return err
				}},
			},
			Invalid: payloadCases("result payload", func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch, res inbox.Result) error {
				_, err := b.in.ClaimMessage(ctx, tx, withResult(good, res))
				return err
			})},
		{Method: "QueueClaimMessage",
			Queue: func(qb *pgx.Batch) error { return b.in.QueueClaimMessage(qb, newMessage("g"), nil, pgtx.Return) },
			Invalid: []conformance.Case{
				{Name: "with a result, nil batch", Do: func(context.Context, pgx.Tx, *pgx.Batch) error {
					return b.in.QueueClaimMessage(nil, withResult(good, ok), new(inbox.Claim), pgtx.Return)
				}},
				{Name: "with a result, empty code", Do: func(_ context.Context, _ pgx.Tx, qb *pgx.Batch) error {
					return b.in.QueueClaimMessage(qb, withResult(good, inbox.Result{}), new(inbox.Claim), pgtx.Return)
				}},
				{Name: "NUL group", Do: func(_ context.Context, _ pgx.Tx, qb *pgx.Batch) error {
					return b.in.QueueClaimMessage(qb, nulGroup, new(inbox.Claim), pgtx.Return)
				}},
			}},
		{Method: "Complete",
			Nil: []conformance.Call{{Name: "zero", Do: func(ctx context.Context) error {
				return b.in.Complete(ctx, nil, inbox.Key{}, inbox.Result{})
			}}},
			Invalid: payloadCases("result payload", func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch, res inbox.Result) error {
				return b.in.Complete(ctx, tx, good.Key(), res)
			})},
		{Method: "QueueComplete",
			Queue: func(qb *pgx.Batch) error { return b.in.QueueComplete(qb, good.Key(), ok) },
			Invalid: payloadCases("result payload", func(_ context.Context, _ pgx.Tx, qb *pgx.Batch, res inbox.Result) error {
				return b.in.QueueComplete(qb, good.Key(), res)
			})},
		{Method: "Lookup",
			Nil: []conformance.Call{{Name: "zero", Do: func(ctx context.Context) error { _, err := b.in.Lookup(ctx, nil, inbox.Key{}); return err }}},
			Invalid: []conformance.Case{{Name: "NUL group", Do: func(ctx context.Context, tx pgx.Tx, _ *pgx.Batch) error {
				_, err := b.in.Lookup(ctx, tx, nulGroup.Key())
				return err
			}}}},
		{Method: "Purge",
			Nil: []conformance.Call{{Name: "now", Do: func(ctx context.Context) error { _, err := b.in.Purge(ctx, nil, time.Now(), 1); return err }}}},
		{Method: "Check", Nil: []conformance.Call{{Name: "catalog", Do: func(ctx context.Context) error { return b.in.Check(ctx, nil) }}}},
		{Method: "Archive",
			Nil: []conformance.Call{{Name: "now", Do: func(ctx context.Context) error { _, err := b.in.Archive(ctx, nil, time.Now(), 1); return err }}}},
	}
}

// TestNilHandleIsATypedError: every method that takes a transaction or
// connection rejects a nil one with a typed error instead of panicking.
func TestNilHandleIsATypedError(t *testing.T) {
	t.Parallel()
	in, err := inbox.New(inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	conformance.NilHandles(t, inboxEntries(&testBundle{in: in}), nilHandle)
}

// TestEveryEntryPointRejectsInvalidInput runs the table's invalid cases:
// each is refused with a *inbox.Error matching ErrInvalidArgument, and
// nothing is queued or written. An escaped backslash before "u0000" is
// accepted (it was rejected).
func TestEveryEntryPointRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conformance.Refusals(t, b.ctx, b.pool, inboxEntries(b), invalid, func() int64 { return int64(b.count(t, nil)) })
	// An escaped backslash followed by "u0000" is plain text, not NUL.
	b.inTx(t, func(tx pgx.Tx) error {
		_, err := b.in.ClaimMessage(b.ctx, tx, withResult(newMessage("g"), inbox.Result{Code: "OK", Payload: json.RawMessage(`"\\u0000"`)}))
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
		res := inbox.Result{Code: h, Payload: json.RawMessage(`{"note": ` + conformance.MustJSON(h) + `}`)}
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
		if err := b.pool.QueryRow(b.ctx, `SELECT topic, tag, message_key, ref FROM `+b.table()+
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
	if err := b.pool.QueryRow(b.ctx, `SELECT to_regclass($1) IS NOT NULL`, b.table()).Scan(&ok); err != nil || !ok {
		t.Errorf("consumer_inbox gone (%v)", err)
	}
}

// TestQueryExecModes runs every statement of the package in every exec
// mode of conformance.ExecModes.
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	conformance.ExecModes(t, func(t *testing.T, pool *pgxpool.Pool) {
		b := setup(t)
		b.pool = pool
		execModeScenario(t, b)
	})
}

func execModeScenario(t *testing.T, b *testBundle) {
	// Hashes with every byte value, a payload with quotes, backslashes and
	// non-ASCII text.
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
	if n, err := b.in.Purge(testwait.Context(t, b.ctx, testwait.Step), b.pool, time.Now().Add(time.Hour), 2); err != nil || n != 3 {
		t.Fatalf("Purge = %d, %v, want 3", n, err)
	}
}

// bouncerSetup is setup with the migration and the returned pool going
// through the process's PgBouncer; b.pool stays a direct pool for checks.
func bouncerSetup(t *testing.T, maxConns int32) (*testBundle, *pgxpool.Pool) {
	t.Helper()
	bp := conformance.PgBouncerPool(t, maxConns)
	schema := pgtest.Schema(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	// migrate takes a transaction-scoped advisory lock and SET LOCAL
	// search_path: both fine through transaction pooling.
	if err := migrateInbox(ctx, bp, schema); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{ctx: ctx, pool: pgtest.Pool(t), schema: schema, in: in}, bp
}

// TestPgBouncerClaimConcurrentDuplicates: 200 transactions, each on its own
// client connection, claim the same message through PgBouncer (20 server
// connections) and commit. Exactly one owns it; every other one gets the
// result the owner committed.
func TestPgBouncerClaimConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	const n = 200
	b, bp := bouncerSetup(t, n)
	claimsOneWinner(t, b, bp, n)
}

// TestPgBouncerQueue: the batch forms through PgBouncer. A batch runs as
// one pipeline inside the caller's transaction, so on one server
// connection.
func TestPgBouncerQueue(t *testing.T) {
	t.Parallel()
	b, bp := bouncerSetup(t, 4)
	queueFormsWork(t, b, bp)
}

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
		fuzzClaimMessage(t, b, group, topic, tag, key, ref, code, payload, body)
	})
}

func fuzzClaimMessage(t *testing.T, b *testBundle, group, topic, tag, key, ref, code string, payload, body []byte) {
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
	if conformance.Rejected(t, b.in.QueueClaimMessage(&qb, withResult(msg, res), new(inbox.Claim), pgtx.Return), qb.Len(), invalid) {
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
		result_payload IS NOT DISTINCT FROM $3::jsonb FROM `+b.table()+`
		WHERE consumer_group = $1 AND message_id = $2`, group, msg.MessageID, nullJSON(payload)).Scan(&gotTopic, &gotTag, &gotKey, &gotRef, &same)
	if err != nil {
		t.Fatal(err)
	}
	if gotTopic != topic || gotTag != tag || gotKey != key || gotRef != ref || !same {
		t.Fatalf("stored %q %q %q %q (payload same: %v), want %q %q %q %q", gotTopic, gotTag, gotKey, gotRef, same, topic, tag, key, ref)
	}
}

func nullJSON(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}
