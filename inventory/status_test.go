package inventory_test

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seckillkit/seckill/inventory"
)

// checkValues reads a CHECK constraint's definition and returns the
// numbers of its IN list.
func (tb testBundle) checkValues(t *testing.T, constraint string) []int {
	t.Helper()
	var def string
	err := tb.pool.QueryRow(tb.ctx, `
SELECT pg_get_constraintdef(c.oid)
  FROM pg_constraint AS c JOIN pg_namespace AS n ON n.oid = c.connamespace
 WHERE n.nspname = $1 AND c.conname = $2`, tb.schema, constraint).Scan(&def)
	if err != nil {
		t.Fatalf("read %s: %v", constraint, err)
	}
	var out []int
	for _, m := range regexp.MustCompile(`\d+`).FindAllString(def, -1) {
		n, _ := strconv.Atoi(m)
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func TestStatusConstantsMatchChecks(t *testing.T) {
	t.Parallel()
	tb := setup(t)

	var statuses []int
	for _, s := range inventory.ReservationStatuses() {
		statuses = append(statuses, int(s))
		if !inventory.ValidStatus(s) || strings.HasPrefix(s.String(), "ReservationStatus(") {
			t.Errorf("status %d: Valid/String broken", s)
		}
	}
	if got := tb.checkValues(t, "ck_reservation_status"); !slices.Equal(got, statuses) {
		t.Errorf("ck_reservation_status %v, constants %v", got, statuses)
	}
	var types []int
	types = inventory.LedgerTypeCodes()
	if got := tb.checkValues(t, "ck_ledger_type"); !slices.Equal(got, types) {
		t.Errorf("ck_ledger_type %v, constants %v", got, types)
	}

	names := map[string]bool{}
	for _, s := range inventory.ReservationStatuses() {
		names[s.String()] = true
	}
	for _, want := range []string{"PENDING_DB", "ORDERED", "REJECTED", "RELEASE_PENDING", "RELEASED", "EXPIRED", "MANUAL_REQUIRED"} {
		if !names[want] {
			t.Errorf("no status named %s", want)
		}
	}
	if inventory.ValidStatus(inventory.ReservationStatus(5)) || inventory.ReservationStatus(5).String() != "ReservationStatus(5)" {
		t.Error("status 5 should be invalid")
	}
	if inventory.LedgerTypeName(30) != inventory.LedgerAdjust || inventory.LedgerTypeName(1) != "LedgerType(1)" {
		t.Error("LedgerType.String broken")
	}
}

// The transition table is the one the package documents, spelled out
// independently here.
func TestTransitionTable(t *testing.T) {
	t.Parallel()
	want := map[inventory.ReservationStatus][]inventory.ReservationStatus{
		inventory.StatusPendingDB:      nil,
		inventory.StatusOrdered:        {inventory.StatusPendingDB},
		inventory.StatusRejected:       {inventory.StatusPendingDB},
		inventory.StatusReleasePending: {inventory.StatusOrdered},
		inventory.StatusReleased:       {inventory.StatusOrdered, inventory.StatusReleasePending},
		inventory.StatusExpired:        {inventory.StatusPendingDB},
		inventory.StatusManualRequired: {inventory.StatusPendingDB, inventory.StatusOrdered, inventory.StatusReleasePending},
	}
	for _, to := range inventory.ReservationStatuses() {
		got := inventory.AllowedFrom(to)
		if !slices.Equal(got, want[to]) {
			t.Errorf("AllowedFrom(%s) = %v, want %v", to, got, want[to])
		}
		if got != nil {
			got[0] = 99 // a copy: must not change the table
		}
		for _, from := range inventory.ReservationStatuses() {
			if inventory.CanTransition(from, to) != slices.Contains(want[to], from) {
				t.Errorf("CanTransition(%s, %s) = %v", from, to, !slices.Contains(want[to], from))
			}
		}
	}
}
