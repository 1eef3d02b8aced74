package order_test

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seckillkit/seckill/order"
)

// checkValues reads a CHECK constraint of the test schema and returns the
// integers of its IN list.
func (b testBundle) checkValues(t *testing.T, constraint string) []int {
	t.Helper()
	var def string
	err := b.pool.QueryRow(b.ctx, `SELECT pg_get_constraintdef(c.oid)
		FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
		WHERE n.nspname = $1 AND c.conname = $2`, b.schema, constraint).Scan(&def)
	if err != nil {
		t.Fatalf("read %s: %v", constraint, err)
	}
	var out []int
	for _, m := range regexp.MustCompile(`\d+`).FindAllString(def, -1) {
		v, _ := strconv.Atoi(m)
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

func TestStatusesMatchCheckConstraints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var orders []int
	for _, s := range order.Statuses() {
		orders = append(orders, int(s))
		if !s.Valid() || strings.HasPrefix(s.String(), "Status(") {
			t.Errorf("status %d has no name", s)
		}
	}
	if got := b.checkValues(t, "ck_orders_status"); !slices.Equal(got, orders) {
		t.Errorf("ck_orders_status allows %v, Go constants are %v", got, orders)
	}
	var pays []int
	for _, s := range order.PaymentStatuses() {
		pays = append(pays, int(s))
		if strings.HasPrefix(order.PaymentStatusName(s), "PaymentStatus(") {
			t.Errorf("payment status %d has no name", s)
		}
	}
	if got := b.checkValues(t, "ck_payment_status"); !slices.Equal(got, pays) {
		t.Errorf("ck_payment_status allows %v, Go constants are %v", got, pays)
	}
	if order.Status(0).Valid() || order.Status(70).String() != "Status(70)" {
		t.Error("unknown status treated as valid")
	}
	// Every status is reachable from CREATED through the table, and
	// CREATED is no target.
	reach := map[order.Status]bool{order.StatusCreated: true}
	for changed := true; changed; {
		changed = false
		for _, to := range order.Statuses() {
			for _, from := range order.AllowedFrom(to) {
				if reach[from] && !reach[to] {
					reach[to], changed = true, true
				}
			}
		}
	}
	if len(reach) != len(order.Statuses()) || len(order.AllowedFrom(order.StatusCreated)) != 0 {
		t.Errorf("reachable %v", reach)
	}
}
