package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/frontdoor"
	"github.com/seckillkit/seckill/examples/seckill/reconcile"
	"github.com/seckillkit/seckill/internal/pgtest"
	"github.com/seckillkit/seckill/inventory"
)

// TestReleaseEventDuplicateChangesNothing: on both stacks, a cancelled
// order's reservation is RELEASE_PENDING until its FRONTDOOR_RELEASE event
// is consumed; the consumer gives the unit back to the front door and
// moves the reservation to RELEASED. The same event delivered three times
// at once is applied once, and the same release under a new message id
// changes nothing.
func TestReleaseEventDuplicateChangesNothing(t *testing.T) {
	t.Parallel()
	for _, stack := range []string{stackReal, stackMemory} {
		t.Run(stack, func(t *testing.T) {
			t.Parallel()
			ctx := pgtest.Context(t, 2*time.Minute)
			pool := pgtest.Pool(t)
			cfg := smallConfig(t)
			cfg.Stock, cfg.Buckets, cfg.FrontDrift = 4, 1, 0
			useStack(t, &cfg, stack, false)
			s, err := newService(ctx, pool, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			s.orderTTL = -time.Second // the order is due at once

			r, err := s.front.Reserve(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			body, err := orderBody(s, r)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := s.PlaceOrder(ctx, uuid.Must(uuid.NewV7()), body); err != nil || out.Code != flow.CodeOrderCreated {
				t.Fatalf("order: %+v, %v", out, err)
			}
			if n, err := s.CancelExpired(ctx, 10); err != nil || n != 1 {
				t.Fatalf("cancel: %d, %v", n, err)
			}
			resv := func() inventory.Reservation {
				t.Helper()
				x, err := s.Inventory.GetReservation(ctx, pool, r.ReservationID)
				if err != nil {
					t.Fatal(err)
				}
				return x
			}
			if st := resv().Status; st != inventory.StatusReleasePending {
				t.Fatalf("after the cancel: %s, want RELEASE_PENDING", st)
			}
			ev := releaseEvent(t, ctx, pool, cfg.Schema, r.ReservationID)
			h := s.releaseConsumer()
			// The event and two redeliveries at once: one applies it, the
			// others wait for its commit and find the inbox row.
			var wg sync.WaitGroup
			errs := make([]error, 3)
			for i := range errs {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = h(ctx, ev) }()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			after := resv()
			if after.Status != inventory.StatusReleased {
				t.Fatalf("after the release: %s, want RELEASED", after.Status)
			}
			if held := frontHeld(t, ctx, s, r.ReservationID); held {
				t.Fatal("the front door still holds the released reservation")
			}
			// Then the same release under a new message id.
			if err := h(ctx, broker.Message{ID: uuid.Must(uuid.NewV7()), Body: ev.Body}); err != nil {
				t.Fatal(err)
			}
			if again := resv(); again.Version != after.Version || again.Status != inventory.StatusReleased {
				t.Fatalf("duplicates changed the reservation: %+v, was %+v", again, after)
			}
			if got := s.stats.releases.Load(); got != 1 {
				t.Errorf("front-door releases applied: %d, want 1", got)
			}
			if got := s.stats.eventDuplicates.Load(); got != 2 {
				t.Errorf("redeliveries answered by the inbox: %d, want 2", got)
			}
			if got := s.stats.releasesAlready.Load(); got != 1 {
				t.Errorf("releases under a new id answered already released: %d, want 1", got)
			}
			st, err := s.front.State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Available[0]; got != 4 {
				t.Errorf("front door available: %d, want 4 (the unit came back once)", got)
			}
		})
	}
}

// TestReleaseFailuresReachManualRequired: a front door that refuses the
// release of two cancelled orders' reservations drives each to
// MANUAL_REQUIRED after cfg.ReleaseFailures refusals, on both stacks; no
// further release is tried; PostgreSQL's invariants hold, the audit's
// front-door check and the reconciliation (reports and front door) name
// both reservations, and the run fails.
func TestReleaseFailuresReachManualRequired(t *testing.T) {
	t.Parallel()
	for _, stack := range []string{stackReal, stackMemory} {
		t.Run(stack, func(t *testing.T) {
			t.Parallel()
			ctx := pgtest.Context(t, 4*time.Minute)
			pool := pgtest.Pool(t)
			cfg := smallConfig(t)
			cfg.ReleaseFailures = 3
			useStack(t, &cfg, stack, false)
			ref := &refusingFront{pool: pool, schema: cfg.Schema, max: 2, calls: map[uuid.UUID]int{}}
			hooks := &saleHooks{started: func(s *service) { ref.Door, s.front = s.front, ref }}
			rep, err := runSaleHooked(ctx, pool, cfg, nil, nil, hooks)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			rep.print(&out)
			t.Log("\n" + out.String())
			for _, c := range rep.Checks {
				// The front door holds the two units: the audit says so.
				named := strings.HasPrefix(c.Name, "front door agrees with PostgreSQL") && strings.Contains(c.Detail, "2 reservations MANUAL_REQUIRED")
				if c.Pass == named {
					t.Errorf("audit [%s] %s: pass %v: %s", c.Invariant, c.Name, c.Pass, c.Detail)
				}
			}
			if len(ref.calls) != 2 {
				t.Fatalf("%d reservations refused, want 2 (did the sale cancel orders?)", len(ref.calls))
			}
			for id, n := range ref.calls {
				var status, failures int16
				if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT status, compensation_failures FROM %s.inventory_reservation WHERE reservation_id = $1`,
					pgx.Identifier{cfg.Schema}.Sanitize()), id).Scan(&status, &failures); err != nil {
					t.Fatal(err)
				}
				if n != cfg.ReleaseFailures || failures != int16(cfg.ReleaseFailures) || inventory.ReservationStatus(status) != inventory.StatusManualRequired {
					t.Errorf("%s: %d releases tried, %d failures recorded, status %s; want %d, %d, MANUAL_REQUIRED",
						id, n, failures, inventory.ReservationStatus(status), cfg.ReleaseFailures, cfg.ReleaseFailures)
				}
			}
			if rep.ReleasesManual != 2 {
				t.Errorf("report: %d reservations MANUAL_REQUIRED, want 2", rep.ReleasesManual)
			}
			rec := rep.Reconciliation
			if rec == nil || rec.Reports == nil {
				t.Fatal("no reconciliation reports")
			}
			if rec.Reports.ManualRequired != 2 || rec.Reports.ReleasePending != 0 {
				t.Errorf("reports: %d MANUAL_REQUIRED, %d RELEASE_PENDING; want 2, 0", rec.Reports.ManualRequired, rec.Reports.ReleasePending)
			}
			unexplained := map[string]int64{}
			for _, d := range rec.Differences {
				if !d.Explained {
					unexplained[d.Class] += d.Count
				}
			}
			if unexplained[flow.ClassManualRequired] != 2 || unexplained[reconcile.HeldManualRequired] != 2 || len(unexplained) != 2 {
				t.Errorf("unexplained differences %v; want exactly the two reservations, in the reports and at the front door", unexplained)
			}
			if rep.Passed() || !strings.Contains(out.String(), "reconciliation: FAILED") {
				t.Error("the run passed with reservations that need a human")
			}
		})
	}
}

// refusingFront refuses, with an error that is not an outage, every
// event-driven release of the first max reservations found
// RELEASE_PENDING (cancelled orders), and counts the attempts.
type refusingFront struct {
	frontdoor.Door
	pool   *pgxpool.Pool
	schema string
	max    int

	mu    sync.Mutex
	calls map[uuid.UUID]int
}

func (f *refusingFront) Release(ctx context.Context, id uuid.UUID, forgetUser int64) (frontdoor.ReleaseResult, error) {
	if forgetUser != 0 { // a refused publish's own release, not an event's
		return f.Door.Release(ctx, id, forgetUser)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, victim := f.calls[id]; !victim && len(f.calls) < f.max {
		var status int16
		if err := f.pool.QueryRow(ctx, fmt.Sprintf(`SELECT status FROM %s.inventory_reservation WHERE reservation_id = $1`,
			pgx.Identifier{f.schema}.Sanitize()), id).Scan(&status); err != nil {
			return 0, err
		}
		if inventory.ReservationStatus(status) == inventory.StatusReleasePending {
			f.calls[id] = 0
		}
	}
	if _, victim := f.calls[id]; victim {
		f.calls[id]++
		return 0, errors.New("the front door refused the release")
	}
	return f.Door.Release(ctx, id, forgetUser)
}

func orderBody(s *service, r frontdoor.Reservation) ([]byte, error) {
	var body []byte
	q := &captureQueue{Broker: s.q, got: &body}
	orig := s.q
	s.q = q
	defer func() { s.q = orig }()
	err := s.publish(context.Background(), r, uuid.Must(uuid.NewV7()))
	return body, err
}

// placeDirect reserves a unit for user at the front door and places its
// order straight through PlaceOrder (the broker never sees the message),
// failing tb unless the order is created.
func placeDirect(tb testing.TB, ctx context.Context, s *service, user int64) (frontdoor.Reservation, int64) {
	tb.Helper()
	r, err := s.front.Reserve(ctx, user)
	if err != nil {
		tb.Fatal(err)
	}
	body, err := orderBody(s, r)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := s.PlaceOrder(ctx, uuid.Must(uuid.NewV7()), body)
	if err != nil || out.Code != flow.CodeOrderCreated {
		tb.Fatalf("order of user %d: %+v, %v", user, out, err)
	}
	return r, out.OrderID
}

// captureQueue keeps a published body instead of sending it.
type captureQueue struct {
	broker.Broker
	got *[]byte
}

func (c *captureQueue) Publish(_ context.Context, m broker.Message) error {
	*c.got = m.Body
	return nil
}

func releaseEvent(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string, id uuid.UUID) broker.Message {
	t.Helper()
	var m broker.Message
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT event_id, payload FROM %s.event_outbox WHERE dedup_key = $1`, pgx.Identifier{schema}.Sanitize()),
		flow.TagFrontDoorRelease+":"+id.String()).Scan(&m.ID, &m.Body); err != nil {
		t.Fatal(err)
	}
	return m
}

func frontHeld(t *testing.T, ctx context.Context, s *service, id uuid.UUID) bool {
	t.Helper()
	st, err := s.front.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, held := st.Held[id]
	return held
}

// TestReconcileReportsFailOnLostEvent: an order whose ORDER_CREATED event
// was lost (deleted from the outbox) shows in the three reports as events
// missing, an unexplained difference: the reconciliation fails and says so.
func TestReconcileReportsFailOnLostEvent(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t, 2*time.Minute)
	pool := pgtest.Pool(t)
	cfg := smallConfig(t)
	cfg.Stock, cfg.Buckets, cfg.FrontDrift = 4, 1, 0
	useStack(t, &cfg, stackMemory, false)
	s, err := newService(ctx, pool, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	_, orderID := placeDirect(t, ctx, s, 1)
	if tag, err := pool.Exec(ctx, fmt.Sprintf(`DELETE FROM %s.event_outbox WHERE dedup_key = $1`, pgx.Identifier{cfg.Schema}.Sanitize()),
		fmt.Sprintf("%s:%d", flow.TagOrderCreated, orderID)); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("delete the event: %v, %d rows", err, tag.RowsAffected())
	}
	rec, err := s.reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var printed strings.Builder
	rec.Print(&printed)
	t.Log("\n" + printed.String())
	found := false
	for _, d := range rec.Differences {
		if d.Class == flow.ClassEventsMissing {
			found = !d.Explained && d.Count == -1 && strings.Contains(d.Where, flow.TagOrderCreated)
		}
	}
	if !found || rec.Passed() || !strings.Contains(printed.String(), "FAIL      "+flow.ClassEventsMissing) {
		t.Fatalf("the lost ORDER_CREATED is not an unexplained difference: %+v", rec.Differences)
	}
}
