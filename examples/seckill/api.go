package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckillkit/seckill"
	"github.com/seckillkit/seckill/examples/seckill/broker"
	"github.com/seckillkit/seckill/examples/seckill/flow"
	"github.com/seckillkit/seckill/examples/seckill/frontdoor"
	"github.com/seckillkit/seckill/examples/seckill/guardstore"
	"github.com/seckillkit/seckill/inventory"
	"github.com/seckillkit/seckill/order"
)

// api is the HTTP face of the service: what a real seckill service would
// expose, backed by the same flow as the default run. It has two faces:
// the buyers' (ServeHTTP: orders and payment callbacks, every request
// authenticated) and the operators' (Operator: the page, the audit, the
// reconciliation, the figures), served on a listener of their own. On the
// buyers' face the operator routes answer only to the operator token
// (404 when none is configured).
type api struct {
	s    *service
	g    *guard
	mon  *monitor // the operator view: GET / and GET /events
	stop func()
	// buyers and operators are the two faces behind the tracing
	// middleware: every request continues the caller's trace
	// (traceparent) or starts one.
	buyers, operators http.Handler
}

// newAPI provisions the sale and starts the consumers, the relays and the
// timeout canceller. Close stops them.
func newAPI(ctx context.Context, pool *pgxpool.Pool, cfg config, log *slog.Logger) (*api, error) {
	cfg.DupRate = 0 // no duplicates on purpose: those are for the default run
	s, err := newService(ctx, pool, cfg, log)
	if err != nil {
		return nil, err
	}
	g, err := newGuard(s, cfg.Security)
	if err != nil {
		s.close()
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
	a := newFaces(s, g, mon)
	a.stop = func() { mon.Close(); stopCancel(); <-done; stopBG(); s.close() }
	return a, nil
}

// newFaces builds the two faces of s (mon nil: no page).
func newFaces(s *service, g *guard, mon *monitor) *api {
	a := &api{s: s, g: g, mon: mon, stop: func() {}}
	buyers, operators := http.NewServeMux(), http.NewServeMux()
	buyers.HandleFunc("POST /orders", a.placeOrder)
	buyers.HandleFunc("GET /orders/{request_id}", a.orderStatus)
	buyers.HandleFunc("POST /payments/callback", a.paymentCallback)
	op := map[string]http.Handler{
		"GET /audit":     http.HandlerFunc(a.audit),
		"GET /stats":     http.HandlerFunc(a.stats),
		"GET /reconcile": http.HandlerFunc(a.reconcile),
		"GET /metrics":   s.tel.metrics,
	}
	if mon != nil {
		op["GET /{$}"] = http.HandlerFunc(mon.servePage)
		op["GET /events"] = http.HandlerFunc(mon.serveEvents)
	}
	for pattern, h := range op {
		operators.Handle(pattern, h)
		buyers.Handle(pattern, a.operatorOnly(h))
	}
	a.buyers, a.operators = s.tel.traced(buyers), s.tel.traced(operators)
	return a
}

// Close stops the background work; it waits for it to finish.
func (a *api) Close() { a.stop() }

// ServeHTTP serves the buyers' face.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.buyers.ServeHTTP(w, r) }

// Operator is the operators' face, for a listener of its own (on a
// loopback address: it asks for no credentials).
func (a *api) Operator() http.Handler { return a.operators }

// operatorOnly serves h on the buyers' face to the operator token alone:
// 404 when no token is configured (the route is not there), 401 without it.
func (a *api) operatorOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case a.g.cfg.OperatorToken == "":
			writeError(w, http.StatusNotFound, "unknown", "not found")
		case !a.g.operatorOK(r):
			a.g.refusedOperators.inc(1)
			unauthorized(w, `Bearer realm="seckill-operator"`, "operator routes need the operator token")
		default:
			h.ServeHTTP(w, r)
		}
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, status, msg string) {
	writeJSON(w, code, map[string]string{"status": status, "error": msg})
}

// statusUnavailable: 503, the front door (or the store of the HTTP face)
// cannot answer now; retry after Retry-After.
const statusUnavailable = "unavailable"

// authBuyer returns the buyer of a request's token; false (and 401
// answered, counted) when there is none or it does not verify.
func (a *api) authBuyer(w http.ResponseWriter, r *http.Request) (int64, bool) {
	buyer, err := a.g.buyerOf(r)
	if err != nil {
		a.refuseBuyer(w, err)
		return 0, false
	}
	return buyer, true
}

// refuseBuyer answers 401 for a token buyerOf refused, and counts it.
func (a *api) refuseBuyer(w http.ResponseWriter, err error) {
	reason := "invalid"
	if errors.Is(err, errNoToken) {
		reason = "missing"
	}
	a.g.refusedBuyers.inc(1, reason)
	unauthorized(w, `Bearer realm="seckill"`, err.Error())
}

// orderRequest is POST /orders' body: empty, or a JSON object naming the item
// (both fields optional: the item on sale). The buyer is the token's
// subject, never a field.
type orderRequest struct {
	ActivityID int64 `json:"activity_id"`
	SKUID      int64 `json:"sku_id"`
}

// placeOrder: POST /orders, "Authorization: Bearer <buyer token>", body
// empty or {"activity_id": …, "sku_id": …}, optional Idempotency-Key. 202
// when queued; 410 sold out; 409 already reserved by this buyer (or
// in_progress: the same key still running); 503 busy (the queue is full)
// or unavailable (the front door is down or being rebuilt), with
// Retry-After; 403 the sale is not open; 404 no such item on sale; 400
// invalid; 401 no or a bad token; 413 body too large; 422 the key was used
// with another body; 429 rate limited, with Retry-After.
func (a *api) placeOrder(w http.ResponseWriter, r *http.Request) {
	buyer, err := a.g.buyerOf(r)
	if err != nil {
		if a.g.allow(w, r, 0, nil) { // a bad token counts against its address
			a.refuseBuyer(w, err)
		}
		return
	}
	key, ok := keyOf(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r, 1<<12)
	if !ok {
		return
	}
	if len(bytes.TrimSpace(body)) > 0 {
		var in orderRequest
		d := json.NewDecoder(bytes.NewReader(body))
		d.DisallowUnknownFields()
		if err := d.Decode(&in); err != nil || d.More() {
			writeError(w, http.StatusBadRequest, "invalid",
				`body must be empty or {"activity_id": <id>, "sku_id": <id>}; the buyer is the bearer token's subject`)
			return
		}
		if (in.ActivityID != 0 && in.ActivityID != a.s.Item.ActivityID) || (in.SKUID != 0 && in.SKUID != a.s.Item.SKUID) {
			writeError(w, http.StatusNotFound, "unknown_item", "no such item on sale")
			return
		}
	}
	var claim *guardstore.Claim
	if key != "" {
		claim = a.g.newClaim(r, "orders:"+strconv.FormatInt(buyer, 10), key, body)
	}
	if !a.g.allow(w, r, buyer, claim) { // the limits and the key's claim: one round trip
		return
	}
	run := func(ctx context.Context, w http.ResponseWriter) { a.click(ctx, w, r, buyer) }
	if claim == nil {
		run(r.Context(), w)
		return
	}
	a.g.idempotent(w, r, claim, run)
}

// reservationSink, in a request's context, receives the reservation a
// click made: the example's in-process buyers hand it to the scanner that
// re-sends reservations.
type reservationSink struct{}

func (a *api) click(ctx context.Context, w http.ResponseWriter, r *http.Request, buyer int64) {
	res, err := a.s.click(ctx, buyer)
	switch {
	case errors.Is(err, frontdoor.ErrSoldOut):
		writeError(w, http.StatusGone, "sold_out", err.Error())
	case errors.Is(err, frontdoor.ErrAlreadyBought):
		writeError(w, http.StatusConflict, "already_reserved", err.Error())
	case errors.Is(err, frontdoor.ErrSaleClosed):
		writeError(w, http.StatusForbidden, "closed", err.Error())
	case errors.Is(err, broker.ErrBusy):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "busy", "the queue is full, try again")
	case errors.Is(err, frontdoor.ErrDown):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, statusUnavailable, "the front door is unavailable, try again")
	case err != nil:
		a.g.internalError(w, r, err)
	default:
		if sink, ok := ctx.Value(reservationSink{}).(*frontdoor.Reservation); ok {
			*sink = res
		}
		writeJSON(w, http.StatusAccepted, map[string]any{
			"status": "queued", "request_id": res.RequestID, "reservation_id": res.ReservationID, "order_id": res.OrderID,
			"trace_id": traceID(ctx),
		})
	}
}

// orderStatus: GET /orders/{request_id}, "Authorization: Bearer <buyer
// token>". The order when it exists; else the reservation's fate
// (rejected, with the reason) or "queued". Another buyer's request is 404,
// as an unknown one; 401 no or a bad token.
func (a *api) orderStatus(w http.ResponseWriter, r *http.Request) {
	buyer, ok := a.authBuyer(w, r)
	if !ok {
		return
	}
	reqID, err := uuid.Parse(r.PathValue("request_id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "request id must be a UUID")
		return
	}
	o, err := a.s.Orders.Get(r.Context(), a.s.Pool, seckill.Request{RequestID: reqID})
	if err == nil && o.UserID == buyer {
		writeJSON(w, http.StatusOK, map[string]any{
			"status": o.Status.String(), "order_id": o.OrderID, "order_no": o.OrderNo, "amount": o.TotalAmount,
			"currency": o.Currency, "expire_at": o.ExpireAt,
		})
		return
	}
	if err == nil {
		writeError(w, http.StatusNotFound, "unknown", "no such request")
		return
	}
	if !errors.Is(err, order.ErrNotFound) {
		a.g.internalError(w, r, err)
		return
	}
	resID, ok, err := a.s.front.ReservationOf(r.Context(), reqID)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, statusUnavailable, "the front door is unavailable, try again")
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
		a.g.internalError(w, r, err)
	case res.UserID != buyer:
		writeError(w, http.StatusNotFound, "unknown", "no such request")
	case res.Status == inventory.StatusRejected:
		writeJSON(w, http.StatusOK, map[string]any{"status": "rejected", "reason": res.FailureCode})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"status": "queued"})
	}
}

// paymentCallback: POST /payments/callback, signed (Seckill-Signature, see
// callback.go) by the payment provider. 200 with what happened (paid,
// duplicate: the callback id or trade number seen before, with the first
// payment's id; refund); 401 unsigned, badly signed, expired or replayed
// (nothing parsed, nothing written); 404 unknown order; 422 amount or
// currency mismatch, or a callback id seen before with another payment
// (idempotency_mismatch); 400 invalid; 413 body too large.
func (a *api) paymentCallback(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, 1<<14)
	if !ok {
		return
	}
	reason, err := a.g.verifyCallback(r.Context(), r.Header.Get(signatureHeader), body)
	if err != nil {
		a.g.storeDown(w, r, "signature store", err)
		return
	}
	if reason != "" {
		a.g.refusedCallbacks.inc(1, reason)
		w.Header().Set("WWW-Authenticate", signatureHeader)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"status": statusUnauthorized, "reason": reason,
			"error": "the callback's signature is " + reason})
		return
	}
	var p flow.Payment
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil || d.More() {
		writeError(w, http.StatusBadRequest, "invalid", `body must be {"order_id", "provider_trade_no", "callback_id", "amount", "currency"}`)
		return
	}
	res, err := a.s.pay(r.Context(), p)
	switch {
	case errors.Is(err, order.ErrInvalidArgument):
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
	case errors.Is(err, order.ErrNotFound):
		writeError(w, http.StatusNotFound, "unknown_order", "no such order")
	case errors.Is(err, order.ErrMismatch):
		writeError(w, http.StatusUnprocessableEntity, "mismatch", err.Error())
	case err != nil:
		a.g.internalError(w, r, err)
	default:
		if res.Kind == order.PaymentDuplicate {
			same, err := a.samePayment(r.Context(), p, res.PaymentID)
			if err != nil {
				a.g.internalError(w, r, err)
				return
			}
			if !same {
				writeError(w, http.StatusUnprocessableEntity, statusMismatch, "this callback id or trade number was recorded with another payment")
				return
			}
		}
		out := map[string]any{"result": paymentResults[res.Kind], "order_status": res.Order.Status.String(), "payment_id": res.PaymentID}
		if res.Refund != nil {
			out["refund"] = res.Refund
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// samePayment reports whether the payment recorded as id is the one p
// describes (a redelivery), not another payment under the same callback id
// or trade number.
func (a *api) samePayment(ctx context.Context, p flow.Payment, id uuid.UUID) (bool, error) {
	recs, err := a.s.Orders.Payments(ctx, a.s.Pool, p.OrderID)
	if err != nil {
		return false, err
	}
	for _, rec := range recs {
		if rec.PaymentID == id {
			return rec.ProviderTradeNo == p.ProviderTradeNo && rec.CallbackID == p.CallbackID && rec.Amount == p.Amount &&
				(p.Currency == "" || rec.Currency == p.Currency), nil
		}
	}
	return false, nil
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
		a.g.internalError(w, r, err)
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
		a.g.internalError(w, r, err)
		return
	}
	front, err := a.s.front.State(r.Context())
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, statusUnavailable, "the front door is unavailable, try again")
		return
	}
	c := &a.s.stats
	writeJSON(w, http.StatusOK, map[string]any{
		"clicks": c.clicks.Load(), "front_accepted": c.frontAccepted.Load(), "front_sold_out": c.frontSoldOut.Load(),
		"orders_created": c.created.Load(), "rejected_sold_out": c.soldOut.Load(), "rejected_user_already": c.userAlready.Load(),
		"duplicates": c.duplicates.Load(), "paid": c.paid.Load(), "cancelled": c.cancelled.Load(),
		"queue_pending": a.s.q.Pending(r.Context()), "front_available": front.TotalAvailable(), "front_held": len(front.Held),
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
		a.g.internalError(w, r, err)
		return
	}
	code := http.StatusOK
	if !rec.Passed() {
		code = http.StatusInternalServerError
	}
	writeJSON(w, code, map[string]any{"passed": rec.Passed(), "reconciliation": rec})
}
