package inbox_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	in     *inbox.Store
	citus  bool // in.Config.Citus
}

func setup(t testing.TB) *testBundle { return setupMode(t, false) }

// setupMode is setup with Config.Citus set to citus.
func setupMode(t testing.TB, citus bool) *testBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	if err := migrateInbox(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{Schema: schema, Citus: citus})
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{ctx: ctx, pool: pool, schema: schema, in: in}
}

// bothClaimModes runs fn as two parallel subtests, each on a schema of
// its own: "default", with the one-statement claim, and "citus", with the
// claim of Config.Citus (an insert and a look-up in one batch).
func bothClaimModes(t *testing.T, fn func(t *testing.T, b *testBundle)) {
	t.Helper()
	for _, citus := range []bool{false, true} {
		name := "default"
		if citus {
			name = "citus"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupMode(t, citus)
			b.citus = citus
			fn(t, b)
		})
	}
}

func newMessage(group string) inbox.Message {
	id, err := uuid.NewV7()
	if err != nil {
		panic(err)
	}
	return inbox.Message{
		Group:       group,
		MessageID:   id,
		Topic:       "orders",
		Tag:         "create",
		MessageKey:  "k-1",
		PayloadHash: inbox.HashPayload([]byte(`{"sku":1}`)),
	}
}

// count returns the number of inbox rows in the bundle's schema, optionally
// for one key.
func (b *testBundle) count(t *testing.T, key *inbox.Key) int {
	t.Helper()
	var n int
	q := `SELECT count(*) FROM ` + pgx.Identifier{b.schema, "consumer_inbox"}.Sanitize()
	var err error
	if key != nil {
		err = b.pool.QueryRow(b.ctx, q+` WHERE consumer_group = $1 AND message_id = $2`, key.Group, key.MessageID).Scan(&n)
	} else {
		err = b.pool.QueryRow(b.ctx, q).Scan(&n)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// inTx runs fn in a transaction on the shared pool and commits it, failing
// the test on any error.
func (b *testBundle) inTx(t *testing.T, fn func(tx pgx.Tx) error) {
	t.Helper()
	if err := pgx.BeginFunc(b.ctx, b.pool, fn); err != nil {
		t.Fatal(err)
	}
}

func TestStatusCheckMatchesConstants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var def string
	err := b.pool.QueryRow(b.ctx, `SELECT pg_get_constraintdef(c.oid)
		FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid JOIN pg_namespace n ON n.oid = r.relnamespace
		WHERE n.nspname = $1 AND r.relname = 'consumer_inbox' AND c.conname = 'ck_inbox_status'`, b.schema).Scan(&def)
	if err != nil {
		t.Fatal(err)
	}
	want := "CHECK ((status = ANY (ARRAY[" + strconv.Itoa(int(inbox.StatusClaimed)) + ", " + strconv.Itoa(int(inbox.StatusProcessed)) + "])))"
	if def != want {
		t.Fatalf("ck_inbox_status = %s, constants give %s", def, want)
	}
	for s, name := range map[inbox.Status]string{inbox.StatusClaimed: "CLAIMED", inbox.StatusProcessed: "PROCESSED", 7: "Status(7)"} {
		if s.String() != name {
			t.Errorf("Status(%d).String() = %q, want %q", int16(s), s.String(), name)
		}
	}
}

func TestNewRejectsBadSchema(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"bad-name", "pg_x", "1abc", `x"y`} {
		if _, err := inbox.New(inbox.Config{Schema: s}); !errors.Is(err, migrate.ErrInvalidSchema) {
			t.Errorf("New(%q) = %v, want ErrInvalidSchema", s, err)
		}
	}
	in, err := inbox.New(inbox.Config{})
	if err != nil || in.Schema() != "seckill" {
		t.Fatalf("New(zero) = %v, %v; want schema seckill", in, err)
	}
}

// withResult is m with Result res: the claim that records its result up
// front.
func withResult(m inbox.Message, res inbox.Result) inbox.Message {
	m.Result = &res
	return m
}

// migrateInbox applies the inbox's migrations to schema.
func migrateInbox(ctx context.Context, db pgtx.TxBeginner, schema string) error {
	_, err := migrate.Apply(ctx, db, schema, inbox.Migrations)
	return err
}
