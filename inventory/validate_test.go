package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/pgtx"
)

// noDB is a pgx.Tx that fails the test if anything is sent through it:
// invalid input must be rejected before the database is involved.
type noDB struct {
	pgx.Tx
	t *testing.T
}

func (d noDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	d.t.Error("Exec called")
	return pgconn.CommandTag{}, errors.New("no database")
}

func (d noDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	d.t.Error("Query called")
	return nil, errors.New("no database")
}

func (d noDB) QueryRow(context.Context, string, ...any) pgx.Row {
	d.t.Error("QueryRow called")
	return errRow{}
}

func (d noDB) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults {
	d.t.Error("SendBatch called")
	return nil
}

type errRow struct{}

func (errRow) Scan(...any) error { return errors.New("no database") }

func TestInvalidInputWritesNothing(t *testing.T) {
	t.Parallel()
	s, err := inventory.New(inventory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db := noDB{t: t}
	id := uuid.Must(uuid.NewV7())
	now := time.Now()
	long := strings.Repeat("é", inventory.MaxCodeLength+1)

	goodRes := inventory.NewReservation{
		Request:    seckill.Request{ReservationID: id, RequestID: id, MessageID: id, ActivityID: 1, SKUID: 1, UserID: 1, Bucket: 0, Quantity: 1},
		ReservedAt: now,
		ExpiresAt:  now.Add(time.Minute),
	}
	res := func(f func(*inventory.NewReservation)) inventory.NewReservation { r := goodRes; f(&r); return r }
	goodAlloc := inventory.Allocation{Request: seckill.Request{ReservationID: id, ActivityID: 1, SKUID: 1, Bucket: 0, Quantity: 1, UserID: 1, MessageID: id}}
	alloc := func(f func(*inventory.Allocation)) inventory.Allocation { a := goodAlloc; f(&a); return a }

	type call struct {
		name  string
		field string
		run   func(b *pgx.Batch) (direct, queued error)
	}
	provision := func(name, field string, k inventory.SKU) call {
		return call{name, field, func(*pgx.Batch) (error, error) {
			_, err := s.Provision(ctx, db, k)
			return err, err
		}}
	}
	acquire := func(name, field string, r inventory.NewReservation) call {
		return call{name, field, func(b *pgx.Batch) (error, error) {
			_, err := s.AcquireReservation(ctx, db, r)
			return err, s.QueueAcquireReservation(b, r, new(inventory.Acquired), pgtx.Return)
		}}
	}
	allocate := func(name, field string, a inventory.Allocation) call {
		return call{name, field, func(b *pgx.Batch) (error, error) {
			_, err := s.AllocateBucket(ctx, db, a)
			return err, s.QueueAllocateBucket(b, a, new(inventory.Allocated), pgtx.Return)
		}}
	}
	release := func(name, field string, r inventory.StockRelease) call {
		return call{name, field, func(b *pgx.Batch) (error, error) {
			_, err := s.ReleaseStock(ctx, db, r)
			return err, s.QueueReleaseStock(b, r, new(inventory.Allocated), pgtx.Return)
		}}
	}
	transition := func(name, field string, tr inventory.Transition) call {
		return call{name, field, func(b *pgx.Batch) (error, error) {
			_, err := s.TransitionReservation(ctx, db, tr)
			return err, s.QueueTransitionReservation(b, tr, new(inventory.Reservation), pgtx.Return)
		}}
	}
	goodAdjust := inventory.Adjustment{ActivityID: 1, SKUID: 1, Bucket: 0, Delta: 1, Operator: "ops", ApprovalRef: "T-1", Reason: "RECOUNT"}
	adjust := func(name, field string, f func(*inventory.Adjustment)) call {
		a := goodAdjust
		f(&a)
		return call{name, field, func(*pgx.Batch) (error, error) {
			_, err := s.AdjustStock(ctx, db, a)
			return err, err
		}}
	}
	soldOut := func(name, field string, a inventory.Allocation) call {
		return call{name, field, func(b *pgx.Batch) (error, error) {
			err := s.QueueCheckSoldOut(b, a, pgtx.Return)
			return err, err
		}}
	}
	compensation := func(name, field string, f inventory.CompensationFailure) call {
		return call{name, field, func(*pgx.Batch) (error, error) {
			_, err := s.RecordCompensationFailure(ctx, db, f)
			return err, err
		}}
	}
	sale := func(name, field string, c inventory.SaleChange) call {
		return call{name, field, func(*pgx.Batch) (error, error) {
			_, err := s.SetSaleStatus(ctx, db, c)
			return err, err
		}}
	}
	rebalance := func(name, field string, r inventory.RebalanceRequest) call {
		return call{name, field, func(*pgx.Batch) (error, error) {
			_, err := s.Rebalance(ctx, db, r)
			return err, err
		}}
	}
	calls := []call{
		provision("zero activity", "ActivityID", inventory.SKU{SKUID: 1, Stock: 1, Buckets: 1}),
		provision("negative sku", "SKUID", inventory.SKU{ActivityID: 1, SKUID: -1, Stock: 1, Buckets: 1}),
		provision("zero sku", "SKUID", inventory.SKU{ActivityID: 1, Stock: 1, Buckets: 1}),
		provision("more tokens than the limit", "Stock", inventory.SKU{ActivityID: 1, SKUID: 1, Stock: inventory.MaxTokens + 1, Buckets: 1, Tokens: true}),
		provision("negative stock", "Stock", inventory.SKU{ActivityID: 1, SKUID: 1, Stock: -1, Buckets: 1}),
		provision("no buckets", "Buckets", inventory.SKU{ActivityID: 1, SKUID: 1, Stock: 1}),
		provision("too many buckets", "Buckets", inventory.SKU{ActivityID: 1, SKUID: 1, Stock: 1, Buckets: 257}),

		acquire("nil reservation id", "ReservationID", res(func(r *inventory.NewReservation) { r.ReservationID = uuid.Nil })),
		acquire("nil request id", "RequestID", res(func(r *inventory.NewReservation) { r.RequestID = uuid.Nil })),
		acquire("nil message id", "MessageID", res(func(r *inventory.NewReservation) { r.MessageID = uuid.Nil })),
		acquire("zero activity", "ActivityID", res(func(r *inventory.NewReservation) { r.ActivityID = 0 })),
		acquire("zero sku", "SKUID", res(func(r *inventory.NewReservation) { r.SKUID = 0 })),
		acquire("negative user", "UserID", res(func(r *inventory.NewReservation) { r.UserID = -5 })),
		acquire("zero user", "UserID", res(func(r *inventory.NewReservation) { r.UserID = 0 })),
		acquire("negative bucket", "Bucket", res(func(r *inventory.NewReservation) { r.Bucket = -1 })),
		acquire("bucket 256", "Bucket", res(func(r *inventory.NewReservation) { r.Bucket = 256 })),
		acquire("zero quantity", "Quantity", res(func(r *inventory.NewReservation) { r.Quantity = 0 })),
		acquire("no reserved at", "ReservedAt", res(func(r *inventory.NewReservation) { r.ReservedAt = time.Time{} })),
		acquire("expires before reserved", "ExpiresAt", res(func(r *inventory.NewReservation) { r.ExpiresAt = now.Add(-time.Second) })),

		allocate("nil reservation", "ReservationID", alloc(func(a *inventory.Allocation) { a.ReservationID = uuid.Nil })),
		allocate("zero activity", "ActivityID", alloc(func(a *inventory.Allocation) { a.ActivityID = 0 })),
		allocate("zero sku", "SKUID", alloc(func(a *inventory.Allocation) { a.SKUID = 0 })),
		allocate("bucket 300", "Bucket", alloc(func(a *inventory.Allocation) { a.Bucket = 300 })),
		allocate("bucket 256", "Bucket", alloc(func(a *inventory.Allocation) { a.Bucket = 256 })),
		allocate("zero quantity", "Quantity", alloc(func(a *inventory.Allocation) { a.Quantity = 0 })),
		allocate("negative quantity", "Quantity", alloc(func(a *inventory.Allocation) { a.Quantity = -1 })),
		allocate("zero user", "UserID", alloc(func(a *inventory.Allocation) { a.UserID = 0 })),
		allocate("negative order", "OrderID", alloc(func(a *inventory.Allocation) { a.OrderID = -1 })),
		allocate("nil message", "MessageID", alloc(func(a *inventory.Allocation) { a.MessageID = uuid.Nil })),
		allocate("long reason", "Reason", alloc(func(a *inventory.Allocation) { a.Reason = long })),

		release("nil reservation", "ReservationID", inventory.StockRelease{}),
		release("negative order", "OrderID", inventory.StockRelease{Request: seckill.Request{ReservationID: id, OrderID: -1}}),
		release("long reason", "Reason", inventory.StockRelease{Request: seckill.Request{ReservationID: id}, Reason: long}),

		transition("nil reservation", "ReservationID", inventory.Transition{To: inventory.StatusRejected}),
		transition("to PENDING_DB", "To", inventory.Transition{ReservationID: id, To: inventory.StatusPendingDB}),
		transition("unknown status", "To", inventory.Transition{ReservationID: id, To: 15}),
		transition("ordered without order", "OrderID", inventory.Transition{ReservationID: id, To: inventory.StatusOrdered}),
		transition("negative order", "OrderID", inventory.Transition{ReservationID: id, To: inventory.StatusRejected, OrderID: -2}),
		transition("long failure code", "FailureCode", inventory.Transition{ReservationID: id, To: inventory.StatusRejected, FailureCode: long}),

		adjust("adjust zero activity", "ActivityID", func(a *inventory.Adjustment) { a.ActivityID = 0 }),
		adjust("adjust zero sku", "SKUID", func(a *inventory.Adjustment) { a.SKUID = 0 }),
		adjust("adjust negative bucket", "Bucket", func(a *inventory.Adjustment) { a.Bucket = -1 }),
		adjust("adjust bucket 256", "Bucket", func(a *inventory.Adjustment) { a.Bucket = 256 }),
		adjust("adjust by nothing", "Delta", func(a *inventory.Adjustment) { a.Delta = 0 }),
		adjust("adjust without reason", "Reason", func(a *inventory.Adjustment) { a.Reason = "" }),
		adjust("adjust without operator", "Operator", func(a *inventory.Adjustment) { a.Operator = "" }),
		adjust("adjust without approval", "ApprovalRef", func(a *inventory.Adjustment) { a.ApprovalRef = "" }),
		soldOut("sold-out check zero activity", "ActivityID", alloc(func(a *inventory.Allocation) { a.ActivityID = 0 })),
		soldOut("sold-out check zero sku", "SKUID", alloc(func(a *inventory.Allocation) { a.SKUID = 0 })),
		soldOut("sold-out check negative bucket", "Bucket", alloc(func(a *inventory.Allocation) { a.Bucket = -1 })),
		soldOut("sold-out check bucket 256", "Bucket", alloc(func(a *inventory.Allocation) { a.Bucket = 256 })),
		soldOut("sold-out check zero quantity", "Quantity", alloc(func(a *inventory.Allocation) { a.Quantity = 0 })),
		compensation("compensation without reservation", "ReservationID", inventory.CompensationFailure{MaxFailures: 1}),
		compensation("compensation threshold 0", "MaxFailures", inventory.CompensationFailure{ReservationID: id}),
		compensation("compensation threshold 1001", "MaxFailures", inventory.CompensationFailure{ReservationID: id, MaxFailures: 1001}),
		sale("sale zero activity", "ActivityID", inventory.SaleChange{SKUID: 1, To: inventory.SalePaused, Operator: "o", Reason: "r"}),
		sale("sale zero sku", "SKUID", inventory.SaleChange{ActivityID: 1, To: inventory.SalePaused, Operator: "o", Reason: "r"}),
		sale("sale to no status", "To", inventory.SaleChange{ActivityID: 1, SKUID: 1, To: 99, Operator: "o", Reason: "r"}),
		rebalance("zero activity", "ActivityID", inventory.RebalanceRequest{SKUID: 1}),
		rebalance("zero sku", "SKUID", inventory.RebalanceRequest{ActivityID: 1}),
		rebalance("long reason", "Reason", inventory.RebalanceRequest{ActivityID: 1, SKUID: 1, Reason: long}),

		{"audit negative activity", "activityID", func(*pgx.Batch) (error, error) {
			_, err := s.Audit(ctx, db, -1, 1)
			return err, err
		}},
		{"audit negative sku", "skuID", func(*pgx.Batch) (error, error) {
			_, err := s.Audit(ctx, db, 1, -1)
			return err, err
		}},
		{"audit a sku without its activity", "skuID", func(*pgx.Batch) (error, error) {
			_, err := s.Audit(ctx, db, 0, 1)
			return err, err
		}},
		{"ordered without an order id", "OrderID", func(b *pgx.Batch) (error, error) {
			r := goodRes
			r.Ordered = true
			_, err := s.AcquireReservation(ctx, db, r)
			return err, s.QueueAcquireReservation(b, r, nil, pgtx.Return)
		}},
	}
	for _, c := range calls {
		var b pgx.Batch
		direct, queued := c.run(&b)
		for form, err := range map[string]error{"direct": direct, "queued": queued} {
			var ve *inventory.Error
			if !errors.Is(err, inventory.ErrInvalidArgument) || !errors.As(err, &ve) || ve.Field != c.field {
				t.Errorf("%s (%s): %v, want ValidationError on %s", c.name, form, err, c.field)
			}
			if c.field == "Bucket" && !strings.Contains(fmt.Sprint(err), "between 0 and 255") {
				t.Errorf("%s (%s): %v, want the message to give the range, 0 to 255", c.name, form, err)
			}
		}
		if b.Len() != 0 {
			t.Errorf("%s: %d statements queued", c.name, b.Len())
		}
	}
	// A nil destination is valid in every queued form: the result is
	// discarded (the statement is queued all the same).
	var b pgx.Batch
	for name, err := range map[string]error{
		"acquire":    s.QueueAcquireReservation(&b, goodRes, nil, pgtx.Return),
		"allocate":   s.QueueAllocateBucket(&b, goodAlloc, nil, pgtx.Return),
		"release":    s.QueueReleaseStock(&b, inventory.StockRelease{Request: seckill.Request{ReservationID: id}}, nil, pgtx.Return),
		"transition": s.QueueTransitionReservation(&b, inventory.Transition{ReservationID: id, To: inventory.StatusRejected}, nil, pgtx.Return),
	} {
		if err != nil {
			t.Errorf("%s with nil dst: %v", name, err)
		}
	}
	if b.Len() != 4 {
		t.Errorf("%d statements queued with nil dst, want 4", b.Len())
	}
}

// The limits of a SKU are inclusive: the largest stock of a token SKU
// passes Provision's check (provisioning it would write ten million rows).
func TestSKULimitsAreInclusive(t *testing.T) {
	t.Parallel()
	for _, k := range []inventory.SKU{
		{ActivityID: 1, SKUID: 1, Stock: inventory.MaxTokens, Buckets: 1, Tokens: true},
		{ActivityID: 1, SKUID: 1, Stock: 0, Buckets: inventory.MaxBuckets},
		{ActivityID: 1, SKUID: 1, Stock: 1<<31 - 1, Buckets: 1},
	} {
		if err := inventory.ValidateSKU(k); err != nil {
			t.Errorf("%+v: %v", k, err)
		}
	}
}
