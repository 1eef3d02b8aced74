package sqlplan_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill/inbox"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/migrate"
	"github.com/seckillkit/seckill/order"
	"github.com/seckillkit/seckill/outbox"
)

// TestBRINIndexesSummariseThemselves: every BRIN index the four
// packages' migrations create has autosummarize on, so a block range is
// summarised when it fills, not at the table's next VACUUM (until then a
// scan of the index reads the whole range as a possible match). The
// migrations must create at least the seven known ones.
func TestBRINIndexesSummariseThemselves(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, time.Minute)
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	if _, err := migrate.Apply(ctx, pool, schema, outbox.Migrations, inbox.Migrations, order.Migrations, inventory.Migrations); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT c.relname, coalesce('autosummarize=on' = ANY (c.reloptions), false)
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_am am ON am.oid = c.relam
		WHERE n.nspname = $1 AND c.relkind = 'i' AND am.amname = 'brin'
		ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	type brin struct {
		Name string
		Auto bool
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[brin])
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, b := range all {
		seen[b.Name] = true
		if !b.Auto {
			t.Errorf("BRIN index %s: autosummarize is off", b.Name)
		}
	}
	for _, want := range []string{"idx_inbox_created_brin", "idx_inbox_history_processed_brin", "idx_ledger_created_brin",
		"idx_orders_updated_brin", "idx_outbox_history_sent_brin", "idx_payment_updated_brin", "idx_reservation_updated_brin"} {
		if !seen[want] {
			t.Errorf("BRIN index %s not found (found %v)", want, all)
		}
	}
}
