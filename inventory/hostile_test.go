package inventory_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// hostile are strings an attacker would try through a text parameter.
var hostile = []string{
	`'; DROP TABLE inventory_ledger; --`, `"quoted"`, `$1`, `' OR '1'='1`, `\`, `%s%d%!`, `);--`, `{schema}`,
	`"; TRUNCATE sku_inventory CASCADE; --`, "é主🚀\u200b", `E'\x41'`, "tab\tnew\nline",
}

// TestEveryEntryPointRejectsInvalidInput covers what
// TestInvalidInputWritesNothing (validate_test.go) does not: PickBucket's
// count, nil batches on every Queue* helper (they panicked before),
// reasons and failure codes that are not storable text (NUL, invalid
// UTF-8), and the reads, which answer an invalid id with their documented
// not-found sentinel (or nothing) after one harmless SELECT. Nothing is
// written: the ledger, buckets and reservations are counted before and
// after. Covered elsewhere: New (TestNewRejectsBadSchema), Provision,
// AcquireReservation, AllocateBucket, Release, TransitionReservation,
// Rebalance, Audit and their Queue forms with invalid fields and nil dst
// (TestInvalidInputWritesNothing). A nil pgx.Tx or pgtx.Querier is a
// programming error that panics at once, before anything is sent, like
// any nil interface.
func TestEveryEntryPointRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, 10, 2)
	rows := func() int64 {
		return tb.count(t, `SELECT (SELECT count(*) FROM `+tb.table("inventory_ledger")+`) + (SELECT count(*) FROM `+
			tb.table("inventory_reservation")+`) + (SELECT sum(version) FROM `+tb.table("sku_inventory")+`)`)
	}
	before := rows()
	isInvalid := func(name string, err error) {
		t.Helper()
		var ve *inventory.Error
		if !errors.Is(err, inventory.ErrInvalidArgument) || !errors.As(err, &ve) {
			t.Errorf("%s: %v, want a *ValidationError", name, err)
		}
	}
	for _, n := range []int{0, -1, inventory.MaxBuckets + 1} {
		_, err := inventory.PickBucket("k", n)
		isInvalid("PickBucket", err)
	}
	r := tb.newReservation(1, 1, 0)
	id := r.ReservationID
	isInvalid("QueueAcquireReservation(nil batch)", tb.store.QueueAcquireReservation(nil, r, new(inventory.Acquired), pgtx.Return))
	isInvalid("QueueAllocateBucket(nil batch)", tb.store.QueueAllocateBucket(nil, inventory.Allocation{
		Request: seckill.Request{ReservationID: id, ActivityID: 1, SKUID: 1, Quantity: 1, UserID: 1, MessageID: id},
	}, new(inventory.Allocated), pgtx.Return))
	isInvalid("QueueReleaseStock(nil batch)", tb.store.QueueReleaseStock(nil, inventory.StockRelease{Request: seckill.Request{ReservationID: id}}, new(inventory.Allocated), pgtx.Return))
	isInvalid("QueueTransitionReservation(nil batch)", tb.store.QueueTransitionReservation(nil,
		inventory.Transition{ReservationID: id, To: inventory.StatusRejected}, new(inventory.Reservation), pgtx.Return))

	var b pgx.Batch
	for _, code := range []string{"a\x00b", "\xff", strings.Repeat("x", inventory.MaxCodeLength+1)} {
		isInvalid("QueueAllocateBucket(reason)", tb.store.QueueAllocateBucket(&b, inventory.Allocation{
			Request: seckill.Request{ReservationID: id, ActivityID: 1, SKUID: 1, Quantity: 1, UserID: 1, MessageID: id},
			Reason:  code,
		}, new(inventory.Allocated), pgtx.Return))
		isInvalid("QueueReleaseStock(reason)", tb.store.QueueReleaseStock(&b, inventory.StockRelease{Request: seckill.Request{ReservationID: id}, Reason: code}, new(inventory.Allocated), pgtx.Return))
		isInvalid("QueueTransitionReservation(failure code)", tb.store.QueueTransitionReservation(&b,
			inventory.Transition{ReservationID: id, To: inventory.StatusRejected, FailureCode: code}, new(inventory.Reservation), pgtx.Return))
		err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			_, err := tb.store.Rebalance(tb.ctx, tx, inventory.RebalanceRequest{ActivityID: 1, SKUID: 1, Reason: code})
			return err
		})
		isInvalid("Rebalance(reason)", err)
	}
	if b.Len() != 0 {
		t.Errorf("%d statements queued for invalid input", b.Len())
	}

	// Reads: an invalid id finds nothing and says so with the sentinel.
	if _, err := tb.store.GetBucket(tb.ctx, tb.pool, 0, 1, 0); !errors.Is(err, inventory.ErrUnknownBucket) {
		t.Errorf("GetBucket(activity 0): %v, want ErrUnknownBucket", err)
	}
	if _, err := tb.store.GetBucket(tb.ctx, tb.pool, 1, 1, -1); !errors.Is(err, inventory.ErrUnknownBucket) {
		t.Errorf("GetBucket(bucket -1): %v, want ErrUnknownBucket", err)
	}
	if _, err := tb.store.Stock(tb.ctx, tb.pool, -1, 0); !errors.Is(err, inventory.ErrUnknownSKU) {
		t.Errorf("SKUTotals(-1, 0): %v, want ErrUnknownSKU", err)
	}
	if _, err := tb.store.GetReservation(tb.ctx, tb.pool, uuid.Nil); !errors.Is(err, inventory.ErrReservationNotFound) {
		t.Errorf("GetReservation(nil): %v, want ErrReservationNotFound", err)
	}
	if bs, err := inventory.BucketsOf(tb.store, tb.ctx, tb.pool, 0, 0); err != nil || len(bs) != 0 {
		t.Errorf("Buckets(0, 0) = %v, %v; want none", bs, err)
	}
	if l, err := tb.store.ReservationLedger(tb.ctx, tb.pool, uuid.Nil); err != nil || len(l) != 0 {
		t.Errorf("ReservationLedger(nil) = %v, %v; want none", l, err)
	}
	if after := rows(); after != before {
		t.Errorf("invalid calls changed the tables: %d → %d", before, after)
	}
}

// TestNoSQLInjection sends hostile strings through every string-taking
// entry point — the ledger reason of AllocateBucket, Release and Rebalance,
// the failure code of TransitionReservation, and PickBucket's key — and
// checks that each is stored and read back verbatim (or rejected with a
// *ValidationError when too long), and that the schema's tables are intact.
func TestNoSQLInjection(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.provision(t, 1, 1, int32(4*len(hostile)), 4)
	for _, h := range append(hostile, strings.Repeat("'", inventory.MaxCodeLength+1)) {
		if _, err := inventory.PickBucket(h, 4); err != nil {
			t.Fatalf("PickBucket(%q): %v", h, err)
		}
		tooLong := len([]rune(h)) > inventory.MaxCodeLength
		r := tb.newReservation(1, 1, 0)
		r2 := tb.newReservation(1, 1, 1)
		err := inTx(tb.ctx, tb.pool, func(tx pgx.Tx) error {
			var acq inventory.Acquired
			for _, res := range []inventory.NewReservation{r2, r} {
				var err error
				if acq, err = tb.store.AcquireReservation(tb.ctx, tx, res); err != nil {
					return err
				}
			}
			a := acq.Reservation.Allocation(tb.ids.Add(1), uuid.Nil)
			a.Reason = h
			if _, err := tb.store.AllocateBucket(tb.ctx, tx, a); err != nil {
				return err
			}
			if _, err := tb.store.ReleaseStock(tb.ctx, tx, inventory.StockRelease{Request: seckill.Request{ReservationID: r.ReservationID}, Reason: h}); err != nil {
				return err
			}
			if _, err := tb.store.TransitionReservation(tb.ctx, tx, inventory.Transition{ReservationID: r2.ReservationID,
				To: inventory.StatusRejected, FailureCode: h}); err != nil {
				return err
			}
			_, err := tb.store.Rebalance(tb.ctx, tx, inventory.RebalanceRequest{ActivityID: 1, SKUID: 1, Reason: h})
			return err
		})
		if tooLong {
			if !errors.Is(err, inventory.ErrInvalidArgument) {
				t.Errorf("%q: %v, want ErrInvalidArgument", h, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", h, err)
		}
		ledger, err := tb.store.ReservationLedger(tb.ctx, tb.pool, r.ReservationID)
		if err != nil || len(ledger) != 2 {
			t.Fatalf("%q: ledger %v, %v", h, ledger, err)
		}
		for _, e := range ledger {
			if e.Reason != h {
				t.Errorf("ledger reason %q, want %q", e.Reason, h)
			}
		}
		got, err := tb.store.GetReservation(tb.ctx, tb.pool, r2.ReservationID)
		if err != nil || got.FailureCode != h {
			t.Errorf("failure code %q (%v), want %q", got.FailureCode, err, h)
		}
	}
	tablesIntact(t, tb, "inventory_sku", "sku_inventory", "inventory_reservation", "inventory_ledger", "inventory_sale_log")
	tb.auditClean(t, 1, 1)
}

func tablesIntact(t *testing.T, tb testBundle, tables ...string) {
	t.Helper()
	for _, name := range tables {
		if n := tb.count(t, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2`, tb.schema, name); n != 1 {
			t.Errorf("table %s.%s is gone", tb.schema, name)
		}
	}
	if n := tb.count(t, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, tb.schema); n != int64(len(tables))+1 {
		t.Errorf("%d tables in the schema, want %d (+ migrations)", n, len(tables))
	}
}
