package sqlplan_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/internal/sqlfile"
	"github.com/seckillkit/seckill/internal/sqlplan"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
)

var update = flag.Bool("update", false, "rewrite docs/sql.md with the plans of TestPlans")

func TestMain(m *testing.M) { pgtest.Main(m) }

// docPath is docs/sql.md, from this package's directory.
const docPath = "../../docs/sql.md"

// converted are the packages whose statements live in sql/*.sql, in the
// order docs/sql.md lists them.
var converted = []string{"outbox", "inbox", "order", "inventory", "pgtx", "migrate"}

// packages parses the sql/*.sql files of the converted packages from the
// module root, so that their paths read outbox/sql/claim.sql.
func packages(t *testing.T) []sqlplan.Package {
	t.Helper()
	var out []sqlplan.Package
	for _, name := range converted {
		set, err := sqlfile.Parse(os.DirFS("../.."), name+"/sql")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sqlplan.Package{Name: name, Set: set})
	}
	return out
}

// largeTable is the size from which a sequential scan of a table is a
// finding: every table the load fills holds more rows.
const largeTable = 10000

// load fills the tables of schema with a realistic volume: a million SENT
// outbox events, some ready (a fifth of them with an ordering key),
// retrying, sending and dead ones, an archive; inbox rows, processed and
// claimed; orders paid, live, expired, paying and cancelled, with their
// items, payments and reviews; a sale's inventory (see loadInventory).
// generate_series, one statement per kind.
func load(t *testing.T, ctx context.Context, conn *pgx.Conn, schema string) {
	t.Helper()
	s := pgx.Identifier{schema}.Sanitize()
	start := time.Now()
	// The tables are made unlogged first (children before the table they
	// reference): a throwaway schema needs no WAL, and the planner does
	// not look at persistence. Event ids are time-ordered, as the UUIDv7
	// ids Enqueue gives them.
	for _, q := range []string{
		`SET synchronous_commit = off`,
		`SET session_replication_role = replica`, // no foreign-key triggers: the load is consistent
		`ALTER TABLE ` + s + `.event_outbox SET UNLOGGED`,
		`ALTER TABLE ` + s + `.event_outbox_history SET UNLOGGED`,
		`ALTER TABLE ` + s + `.consumer_inbox SET UNLOGGED`,
		`ALTER TABLE ` + s + `.consumer_inbox_history SET UNLOGGED`,
		`ALTER TABLE ` + s + `.order_items SET UNLOGGED`,
		`ALTER TABLE ` + s + `.payment_record SET UNLOGGED`,
		`ALTER TABLE ` + s + `.payment_review SET UNLOGGED`,
		`ALTER TABLE ` + s + `.orders SET UNLOGGED`,
		`INSERT INTO ` + s + `.event_outbox (event_id, dedup_key, aggregate_type, aggregate_id, topic, message_key,
		   schema_version, payload, status, available_at, sent_at, created_at, updated_at)
		 SELECT ('01890000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'sent-' || lpad(g::text, 8, '0'), 'order', (g % 100000)::text, 'order.created', (g % 100000)::text,
		   1, '{"n":1}', 20, now() - interval '3 days', now() - interval '2 days' + g * interval '100 ms',
		   now() - interval '3 days' + g * interval '100 ms', now() - interval '2 days'
		 FROM generate_series(1, 1000000) AS g`,
		`INSERT INTO ` + s + `.event_outbox (event_id, dedup_key, aggregate_type, aggregate_id, topic, message_key,
		   ordering_key, schema_version, payload, status, available_at)
		 SELECT ('01900000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'ready-' || g, 'order', g::text, 'order.created', g::text,
		   CASE WHEN g % 5 = 0 THEN 'key-' || (g % 300) END, 1, '{"n":1}', 0, now() - interval '1 second'
		 FROM generate_series(1, 5000) AS g`,
		`INSERT INTO ` + s + `.event_outbox (event_id, dedup_key, aggregate_type, aggregate_id, topic, message_key,
		   schema_version, payload, status, retry_count, last_error, available_at)
		 SELECT gen_random_uuid(), 'retry-' || g, 'order', g::text, 'order.created', g::text,
		   1, '{"n":1}', 30, 1, 'broker down', now() + interval '1 minute'
		 FROM generate_series(1, 500) AS g`,
		`INSERT INTO ` + s + `.event_outbox (event_id, dedup_key, aggregate_type, aggregate_id, topic, message_key,
		   schema_version, payload, status, locked_by, locked_at)
		 SELECT gen_random_uuid(), 'sending-' || g, 'order', g::text, 'order.created', g::text,
		   1, '{"n":1}', 10, 'relay-' || (g % 4), now() - interval '10 seconds'
		 FROM generate_series(1, 300) AS g`,
		`INSERT INTO ` + s + `.event_outbox (event_id, dedup_key, aggregate_type, aggregate_id, topic, message_key,
		   schema_version, payload, status, retry_count, max_retry, last_error)
		 SELECT gen_random_uuid(), 'dead-' || g, 'order', g::text, 'order.created', g::text,
		   1, '{"n":1}', 40, 16, 16, 'poison'
		 FROM generate_series(1, 100) AS g`,
		`INSERT INTO ` + s + `.event_outbox_history (event_id, seq, dedup_key, aggregate_type, aggregate_id, topic, message_key,
		   schema_version, payload, status, sent_at)
		 SELECT gen_random_uuid(), -g, 'old-' || g, 'order', g::text, 'order.created', g::text, 1, '{"n":1}', 20,
		   now() - interval '60 days' + g * interval '5 s'
		 FROM generate_series(1, 20000) AS g`,
		`INSERT INTO ` + s + `.consumer_inbox (consumer_group, message_id, topic, message_key, status, result_code,
		   result_payload, created_at, processed_at)
		 SELECT 'group-' || (g % 5), ('01960000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'order.created', g::text, 20, 'OK', '{"ok":true}',
		   now() - interval '30 days' + g * interval '2.5 s', now() - interval '30 days' + g * interval '2.5 s'
		 FROM generate_series(1, 1000000) AS g`,
		`INSERT INTO ` + s + `.consumer_inbox (consumer_group, message_id, topic, status)
		 SELECT 'group-' || (g % 5), gen_random_uuid(), 'order.created', 10 FROM generate_series(1, 1000) AS g`,
		`INSERT INTO ` + s + `.consumer_inbox_history (consumer_group, message_id, topic, status, result_code, created_at, processed_at)
		 SELECT 'group-' || (g % 5), gen_random_uuid(), 'order.created', 20, 'OK',
		   now() - interval '90 days', now() - interval '90 days' FROM generate_series(1, 20000) AS g`,
		// Orders: g % 100 < 80 paid, < 85 live (unpaid, not expired), < 87
		// expired (unpaid), < 90 paying, else cancelled.
		`INSERT INTO ` + s + `.orders (order_id, order_no, request_id, reservation_id, source_message_id, activity_id,
		   sku_id, user_id, inventory_bucket, quantity, unit_price, total_amount, currency, status, expire_at,
		   paid_at, cancelled_at, cancel_reason, created_at)
		 SELECT g, 'NO' || g, ('01910000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid,
		   ('01920000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid,
		   ('01930000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 1 + g % 10, 1 + g % 50, g % 30011, g % 8,
		   1, 990, 990, 'CNY',
		   CASE WHEN g % 100 < 80 THEN 30 WHEN g % 100 < 87 THEN 10 WHEN g % 100 < 90 THEN 20 ELSE 40 END,
		   CASE WHEN g % 100 BETWEEN 85 AND 86 THEN now() - interval '1 minute' ELSE now() + interval '15 minutes' END,
		   CASE WHEN g % 100 < 80 THEN now() - interval '1 hour' END,
		   CASE WHEN g % 100 >= 90 THEN now() - interval '1 hour' END,
		   CASE WHEN g % 100 >= 90 THEN 'PAY_TIMEOUT' END,
		   now() - interval '2 hours'
		 FROM generate_series(1, 100000) AS g`,
		`INSERT INTO ` + s + `.order_items (order_id, line_no, activity_id, sku_id, sku_title, quantity, unit_price, line_amount)
		 SELECT order_id, 1, activity_id, sku_id, 'item', 1, unit_price, total_amount FROM ` + s + `.orders`,
		`INSERT INTO ` + s + `.payment_record (payment_id, payment_request_id, order_id, provider, provider_trade_no,
		   callback_id, amount, currency, status, paid_at)
		 SELECT ('01940000-0000-4000-8000-' || lpad(to_hex(order_id), 12, '0'))::uuid,
		   ('01950000-0000-4000-8000-' || lpad(to_hex(order_id), 12, '0'))::uuid, order_id, 'alipay', 'T' || order_id, 'C' || order_id, total_amount,
		   currency, 20, paid_at FROM ` + s + `.orders WHERE status = 30`,
		`INSERT INTO ` + s + `.payment_review (provider, provider_trade_no, order_id, amount, currency, reason, status,
		   resolution, resolved_by, resolved_at)
		 SELECT 'alipay', 'R' || g, g, 990, 'CNY', 'SECOND_TRADE', CASE WHEN g % 40 = 0 THEN 0 ELSE 10 END,
		   CASE WHEN g % 40 <> 0 THEN 'refunded' END, CASE WHEN g % 40 <> 0 THEN 'ops' END,
		   CASE WHEN g % 40 <> 0 THEN now() END
		 FROM generate_series(1, 20000) AS g`,
	} {
		run(t, ctx, conn, q)
	}
	loadInventory(t, ctx, conn, s)
	for _, q := range []string{
		`SET session_replication_role = DEFAULT`,
		`ANALYZE ` + s + `.event_outbox, ` + s + `.event_outbox_history, ` + s + `.consumer_inbox, ` +
			s + `.consumer_inbox_history, ` + s + `.orders, ` + s + `.order_items, ` + s + `.payment_record, ` + s + `.payment_review, ` +
			s + `.inventory_sku, ` + s + `.sku_inventory, ` + s + `.inventory_reservation, ` + s + `.inventory_ledger, ` + s + `.inventory_sale_log, ` +
			s + `.inventory_token`,
	} {
		run(t, ctx, conn, q)
	}
	t.Logf("loaded and analyzed in %s", time.Since(start).Round(time.Millisecond))
}

// run executes one statement of a load, logging the slow ones.
func run(t *testing.T, ctx context.Context, conn *pgx.Conn, q string) {
	t.Helper()
	at := time.Now()
	if _, err := conn.Exec(ctx, q); err != nil {
		t.Fatalf("load: %v\n%s", err, q)
	}
	if d := time.Since(at); d > time.Second {
		t.Logf("load: %s: %s", d.Round(time.Millisecond), strings.Join(strings.Fields(q), " ")[:60])
	}
}

// loadInventory fills the inventory tables of s (quoted) with a sale's
// worth: 20,000 SKUs of 10 activities, the first 50 split into 256
// buckets and the others into 4 (92,600 buckets), each with its
// PROVISION ledger row; 200,000 reservations on the 256-bucket SKUs
// (g % 100 < 70 ordered, < 80 pending and live, < 82 pending and
// expired, < 85 release pending, < 95 released, else rejected) with the
// ALLOCATE ledger row of every one that took stock and the RELEASE row
// of every released one; a sale log of three changes per SKU; 10 token
// SKUs of 10,000 tokens each (SKU.Tokens), the first 3,000 of each held. The
// SKUs are on sale. FK triggers are off (session_replication_role):
// the load is consistent.
func loadInventory(t *testing.T, ctx context.Context, conn *pgx.Conn, s string) {
	t.Helper()
	for _, q := range []string{
		`ALTER TABLE ` + s + `.inventory_ledger SET UNLOGGED`,
		`ALTER TABLE ` + s + `.inventory_sale_log SET UNLOGGED`,
		`ALTER TABLE ` + s + `.inventory_reservation SET UNLOGGED`,
		`INSERT INTO ` + s + `.inventory_sku (activity_id, sku_id, planned_stock, bucket_count, sale_status, sale_version)
		 SELECT 1 + g % 10, g, CASE WHEN g <= 50 THEN 25600 ELSE 400 END, CASE WHEN g <= 50 THEN 256 ELSE 4 END, 10, 3
		 FROM generate_series(1, 20000) AS g`,
		`INSERT INTO ` + s + `.sku_inventory (activity_id, sku_id, bucket_no, total_stock, available_stock, allocated_stock, version)
		 SELECT k.activity_id, k.sku_id, b, 100, 100, 0, 0
		 FROM ` + s + `.inventory_sku AS k, generate_series(0, k.bucket_count - 1) AS b`,
		`INSERT INTO ` + s + `.inventory_ledger (idempotency_key, activity_id, sku_id, inventory_bucket, ledger_type,
		   total_delta, available_delta, allocated_delta, before_available, after_available, before_allocated, after_allocated, reason)
		 SELECT 'PROVISION:' || activity_id || ':' || sku_id || ':' || bucket_no, activity_id, sku_id, bucket_no, 40,
		   100, 100, 0, 0, 100, 0, 0, 'PROVISION'
		 FROM ` + s + `.sku_inventory`,
		`INSERT INTO ` + s + `.inventory_reservation (reservation_id, request_id, first_message_id, activity_id, sku_id,
		   user_id, inventory_bucket, quantity, order_id, status, failure_code, redis_reserved_at, expires_at, ordered_at, released_at)
		 SELECT ('01a00000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, ('01a10000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid,
		   ('01a20000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 1 + (1 + g % 50) % 10, 1 + g % 50, g, (g / 50) % 256, 1,
		   CASE WHEN g % 100 < 70 OR g % 100 BETWEEN 82 AND 94 THEN g END,
		   CASE WHEN g % 100 < 70 THEN 10 WHEN g % 100 < 82 THEN 0 WHEN g % 100 < 85 THEN 30 WHEN g % 100 < 95 THEN 40 ELSE 20 END,
		   CASE WHEN g % 100 >= 95 THEN 'SOLD_OUT' END,
		   now() - interval '10 minutes',
		   CASE WHEN g % 100 BETWEEN 80 AND 81 THEN now() - interval '1 minute' ELSE now() + interval '5 minutes' END,
		   CASE WHEN g % 100 < 70 OR g % 100 BETWEEN 82 AND 94 THEN now() - interval '9 minutes' END,
		   CASE WHEN g % 100 BETWEEN 85 AND 94 THEN now() - interval '1 minute' END
		 FROM generate_series(1, 200000) AS g`,
		`INSERT INTO ` + s + `.inventory_ledger (idempotency_key, reservation_id, order_id, source_message_id, activity_id, sku_id,
		   user_id, inventory_bucket, ledger_type, available_delta, allocated_delta, before_available, after_available,
		   before_allocated, after_allocated, reason, created_at)
		 SELECT 'ALLOCATE:' || reservation_id, reservation_id, order_id, first_message_id, activity_id, sku_id, user_id,
		   inventory_bucket, 10, -1, 1, 50, 49, 10, 11, 'ORDER_CREATED', now() - interval '9 minutes'
		 FROM ` + s + `.inventory_reservation WHERE status IN (10, 30, 40)`,
		`INSERT INTO ` + s + `.inventory_ledger (idempotency_key, reservation_id, order_id, source_message_id, activity_id, sku_id,
		   user_id, inventory_bucket, ledger_type, available_delta, allocated_delta, before_available, after_available,
		   before_allocated, after_allocated, reason, created_at)
		 SELECT 'RELEASE:' || reservation_id, reservation_id, order_id, first_message_id, activity_id, sku_id, user_id,
		   inventory_bucket, 20, 1, -1, 49, 50, 11, 10, 'ORDER_CANCELLED', now() - interval '1 minute'
		 FROM ` + s + `.inventory_reservation WHERE status = 40`,
		`INSERT INTO ` + s + `.inventory_sku (activity_id, sku_id, planned_stock, bucket_count, sale_status, sale_version, token_stock)
		 SELECT 1 + g % 10, g, 10000, 1, 10, 0, true FROM generate_series(20001, 20010) AS g`,
		`INSERT INTO ` + s + `.inventory_token (activity_id, sku_id, token_no, reservation_id, version)
		 SELECT k.activity_id, k.sku_id, n,
		   CASE WHEN n < 3000 THEN ('01a30000-0000-4000-8000-' || lpad(to_hex(k.sku_id * 10000 + n), 12, '0'))::uuid END,
		   CASE WHEN n < 3000 THEN 1 ELSE 0 END
		 FROM ` + s + `.inventory_sku AS k, generate_series(0, k.planned_stock - 1) AS n WHERE k.token_stock`,
		`INSERT INTO ` + s + `.inventory_sale_log (activity_id, sku_id, from_status, to_status, operator, reason, sale_version)
		 SELECT activity_id, sku_id, CASE WHEN v = 2 THEN 20 ELSE 10 END, CASE WHEN v = 2 THEN 10 ELSE 20 END, 'ops', 'plan', v
		 FROM ` + s + `.inventory_sku, generate_series(1, 3) AS v`,
	} {
		run(t, ctx, conn, q)
	}
}

// largeTables returns the tables of schema holding at least largeTable
// rows, as ANALYZE counted them.
func largeTables(t *testing.T, ctx context.Context, conn *pgx.Conn, schema string) map[string]bool {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' AND c.reltuples >= $2`, schema, largeTable)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// TestPlans migrates a throwaway schema, loads a realistic volume and
// explains the generic plan of every named statement of the converted
// packages: each must use the index its header names and read no large
// table by a sequential scan its header does not allow. With -update it
// rewrites docs/sql.md with the plans.
func TestPlans(t *testing.T) {
	ctx := pgtest.Context(t, 5*time.Minute)
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	if _, err := migrate.Apply(ctx, pool, schema, outbox.Migrations, inbox.Migrations, order.Migrations, inventory.Migrations); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Conn(t)
	load(t, ctx, conn, schema)
	large := largeTables(t, ctx, conn, schema)
	for _, want := range []string{"event_outbox", "event_outbox_history", "consumer_inbox", "orders", "order_items", "payment_record", "payment_review",
		"inventory_sku", "sku_inventory", "inventory_reservation", "inventory_ledger", "inventory_sale_log"} {
		if !large[want] {
			t.Fatalf("the load left %s small (large tables: %v)", want, large)
		}
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	plans := map[string]string{}
	explained := 0
	for _, pkg := range packages(t) {
		bound := pkg.Set.Bind(quoted)
		for _, st := range pkg.Set.Statements() {
			if st.NotExplained != "" {
				continue
			}
			p, err := sqlplan.Explain(ctx, conn, quoted, bound.Get(st.Name), st.ExplainWith)
			if err != nil {
				t.Errorf("%s.%s: %v", pkg.Name, st.Name, err)
				continue
			}
			explained++
			plans[pkg.Name+"."+st.Name] = p.Text
			for _, problem := range sqlplan.Check(st, p, large) {
				t.Errorf("%s.%s\nplan:\n%s", pkg.Name, problem, p.Text)
			}
			t.Logf("%s.%s: uses %s; seq scans %s", pkg.Name, st.Name, strings.Join(p.Indexes, ", "), strings.Join(p.SeqScans, ", "))
		}
	}
	if explained < 100 {
		t.Errorf("explained only %d statements", explained)
	}

	// The mutation evidence: with an intended index dropped (in a
	// transaction rolled back afterwards), the check reports it.
	t.Run("DroppedIndexIsReported", func(t *testing.T) {
		for _, c := range []struct {
			pkg, statement, index string
			want                  []string
		}{
			{"outbox", "claim", "idx_outbox_ready", []string{"does not use its intended index idx_outbox_ready"}},
			{"outbox", "recover", "idx_outbox_stale_sending", []string{"does not use its intended index idx_outbox_stale_sending"}},
			{"order", "cancel_expired", "idx_orders_expirable", []string{"does not use its intended index idx_orders_expirable", "reads the large table orders by a sequential scan"}},
			{"order", "payments", "idx_payment_order_created", []string{"does not use its intended index idx_payment_order_created", "reads the large table payment_record by a sequential scan"}},
			{"inventory", "expire", "idx_reservation_pending_expire", []string{"does not use its intended index idx_reservation_pending_expire", "reads the large table inventory_reservation by a sequential scan"}},
			{"inventory", "ledger_by_reservation", "idx_ledger_reservation", []string{"does not use its intended index idx_ledger_reservation", "reads the large table inventory_ledger by a sequential scan"}},
		} {
			problems := droppedIndex(t, ctx, conn, schema, c.pkg, c.statement, c.index, large)
			for _, w := range c.want {
				if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, w) }) {
					t.Errorf("%s.%s without %s: the check reported %q, want a problem containing %q", c.pkg, c.statement, c.index, problems, w)
				}
			}
			t.Logf("%s.%s without %s: %s", c.pkg, c.statement, c.index, strings.Join(problems, "; "))
		}
	})

	if *update {
		if err := os.WriteFile(docPath, []byte(sqlplan.Doc(packages(t), plans)), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", docPath)
	}
}

// droppedIndex drops index in a transaction, explains the statement, rolls
// back and returns what the check reported.
func droppedIndex(t *testing.T, ctx context.Context, conn *pgx.Conn, schema, pkg, name, index string, large map[string]bool) []string {
	t.Helper()
	var set *sqlfile.Set
	for _, p := range packages(t) {
		if p.Name == pkg {
			set = p.Set
		}
	}
	st, ok := set.Lookup(name)
	if !ok {
		t.Fatalf("no statement %s.%s", pkg, name)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "DROP INDEX "+pgx.Identifier{schema, index}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	p, err := sqlplan.Explain(ctx, conn, quoted, set.Bind(quoted).Get(name), st.ExplainWith)
	if err != nil {
		t.Fatal(err)
	}
	return sqlplan.Check(st, p, large)
}

// TestSQLDocIsCurrent fails when docs/sql.md no longer matches the
// sql/*.sql files: it renders the file from them, keeping the plans the
// file holds (plans are rewritten only by TestPlans -update), and compares.
func TestSQLDocIsCurrent(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatalf("%v: generate it with go test ./internal/sqlplan/ -run TestPlans -update", err)
	}
	have := string(b)
	want := sqlplan.Doc(packages(t), sqlplan.Plans(have))
	if sqlplan.StripPlans(have) != sqlplan.StripPlans(want) {
		t.Fatalf("docs/sql.md is stale: regenerate it with go test ./internal/sqlplan/ -run TestPlans -update\n%s", firstDiff(sqlplan.StripPlans(have), sqlplan.StripPlans(want)))
	}
	if have != want {
		t.Fatal("docs/sql.md: a plan block is malformed or a statement has none: regenerate it with go test ./internal/sqlplan/ -run TestPlans -update")
	}
	for _, pkg := range packages(t) {
		for _, st := range pkg.Set.Statements() {
			if p := sqlplan.Plans(have)[pkg.Name+"."+st.Name]; st.NotExplained == "" && (p == "" || p == "(not explained)") {
				t.Errorf("docs/sql.md has no plan for %s.%s: regenerate it", pkg.Name, st.Name)
			}
		}
	}
}

// firstDiff shows the first line where a and b differ.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  file: %s\n  want: %s", i+1, x, y)
		}
	}
	return ""
}

func itoa(i int) string {
	return strings.TrimSpace(strings.Replace(time.Duration(i).String(), "ns", "", 1))
}
