package flow_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/internal/pgtest"
)

// liveTail is the orders placed between two live audits in
// BenchmarkAuditLiveHistory: at the service's pace of a live audit every
// 3 seconds, 100 orders is a sale at about 33 orders/s; the figure scales
// with the tail, not with the history.
const liveTail = 100

// BenchmarkAuditLiveHistory measures the example's audits over a sale
// whose history holds 10,000 or 1,000,000 orders (each CREATED, with its
// item line, its ORDERED reservation, its ALLOCATE ledger row and its
// ORDER_CREATED event archived as sent; the buckets' counters to match,
// written with INSERT … SELECT generate_series), once the first live audit
// (the whole history) has passed:
//
//   - live: Service.AuditLive after liveTail orders placed through
//     PlaceOrder (with the timer stopped): the rows changed since the last
//     live audit, the inventory checkpoint moved;
//   - reconcile-window: Service.ReconcileWindow over the window in which
//     liveTail orders were placed (with the timer stopped): the cohort's
//     reports, every difference a match;
//   - reconcile: Service.Reconcile, the three reports' counts (whole
//     tables: it grows with the history);
//   - atrest: Service.Audit, every table whole.
//
// Every audit must pass (the outbox check aside at rest: the tail's events
// are not relayed).
func BenchmarkAuditLiveHistory(b *testing.B) {
	for _, orders := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("orders=%d", orders), func(b *testing.B) {
			ctx := pgtest.Context(b, 30*time.Minute)
			pool := pgtest.Pool(b)
			s, err := flow.New(ctx, pool, flow.Config{Schema: pgtest.Schema(b), Item: flow.SKU{
				ActivityID: 7, SKUID: 70, Title: "phone", UnitPrice: 1999, Currency: "CNY", Stock: 64 << 20, Buckets: 64,
			}})
			if err != nil {
				b.Fatal(err)
			}
			bb := bundle{ctx: ctx, s: s, pool: pool}
			began := time.Now()
			loadHistory(b, bb, orders)
			loaded := time.Since(began)
			began = time.Now()
			liveAudit(b, bb)
			b.Logf("history of %d orders loaded in %v; the first live audit (whole history) took %v", orders, loaded.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
			user := int64(orders) + 1
			b.Run("live", func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					user = placeTail(b, bb, user)
					b.StartTimer()
					liveAudit(b, bb)
				}
			})
			b.Run("reconcile-window", func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					from := dbNow(b, bb)
					user = placeTail(b, bb, user)
					to := dbNow(b, bb)
					b.StartTimer()
					rec, err := s.ReconcileWindow(ctx, from, to)
					if err != nil {
						b.Fatal(err)
					}
					var n int64
					for _, o := range rec.Orders {
						n += o.Orders
					}
					for _, d := range rec.Differences {
						if d.Class != flow.ClassMatch || n != liveTail {
							b.Fatalf("window of %d orders: %s: %d vs %d, %s", n, d.Name, d.Have, d.Expected, d.Class)
						}
					}
				}
			})
			b.Run("reconcile", func(b *testing.B) {
				for range b.N {
					if _, err := s.Reconcile(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("atrest", func(b *testing.B) {
				for range b.N {
					cs, err := s.Audit(ctx)
					if err != nil {
						b.Fatal(err)
					}
					for _, c := range cs {
						if !c.Pass && !strings.Contains(c.Name, "outbox") {
							b.Fatalf("audit at rest: FAIL [%s] %s: %s", c.Invariant, c.Name, c.Detail)
						}
					}
				}
			})
		})
	}
}

// dbNow is the database's clock.
func dbNow(tb testing.TB, bb bundle) time.Time {
	tb.Helper()
	var at time.Time
	if err := bb.pool.QueryRow(bb.ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
		tb.Fatal(err)
	}
	return at
}

// liveAudit runs one live audit and fails on a failed check.
func liveAudit(b *testing.B, bb bundle) {
	b.Helper()
	cs, err := bb.s.AuditLive(bb.ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range cs {
		if !c.Pass {
			b.Fatalf("live audit: FAIL [%s] %s: %s", c.Invariant, c.Name, c.Detail)
		}
	}
}

// placeTail places liveTail orders through PlaceOrder for users from
// user on; it returns the next user.
func placeTail(b *testing.B, bb bundle, user int64) int64 {
	b.Helper()
	for range liveTail {
		m := bb.msg(user, int16(user%64))
		raw, err := json.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		if out, err := bb.s.PlaceOrder(bb.ctx, uuid.Must(uuid.NewV7()), raw); err != nil || out.Code != flow.CodeOrderCreated {
			b.Fatalf("order of user %d: %+v, %v", user, out, err)
		}
		user++
	}
	return user
}

// loadHistory writes orders 1..n of the flow's SKU (64 buckets of 1<<20
// units): order i is user i's, in bucket i % 64, CREATED, with its item,
// its ORDERED reservation md5('r'||i), its ALLOCATE ledger row (the k-th
// allocation of a bucket, k = i / 64, finds k units allocated before it),
// its ORDER_CREATED event in the outbox history, and the buckets'
// counters moved to match, in one transaction.
func loadHistory(b *testing.B, bb bundle, n int) {
	b.Helper()
	s := pgx.Identifier{bb.s.Schema}.Sanitize()
	err := pgx.BeginFunc(bb.ctx, bb.pool, func(tx pgx.Tx) error {
		for _, q := range []string{
			`INSERT INTO ` + s + `.inventory_reservation (reservation_id, request_id, first_message_id, activity_id, sku_id,
			        user_id, inventory_bucket, quantity, order_id, status, redis_reserved_at, expires_at, ordered_at)
			 SELECT md5('r' || i)::uuid, md5('q' || i)::uuid, md5('m' || i)::uuid, 7, 70, i, i % 64, 1, i, 10,
			        now(), now() + interval '1 hour', now()
			   FROM generate_series(1, $1::bigint) AS i`,
			`INSERT INTO ` + s + `.inventory_ledger (idempotency_key, reservation_id, order_id, source_message_id, activity_id,
			        sku_id, user_id, inventory_bucket, ledger_type, available_delta, allocated_delta,
			        before_available, after_available, before_allocated, after_allocated, reason)
			 SELECT 'ALLOCATE:' || md5('r' || i)::uuid, md5('r' || i)::uuid, i, md5('m' || i)::uuid, 7, 70, i, i % 64, 10, -1, 1,
			        (1 << 20) - i / 64, (1 << 20) - i / 64 - 1, i / 64, i / 64 + 1, 'ORDER_CREATED'
			   FROM generate_series(1, $1::bigint) AS i
			  ORDER BY i`,
			`UPDATE ` + s + `.sku_inventory AS b
			    SET available_stock = available_stock - c.n, allocated_stock = allocated_stock + c.n
			   FROM (SELECT i % 64 AS bucket_no, count(*) AS n FROM generate_series(1, $1::bigint) AS i GROUP BY 1) AS c
			  WHERE b.activity_id = 7 AND b.sku_id = 70 AND b.bucket_no = c.bucket_no`,
			`INSERT INTO ` + s + `.orders (order_id, order_no, request_id, reservation_id, source_message_id, activity_id, sku_id,
			        user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at)
			 SELECT i, 'H' || i, md5('q' || i)::uuid, md5('r' || i)::uuid, md5('m' || i)::uuid, 7, 70, i, i % 64, 1, 1999, 1999, 'CNY', 10,
			        now() + interval '1 hour'
			   FROM generate_series(1, $1::bigint) AS i`,
			`INSERT INTO ` + s + `.order_items (order_id, line_no, activity_id, sku_id, sku_title, quantity, unit_price, line_amount)
			 SELECT i, 1, 7, 70, 'phone', 1, 1999, 1999 FROM generate_series(1, $1::bigint) AS i`,
			`INSERT INTO ` + s + `.event_outbox_history (event_id, seq, dedup_key, aggregate_type, aggregate_id, topic, tag, message_key,
			        schema_version, payload, status, sent_at)
			 SELECT md5('e' || i)::uuid, i, 'ORDER_CREATED:' || i, 'ORDER', i::text, '` + flow.EventTopic + `', '` + flow.TagOrderCreated + `', i::text,
			        1, '{}', 20, now()
			   FROM generate_series(1, $1::bigint) AS i`,
		} {
			if _, err := tx.Exec(bb.ctx, q, n); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	// What autovacuum does to a table that grew: statistics, and the BRIN
	// summaries of the block ranges written (the indexes' autosummarize
	// does it too, range by range, as they fill).
	if _, err := bb.pool.Exec(bb.ctx, `VACUUM ANALYZE `+s+`.inventory_ledger, `+s+`.inventory_reservation, `+s+`.orders, `+s+`.order_items, `+s+`.event_outbox_history`); err != nil {
		b.Fatal(err)
	}
}
