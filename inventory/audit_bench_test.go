package inventory_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/pgtx"
)

// auditTail is the ledger rows written between two live audits in
// BenchmarkAuditHistory: the rows the incremental audit replays and a
// checkpoint sums.
const auditTail = 1000

// BenchmarkAuditHistory measures the audit of a SKU of 64 buckets whose
// ledger holds a history of 10,000 or 1,000,000 orders (one ALLOCATE row
// and one ORDERED reservation each) plus auditTail rows after the last
// checkpoint:
//
//   - full: Store.Audit, the replay of the whole ledger (at rest);
//   - incremental: Store.AuditIncremental, the checkpoint's sums plus the
//     auditTail rows after its watermark (the live audit);
//   - checkpoint: Store.Checkpoint moving the watermark over auditTail new
//     rows (written with the timer stopped), what a live audit does first.
//
// The history is written with INSERT … SELECT generate_series through the
// real tables (reservations, ledger rows whose before/after counters
// follow each bucket, the buckets' counters to match), so every audit of
// it is clean, which each iteration checks.
func BenchmarkAuditHistory(b *testing.B) {
	for _, orders := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("orders=%d", orders), func(b *testing.B) {
			ctx := context.Background()
			pool := pgtest.Pool(b)
			schema := pgtest.Schema(b)
			if _, err := migrate.Apply(ctx, pool, schema, inventory.Migrations); err != nil {
				b.Fatal(err)
			}
			store, err := inventory.New(inventory.Config{Schema: schema})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := store.Provision(ctx, pool, inventory.SKU{ActivityID: 1, SKUID: 1, Stock: 64 << 20, Buckets: 64}); err != nil {
				b.Fatal(err)
			}
			loadOrders(b, pool, schema, 1, orders)
			if _, err := store.Checkpoint(ctx, pool); err != nil {
				b.Fatal(err)
			}
			next := orders + 1
			loadOrders(b, pool, schema, next, auditTail)
			next += auditTail
			b.Run("full", func(b *testing.B) {
				for range b.N {
					clean(b, store.Audit, pool)
				}
			})
			b.Run("incremental", func(b *testing.B) {
				for range b.N {
					clean(b, store.AuditIncremental, pool)
				}
			})
			b.Run("checkpoint", func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					loadOrders(b, pool, schema, next, auditTail)
					next += auditTail
					b.StartTimer()
					if _, err := store.Checkpoint(ctx, pool); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// clean runs one audit of SKU 1 of activity 1 and fails on a finding.
func clean(b *testing.B, audit func(context.Context, pgtx.Querier, int64, int64) ([]inventory.Finding, error), pool *pgxpool.Pool) {
	b.Helper()
	f, err := audit(context.Background(), pool, 1, 1)
	if err != nil || len(f) != 0 {
		b.Fatalf("audit: %d findings (%v), %v", len(f), f[:min(len(f), 3)], err)
	}
}

// loadOrders writes orders from..from+n-1 of SKU 1 of activity 1 (64
// buckets, provisioned with 1<<20 units each): order i is reservation
// md5('r'||i) of user i in bucket i % 64, ORDERED, with its ALLOCATE
// ledger row, and the bucket counters move to match, in one transaction.
func loadOrders(b *testing.B, pool *pgxpool.Pool, schema string, from, n int) {
	b.Helper()
	s := pgx.Identifier{schema}.Sanitize()
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		for _, q := range []string{
			`INSERT INTO ` + s + `.inventory_reservation (reservation_id, request_id, first_message_id, activity_id, sku_id,
			        user_id, inventory_bucket, quantity, order_id, status, redis_reserved_at, expires_at, ordered_at)
			 SELECT md5('r' || i)::uuid, md5('q' || i)::uuid, md5('m' || i)::uuid, 1, 1, i, i % 64, 1, i, 10,
			        now(), now() + interval '1 hour', now()
			   FROM generate_series($1::bigint, $1::bigint + $2 - 1) AS i`,
			// The k-th allocation of a bucket (k = i / 64) finds k units
			// allocated before it.
			`INSERT INTO ` + s + `.inventory_ledger (idempotency_key, reservation_id, order_id, source_message_id, activity_id,
			        sku_id, user_id, inventory_bucket, ledger_type, available_delta, allocated_delta,
			        before_available, after_available, before_allocated, after_allocated, reason)
			 SELECT 'ALLOCATE:' || md5('r' || i)::uuid, md5('r' || i)::uuid, i, md5('m' || i)::uuid, 1, 1, i, i % 64, 10, -1, 1,
			        (1 << 20) - i / 64, (1 << 20) - i / 64 - 1, i / 64, i / 64 + 1, 'ORDER_CREATED'
			   FROM generate_series($1::bigint, $1::bigint + $2 - 1) AS i
			  ORDER BY i`,
			`UPDATE ` + s + `.sku_inventory AS b
			    SET available_stock = available_stock - c.n, allocated_stock = allocated_stock + c.n
			   FROM (SELECT i % 64 AS bucket_no, count(*) AS n FROM generate_series($1::bigint, $1::bigint + $2 - 1) AS i GROUP BY 1) AS c
			  WHERE b.activity_id = 1 AND b.sku_id = 1 AND b.bucket_no = c.bucket_no`,
		} {
			if _, err := tx.Exec(context.Background(), q, from, n); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `ANALYZE `+s+`.inventory_ledger, `+s+`.inventory_reservation`); err != nil {
		b.Fatal(err)
	}
}
