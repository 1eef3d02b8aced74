package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// BenchmarkReconcileHistory: the operator view's reconciliation during
// the sale (ReconcileRecent: the windows since the last check, and the
// stores' counters) against the whole one (GET /reconcile, the end of a
// run: every order, ledger row, event, inbox row and held reservation),
// on the real stack (Redis rebuilt from PostgreSQL, JetStream), after a
// sale history of 10,000 and of 1,000,000 orders. Each iteration places
// 100 orders (untimed) and reconciles once. The history loads in minutes
// at 1,000,000:
//
//	cd examples && go test -run '^$' -bench BenchmarkReconcileHistory -benchtime 5x -timeout 60m ./seckill/
func BenchmarkReconcileHistory(b *testing.B) {
	for _, orders := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("orders=%d", orders), func(b *testing.B) {
			ctx := pgtest.Context(b, 50*time.Minute)
			pool := pgtest.Pool(b)
			cfg := defaultConfig()
			cfg.Schema = pgtest.Schema(b)
			cfg.Stock, cfg.Buckets, cfg.FrontDrift = 64<<20, 64, 0
			useStack(b, &cfg, stackReal, true)
			s, err := newService(ctx, pool, cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.close()
			began := time.Now()
			loadServiceHistory(b, s, orders)
			if err := s.warmUp(ctx); err != nil {
				b.Fatal(err)
			}
			b.Logf("history of %d orders loaded, front door rebuilt from it, in %v", orders, time.Since(began).Round(time.Millisecond))
			s.recent.mu.Lock()
			s.recent.from, s.recent.lag = time.Now(), 0
			s.recent.mu.Unlock()
			user := int64(orders)
			placeTail := func() {
				for range 100 {
					user++
					placeDirect(b, ctx, s, user)
				}
			}
			b.Run("recent", func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					placeTail()
					b.StartTimer()
					rec, err := s.ReconcileRecent(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if n := windowOrderCount(rec.Windows); !rec.Passed() || n != 100 || len(rec.Windows[1].Orders) != 0 {
						var out strings.Builder
						rec.Print(&out)
						b.Fatalf("the newest window holds %d orders, want 100 (and the settled one none); or it failed:\n%s", n, out.String())
					}
				}
			})
			b.Run("whole", func(b *testing.B) {
				for range b.N {
					if _, err := s.reconcile(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// windowOrderCount counts the orders of the newest window.
func windowOrderCount(ws []flow.Reconciliation) (n int64) {
	if len(ws) == 0 {
		return 0
	}
	for _, o := range ws[0].Orders {
		n += o.Orders
	}
	return n
}

// loadServiceHistory writes n orders of the service's item, live and
// consistent: each with its reservation (ORDERED), its ALLOCATE ledger
// row, its order line and its ORDER_CREATED event (published, in the
// history table), the buckets' counters moved to match; created three
// hours ago, before both of ReconcileRecent's windows. (During a steady
// sale the settled window holds as many orders as the newest; here it
// holds none, so the figure is the newest window's and the counters'.)
func loadServiceHistory(b *testing.B, s *service, n int) {
	b.Helper()
	ctx := s.life
	q := strings.NewReplacer("{s}", pgx.Identifier{s.Schema}.Sanitize(), "{topic}", flow.EventTopic, "{tag}", flow.TagOrderCreated)
	a, k, per := s.Item.ActivityID, s.Item.SKUID, int64(s.Item.Stock)/int64(s.Item.Buckets)
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		for _, sql := range []string{
			`INSERT INTO {s}.inventory_reservation (reservation_id, request_id, first_message_id, activity_id, sku_id,
			        user_id, inventory_bucket, quantity, order_id, status, redis_reserved_at, expires_at, ordered_at, created_at, updated_at)
			 SELECT md5('r' || i)::uuid, md5('q' || i)::uuid, md5('m' || i)::uuid, $2, $3, i, i % 64, 1, i, 10,
			        now() - interval '3 hours', now() + interval '1 hour', now() - interval '3 hours', now() - interval '3 hours', now() - interval '3 hours'
			   FROM generate_series(1, $1::bigint) AS i`,
			`INSERT INTO {s}.inventory_ledger (idempotency_key, reservation_id, order_id, source_message_id, activity_id,
			        sku_id, user_id, inventory_bucket, ledger_type, available_delta, allocated_delta,
			        before_available, after_available, before_allocated, after_allocated, reason, created_at)
			 SELECT 'ALLOCATE:' || md5('r' || i)::uuid, md5('r' || i)::uuid, i, md5('m' || i)::uuid, $2, $3, i, i % 64, 10, -1, 1,
			        $4::bigint - i / 64, $4::bigint - i / 64 - 1, i / 64, i / 64 + 1, 'ORDER_CREATED', now() - interval '3 hours'
			   FROM generate_series(1, $1::bigint) AS i
			  ORDER BY i`,
			`UPDATE {s}.sku_inventory AS b
			    SET available_stock = available_stock - c.n, allocated_stock = allocated_stock + c.n
			   FROM (SELECT i % 64 AS bucket_no, count(*) AS n FROM generate_series(1, $1::bigint) AS i GROUP BY 1) AS c
			  WHERE b.activity_id = $2 AND b.sku_id = $3 AND b.bucket_no = c.bucket_no`,
			`INSERT INTO {s}.orders (order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id,
			        user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at, created_at, updated_at)
			 SELECT i, 'H' || i, md5('q' || i)::uuid, md5('r' || i)::uuid, md5('m' || i)::uuid, $2, $3, i, i % 64, 1, 99900, 99900, 'CNY', 10,
			        now() + interval '1 hour', now() - interval '3 hours', now() - interval '3 hours'
			   FROM generate_series(1, $1::bigint) AS i`,
			`INSERT INTO {s}.order_items (order_id, line_no, activity_id, sku_id, sku_title, quantity, unit_price, line_amount)
			 SELECT i, 1, $2, $3, 'phone', 1, 99900, 99900 FROM generate_series(1, $1::bigint) AS i`,
			`INSERT INTO {s}.event_outbox_history (event_id, seq, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key,
			        schema_version, payload, status, sent_at)
			 SELECT md5('e' || i)::uuid, i, '{tag}:' || i, 'ORDER', i::text, '{topic}', '{tag}', i::text,
			        1, '{}', 20, now()
			   FROM generate_series(1, $1::bigint) AS i`,
		} {
			args := []any{n, a, k, per}
			for len(args) > 1 && !strings.Contains(sql, fmt.Sprintf("$%d", len(args))) {
				args = args[:len(args)-1] // the statement's parameters: $1 up to the highest it names
			}
			if _, err := tx.Exec(ctx, q.Replace(sql), args...); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, q.Replace(`VACUUM ANALYZE {s}.inventory_ledger, {s}.inventory_reservation, {s}.orders, {s}.order_items, {s}.event_outbox_history`)); err != nil {
		b.Fatal(err)
	}
}
