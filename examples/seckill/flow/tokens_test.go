package flow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
)

// The flow on a SKU of inventory tokens (SKU.Tokens): the fresh path's one
// batch claims a token per order, the order past the stock is sold out and
// compensated, the audit (which reads the tokens as bucket 0) and the
// invariant queries of testdata pass, and a lost token breaks the SKU's
// conservation.
func TestTokenStockSellsOut(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	pool := pgtest.Pool(t)
	s, err := flow.New(ctx, pool, flow.Config{Schema: pgtest.Schema(t), Item: flow.SKU{
		ActivityID: 7, SKUID: 71, Title: "phone", UnitPrice: 1999, Currency: "CNY", Stock: 2, Buckets: 1, Tokens: true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	b := bundle{ctx: ctx, s: s, pool: pool}
	for user := int64(1); user <= 2; user++ {
		if out, err := s.PlaceOrder(ctx, uuid.Must(uuid.NewV7()), body(t, b.msg(user, 0))); err != nil || out.Code != flow.CodeOrderCreated {
			t.Fatalf("order of user %d: %+v %v", user, out, err)
		}
	}
	if out, err := s.PlaceOrder(ctx, uuid.Must(uuid.NewV7()), body(t, b.msg(3, 0))); err != nil || out.Code != flow.CodeSoldOut {
		t.Fatalf("third buyer = %+v, %v; want %s", out, err, flow.CodeSoldOut)
	}
	if n := b.allocated(t); n != 2 {
		t.Fatalf("allocated %d, want 2", n)
	}
	if n := b.count(t, "inventory_token", "reservation_id IS NOT NULL"); n != 2 {
		t.Fatalf("%d tokens held, want 2", n)
	}
	if n := b.count(t, "event_outbox", "tag = $1", flow.TagFrontDoorRelease); n != 1 {
		t.Errorf("compensation events = %d, want 1", n)
	}
	b.auditClean(t)
	for _, f := range testdataFiles(t, "invariants") {
		if n := b.runTestdata(t, f); n != 0 {
			t.Errorf("%s: %d violations", f, n)
		}
	}
	// A token lost from the table breaks invariant 2 (the SKU's stock).
	if _, err := pool.Exec(ctx, `DELETE FROM `+pgx.Identifier{s.Schema, "inventory_token"}.Sanitize()+` WHERE reservation_id IS NOT NULL
		AND token_no = (SELECT min(token_no) FROM `+pgx.Identifier{s.Schema, "inventory_token"}.Sanitize()+` WHERE reservation_id IS NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if n := b.runTestdata(t, "invariants/03_sku_conservation.sql"); n != 1 {
		t.Errorf("SKU conservation after a lost token: %d violations, want 1", n)
	}
}

// TestArchiveTokenActivity: ArchiveActivity moves a token SKU's tokens
// with the SKU (the tokens' foreign key names the SKU): the active schema
// keeps none, the archive holds every token, the sold ones still held.
func TestArchiveTokenActivity(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 3*time.Minute)
	pool := pgtest.Pool(t)
	s, err := flow.New(ctx, pool, flow.Config{Schema: pgtest.Schema(t), Item: flow.SKU{
		ActivityID: 7, SKUID: 72, Title: "phone", UnitPrice: 1999, Currency: "CNY", Stock: 3, Buckets: 1, Tokens: true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	b := bundle{ctx: ctx, s: s, pool: pool}
	for user := int64(1); user <= 2; user++ {
		m := b.msg(user, 0)
		if out, err := s.PlaceOrder(ctx, uuid.Must(uuid.NewV7()), body(t, m)); err != nil || out.Code != flow.CodeOrderCreated {
			t.Fatalf("order of user %d: %+v %v", user, out, err)
		}
		if _, err := s.Pay(ctx, flow.Payment{OrderID: m.OrderID, ProviderTradeNo: fmt.Sprint("T", user), Amount: m.UnitPrice, Currency: "CNY"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.SetSaleStatus(ctx, inventory.SaleEnded, time.Now().Add(-time.Hour), time.Now(), "ops", "sold"); err != nil {
		t.Fatal(err)
	}
	b.publishAll(t)
	schema := s.Schema + "_arch"
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	if _, err := migrate.Apply(ctx, pool, schema, inbox.Migrations, outbox.Migrations, inventory.Migrations, order.Migrations); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ArchiveActivity(ctx, schema, 2); err != nil {
		t.Fatal(err)
	}
	tokens := func(schema, where string) (n int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "inventory_token"}.Sanitize()+` WHERE `+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if left, moved, held := tokens(s.Schema, "true"), tokens(schema, "true"), tokens(schema, "reservation_id IS NOT NULL"); left != 0 || moved != 3 || held != 2 {
		t.Fatalf("tokens left %d, archived %d (%d held); want 0, 3 (2)", left, moved, held)
	}
}
