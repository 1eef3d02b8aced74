package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/order"
)

// api is the HTTP face of the service: what a real seckill service would
// expose, backed by the same flow as the default run.
type api struct {
	s    *service
	mux  *http.ServeMux
	mon  *monitor // the operator view: GET / and GET /events
	stop func()
	// handler is mux behind the tracing middleware: every request
	// continues the caller's trace (traceparent) or starts one.
	handler http.Handler
}

// newAPI provisions the sale and starts the consumers, the relays and the
// timeout canceller. Close stops them.
func newAPI(ctx context.Context, pool *pgxpool.Pool, cfg config, log *slog.Logger) (*api, error) {
	cfg.DupRate = 0 // no duplicates on purpose: those are for the default run
	s, err := newService(ctx, pool, cfg, log)
	if err != nil {
		return nil, err
	}
	stopBG, err := s.startBackground(ctx, cfg.Consumers, cfg.Relays)
	if err != nil {
		s.close()
		return nil, err
	}
	cctx, stopCancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.cancelLoop(cctx) }()
	mon := startMonitor(ctx, s)
	a := &api{s: s, mux: http.NewServeMux(), mon: mon, stop: func() { mon.Close(); stopCancel(); <-done; stopBG(); s.close() }}
	mon.routes(a.mux)
	a.mux.HandleFunc("POST /orders", a.placeOrder)
	a.mux.HandleFunc("GET /orders/{request_id}", a.orderStatus)
	a.mux.HandleFunc("POST /payments/callback", a.paymentCallback)
	a.mux.HandleFunc("GET /audit", a.audit)
	a.mux.HandleFunc("GET /stats", a.stats)
	a.mux.HandleFunc("GET /reconcile", a.reconcile)
	a.mux.Handle("GET /metrics", s.metrics)
	a.handler = traced(a.mux)
	return a, nil
}

// Close stops the background work; it waits for it to finish.
func (a *api) Close() { a.stop() }

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.handler.ServeHTTP(w, r) }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, status, msg string) {
	writeJSON(w, code, map[string]string{"status": status, "error": msg})
}

// placeOrder: POST /orders {"user_id": 42}. 202 when queued; 410 sold out;
// 409 already reserved by this user; 503 busy (queue full, or the front
// door unavailable or being rebuilt: retry later); 403 the sale is not open.
func (a *api) placeOrder(w http.ResponseWriter, r *http.Request) {
	var in struct {
		UserID int64 `json:"user_id"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<12)).Decode(&in); err != nil || in.UserID <= 0 {
		writeError(w, http.StatusBadRequest, "invalid", "body must be {\"user_id\": <positive integer>}")
		return
	}
	res, err := a.s.click(r.Context(), in.UserID)
	switch {
	case errors.Is(err, errFrontSoldOut):
		writeError(w, http.StatusGone, "sold_out", err.Error())
	case errors.Is(err, errAlreadyBought):
		writeError(w, http.StatusConflict, "already_reserved", err.Error())
	case errors.Is(err, errSaleClosed):
		writeError(w, http.StatusForbidden, "closed", err.Error())
	case errors.Is(err, errBusy), errors.Is(err, errFrontDoorDown):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "busy", err.Error())
	case err != nil:
		writeError(w, http.StatusInternalServerError, "error", err.Error())
	default:
		tc, _ := traceFrom(r.Context())
		writeJSON(w, http.StatusAccepted, map[string]any{
			"status": "queued", "request_id": res.RequestID, "reservation_id": res.ReservationID, "order_id": res.OrderID,
			"trace_id": tc.TraceIDString(),
		})
	}
}

// orderStatus: GET /orders/{request_id}. The order when it exists; else the
// reservation's fate (rejected, with the reason) or "queued".
func (a *api) orderStatus(w http.ResponseWriter, r *http.Request) {
	reqID, err := uuid.Parse(r.PathValue("request_id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "request id must be a UUID")
		return
	}
	o, err := a.s.Orders.GetByRequest(r.Context(), a.s.Pool, reqID)
	if err == nil {
		writeJSON(w, http.StatusOK, map[string]any{
			"status": o.Status.String(), "order_id": o.OrderID, "order_no": o.OrderNo, "amount": o.TotalAmount,
			"currency": o.Currency, "expire_at": o.ExpireAt,
		})
		return
	}
	if !errors.Is(err, order.ErrNotFound) {
		writeError(w, http.StatusInternalServerError, "error", err.Error())
		return
	}
	resID, ok, err := a.s.front.ReservationOf(r.Context(), reqID)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "busy", err.Error())
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, "unknown", "no such request")
		return
	}
	res, err := a.s.Inventory.GetReservation(r.Context(), a.s.Pool, resID)
	switch {
	case errors.Is(err, inventory.ErrReservationNotFound):
		writeJSON(w, http.StatusOK, map[string]any{"status": "queued"})
	case err != nil:
		writeError(w, http.StatusInternalServerError, "error", err.Error())
	case res.Status == inventory.StatusRejected:
		writeJSON(w, http.StatusOK, map[string]any{"status": "rejected", "reason": res.FailureCode})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"status": "queued"})
	}
}

// paymentCallback: POST /payments/callback. 200 with what happened (paid,
// duplicate, refund); 404 unknown order; 422 amount or currency mismatch;
// 400 invalid.
func (a *api) paymentCallback(w http.ResponseWriter, r *http.Request) {
	var p flow.Payment
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<14)).Decode(&p); err != nil {
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	res, err := a.s.pay(r.Context(), p)
	switch {
	case errors.Is(err, order.ErrInvalidArgument):
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
	case errors.Is(err, order.ErrNotFound):
		writeError(w, http.StatusNotFound, "unknown_order", err.Error())
	case errors.Is(err, order.ErrAmountMismatch), errors.Is(err, order.ErrCurrencyMismatch):
		writeError(w, http.StatusUnprocessableEntity, "mismatch", err.Error())
	case err != nil:
		writeError(w, http.StatusInternalServerError, "error", err.Error())
	default:
		out := map[string]any{"result": paymentResults[res.Kind], "order_status": res.Order.Status.String(), "payment_id": res.PaymentID}
		if res.Refund != nil {
			out["refund"] = res.Refund
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// paymentResults names the payment outcomes in the API.
var paymentResults = map[order.PaymentKind]string{
	order.PaymentPaid:        "paid",
	order.PaymentDuplicate:   "duplicate",
	order.PaymentAfterCancel: "refund_after_cancel",
	order.PaymentOnPaidOrder: "refund_already_paid",
}

// audit: GET /audit. Every invariant, checked now in one snapshot of the
// database; 200 when all hold, 500 otherwise. The service is live (orders,
// payments, the canceller and the relays may be working), so a check exact
// only at rest that does not hold is reported skipped, not failed
// ("skipped": true, the work pending in its detail); the others are as
// strict as ever. GET /audit?at_rest=true judges every check: ask it only
// when nothing is in flight. The answer has "passed", "mode" ("live" or
// "at_rest"), "skipped" (how many checks) and "checks" (each with "at_rest"
// and "skipped").
func (a *api) audit(w http.ResponseWriter, r *http.Request) {
	atRest := r.URL.Query().Get("at_rest") == "true"
	checks, err := a.s.audit(r.Context(), !atRest)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "error", err.Error())
		return
	}
	rep := report{Checks: checks}
	code := http.StatusOK
	if !rep.Passed() {
		code = http.StatusInternalServerError
	}
	mode := "live"
	if atRest {
		mode = "at_rest"
	}
	writeJSON(w, code, map[string]any{"passed": rep.Passed(), "mode": mode, "skipped": skipped(checks), "checks": checks})
}

// stats: GET /stats.
func (a *api) stats(w http.ResponseWriter, r *http.Request) {
	st, err := a.s.Outbox.Stats(r.Context(), a.s.Pool)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "error", err.Error())
		return
	}
	front, err := a.s.front.State(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "busy", err.Error())
		return
	}
	c := &a.s.stats
	writeJSON(w, http.StatusOK, map[string]any{
		"clicks": c.clicks.Load(), "front_accepted": c.frontAccepted.Load(), "front_sold_out": c.frontSoldOut.Load(),
		"orders_created": c.created.Load(), "rejected_sold_out": c.soldOut.Load(), "rejected_user_already": c.userAlready.Load(),
		"duplicates": c.duplicates.Load(), "paid": c.paid.Load(), "cancelled": c.cancelled.Load(),
		"queue_pending": a.s.q.Pending(r.Context()), "front_available": front.totalAvailable(), "front_held": len(front.Held),
		"front_door": a.s.front.Name(), "broker": a.s.q.Name(), "front_door_rebuilds": c.rebuilds.Load(),
		"e2e_p50_ms": a.s.e2e.percentile(50).Seconds() * 1000, "e2e_p99_ms": a.s.e2e.percentile(99).Seconds() * 1000,
		"outbox": st, "consumer_p50_ms": a.s.lat.percentile(50).Seconds() * 1000, "consumer_p99_ms": a.s.lat.percentile(99).Seconds() * 1000,
	})
}

// reconcile: GET /reconcile. The three-way reconciliation, now, with the
// three reconciliation reports (orders, ledger, events; "reports"): 200 when
// every difference is explained (work in flight shows as explained
// differences), 500 otherwise. The three stores cannot be read at one
// instant: while the sale runs, a unit can move between two reads and look
// unexplained, so an unexplained result is read again, up to three times,
// 100ms apart; a difference that stays is reported.
func (a *api) reconcile(w http.ResponseWriter, r *http.Request) {
	rec, err := a.s.reconcileSettled(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, "error", err.Error())
		return
	}
	code := http.StatusOK
	if !rec.Passed() {
		code = http.StatusInternalServerError
	}
	writeJSON(w, code, map[string]any{"passed": rec.Passed(), "reconciliation": rec})
}
