package flow_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// FuzzPlaceOrder delivers arbitrary bodies as order messages. PlaceOrder
// never panics and returns either a known outcome or an error matching
// ErrPoison — and a poison message writes nothing (no inbox row, no
// reservation, no order, no event). Each input is one short transaction.
func FuzzPlaceOrder(f *testing.F) {
	ctx := pgtest.Context(f, 5*time.Minute)
	pool := pgtest.Pool(f)
	s, err := flow.New(ctx, pool, flow.Config{Schema: pgtest.Schema(f), Item: flow.SKU{
		ActivityID: 7, SKUID: 70, Title: "phone", UnitPrice: 1999, Currency: "CNY", Stock: 3, Buckets: 2,
	}})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Now().UTC()
	valid := flow.OrderMessage{
		RequestID: uuid.Must(uuid.NewV7()), ReservationID: uuid.Must(uuid.NewV7()), OrderID: 385781806788462873,
		ActivityID: 7, SKUID: 70, UserID: 1, Bucket: 0, UnitPrice: 1999, Currency: "CNY", SKUTitle: "phone",
		ReservedAt: now, ReservationTo: now.Add(time.Hour), OrderExpireAt: now.Add(time.Hour),
	}
	seed := func(edit func(m *flow.OrderMessage)) {
		m := valid
		m.RequestID, m.ReservationID, m.OrderID = uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), m.OrderID+1
		valid.OrderID++
		m.UserID = valid.OrderID % 1000
		edit(&m)
		raw, err := json.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	seed(func(*flow.OrderMessage) {})
	seed(func(m *flow.OrderMessage) { m.SKUTitle = "'; DROP TABLE orders; --" })
	seed(func(m *flow.OrderMessage) { m.SKUTitle = "a\x00b" })
	seed(func(m *flow.OrderMessage) { m.Currency = "$1" })
	seed(func(m *flow.OrderMessage) { m.Bucket = 300 })
	seed(func(m *flow.OrderMessage) { m.Bucket = 1; m.SKUID = 71 }) // not provisioned
	seed(func(m *flow.OrderMessage) { m.UnitPrice = -1 })           // invalid order after the reservation
	seed(func(m *flow.OrderMessage) { m.SKUTitle = strings.Repeat("題", 257) })
	seed(func(m *flow.OrderMessage) { m.OrderExpireAt = time.Time{} })
	seed(func(m *flow.OrderMessage) { m.ReservationTo = m.ReservedAt.Add(-time.Second) })
	seed(func(m *flow.OrderMessage) { m.RequestID = uuid.Nil })
	for _, raw := range []string{``, `null`, `[]`, `{`, `{"order_id": "1"}`, `{"user_id": 1e99}`, `"\u0000"`, "\xff"} {
		f.Add([]byte(raw))
	}
	count := func(t *testing.T) (n int64) {
		t.Helper()
		var q strings.Builder
		for i, tbl := range []string{"consumer_inbox", "inventory_reservation", "orders", "event_outbox", "inventory_ledger"} {
			if i > 0 {
				q.WriteString(" + ")
			}
			q.WriteString("(SELECT count(*) FROM " + pgx.Identifier{s.Schema, tbl}.Sanitize() + ")")
		}
		if err := pool.QueryRow(ctx, "SELECT "+q.String()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	known := map[string]bool{flow.CodeOrderCreated: true, flow.CodeOrderAlready: true, flow.CodeUserAlreadyOrdered: true, flow.CodeSoldOut: true}
	f.Fuzz(func(t *testing.T, body []byte) {
		before := count(t)
		out, err := s.PlaceOrder(ctx, uuid.Must(uuid.NewV7()), body)
		switch {
		case errors.Is(err, flow.ErrPoison):
			if after := count(t); after != before {
				t.Fatalf("poison message %q wrote %d rows", body, after-before)
			}
		case err != nil:
			t.Fatalf("PlaceOrder(%q) = %v: neither an outcome nor ErrPoison", body, err)
		case !known[out.Code] || out.Duplicate:
			t.Fatalf("PlaceOrder(%q) = %+v: unknown outcome", body, out)
		}
	})
}
